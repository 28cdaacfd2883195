package wg

import (
	"bytes"
	"net"
	"net/netip"
	"slices"
	"sort"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// DefaultKeepalive is the persistent keepalive a peer gets when nothing says otherwise. Without
// one, a peer's session takes ~15 s to resume after the hub changes hands (measured on these
// machines); with one, the hub's side starts the handshake itself as soon as it is up.
const DefaultKeepalive = 25 * time.Second

// Peer is one peer as the mesh wants it.
type Peer struct {
	PublicKey    wgtypes.Key
	PresharedKey wgtypes.Key // zero: none
	AllowedIPs   []netip.Prefix
	Endpoint     netip.AddrPort // zero: not known
	Keepalive    time.Duration  // 0 means DefaultKeepalive; a peer here always gets one
}

// PeerStatus is a peer as a device has it: its configuration and what it has seen.
type PeerStatus struct {
	Peer
	LastHandshake time.Time // zero: never
	ReceiveBytes  int64
	TransmitBytes int64
}

func (p Peer) keepalive() time.Duration {
	if p.Keepalive <= 0 {
		return DefaultKeepalive
	}
	return p.Keepalive
}

// planPeers is the change that makes a device's peers (have) equal to want, as wgctrl peer
// configurations meant for a Config with ReplacePeers false: new peers are added, a peer whose
// allowed IPs, keepalive or preshared key differ is updated in those fields only (UpdateOnly),
// a peer that is no longer wanted is removed, and a peer that already matches is left out, so
// its session is never touched. The result is ordered by public key.
//
// An endpoint is set when a peer is added and when the device knows none for it; a device's
// endpoint that differs from the wanted one is kept, because WireGuard learns a peer's current
// address from its authenticated packets (roaming) and that is newer than any record.
func planPeers(have []wgtypes.Peer, want []Peer) []wgtypes.PeerConfig {
	byKey := make(map[wgtypes.Key]wgtypes.Peer, len(have))
	for _, h := range have {
		byKey[h.PublicKey] = h
	}
	var out []wgtypes.PeerConfig
	wanted := make(map[wgtypes.Key]bool, len(want))
	for _, w := range want {
		wanted[w.PublicKey] = true
		h, ok := byKey[w.PublicKey]
		if !ok {
			out = append(out, addPeer(w))
			continue
		}
		if c, changed := updatePeer(h, w); changed {
			out = append(out, c)
		}
	}
	for _, h := range have {
		if !wanted[h.PublicKey] {
			out = append(out, wgtypes.PeerConfig{PublicKey: h.PublicKey, Remove: true})
		}
	}
	sort.Slice(out, func(i, j int) bool { return bytes.Compare(out[i].PublicKey[:], out[j].PublicKey[:]) < 0 })
	return out
}

func addPeer(w Peer) wgtypes.PeerConfig {
	ka := w.keepalive()
	c := wgtypes.PeerConfig{
		PublicKey:                   w.PublicKey,
		PersistentKeepaliveInterval: &ka,
		ReplaceAllowedIPs:           true,
		AllowedIPs:                  ipNets(w.AllowedIPs),
		Endpoint:                    udpAddr(w.Endpoint),
	}
	if w.PresharedKey != (wgtypes.Key{}) {
		psk := w.PresharedKey
		c.PresharedKey = &psk
	}
	return c
}

func updatePeer(h wgtypes.Peer, w Peer) (wgtypes.PeerConfig, bool) {
	c := wgtypes.PeerConfig{PublicKey: w.PublicKey, UpdateOnly: true}
	changed := false
	if !samePrefixes(prefixesOf(h.AllowedIPs), w.AllowedIPs) {
		c.ReplaceAllowedIPs, c.AllowedIPs, changed = true, ipNets(w.AllowedIPs), true
	}
	if ka := w.keepalive(); h.PersistentKeepaliveInterval != ka {
		c.PersistentKeepaliveInterval, changed = &ka, true
	}
	if h.PresharedKey != w.PresharedKey {
		psk := w.PresharedKey // the zero key clears it
		c.PresharedKey, changed = &psk, true
	}
	if h.Endpoint == nil && w.Endpoint.IsValid() {
		c.Endpoint, changed = udpAddr(w.Endpoint), true
	}
	return c, changed
}

func samePrefixes(a, b []netip.Prefix) bool {
	norm := func(ps []netip.Prefix) []netip.Prefix {
		out := make([]netip.Prefix, 0, len(ps))
		for _, p := range ps {
			out = append(out, p.Masked())
		}
		slices.SortFunc(out, func(x, y netip.Prefix) int {
			if c := x.Addr().Compare(y.Addr()); c != 0 {
				return c
			}
			return x.Bits() - y.Bits()
		})
		return slices.Compact(out)
	}
	return slices.Equal(norm(a), norm(b))
}

func ipNets(ps []netip.Prefix) []net.IPNet {
	out := make([]net.IPNet, 0, len(ps))
	for _, p := range ps {
		p = p.Masked()
		out = append(out, net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())})
	}
	return out
}

func prefixesOf(ns []net.IPNet) []netip.Prefix {
	out := make([]netip.Prefix, 0, len(ns))
	for _, n := range ns {
		a, ok := netip.AddrFromSlice(n.IP)
		if !ok {
			continue
		}
		a = a.Unmap()
		ones, _ := n.Mask.Size()
		out = append(out, netip.PrefixFrom(a, ones))
	}
	return out
}

func udpAddr(ap netip.AddrPort) *net.UDPAddr {
	if !ap.IsValid() {
		return nil
	}
	return net.UDPAddrFromAddrPort(ap)
}

func addrPortOf(u *net.UDPAddr) netip.AddrPort {
	if u == nil {
		return netip.AddrPort{}
	}
	ap := u.AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// statusOf converts a device's peer.
func statusOf(p wgtypes.Peer) PeerStatus {
	return PeerStatus{
		Peer: Peer{
			PublicKey:    p.PublicKey,
			PresharedKey: p.PresharedKey,
			AllowedIPs:   prefixesOf(p.AllowedIPs),
			Endpoint:     addrPortOf(p.Endpoint),
			Keepalive:    p.PersistentKeepaliveInterval,
		},
		LastHandshake: p.LastHandshakeTime,
		ReceiveBytes:  p.ReceiveBytes,
		TransmitBytes: p.TransmitBytes,
	}
}
