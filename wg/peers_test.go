package wg

import (
	"bytes"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

func TestPlanPeers(t *testing.T) {
	a, b, c := mustKey(t).PublicKey(), mustKey(t).PublicKey(), mustKey(t).PublicKey()
	psk := mustKey(t)
	pfx := netip.MustParsePrefix
	ep := netip.MustParseAddrPort("198.51.100.2:51820")
	ep2 := netip.MustParseAddrPort("198.51.100.9:4000")
	nets := func(ss ...string) []net.IPNet {
		var ps []netip.Prefix
		for _, s := range ss {
			ps = append(ps, pfx(s))
		}
		return ipNets(ps)
	}
	devPeer := func(k wgtypes.Key, ka time.Duration, e netip.AddrPort, allowed ...string) wgtypes.Peer {
		return wgtypes.Peer{PublicKey: k, PersistentKeepaliveInterval: ka, Endpoint: udpAddr(e), AllowedIPs: nets(allowed...),
			LastHandshakeTime: time.Unix(1000, 0), ReceiveBytes: 7}
	}
	ka := DefaultKeepalive

	type change struct {
		key            wgtypes.Key
		remove, update bool
		allowed        []string // nil: allowed IPs not touched
		keepalive      *time.Duration
		endpoint       netip.AddrPort
		psk            *wgtypes.Key
	}
	tests := []struct {
		name string
		have []wgtypes.Peer
		want []Peer
		plan []change
	}{
		{name: "nothing to do when they match, whatever the device has seen",
			have: []wgtypes.Peer{devPeer(a, ka, ep, "10.77.0.2/32")},
			want: []Peer{{PublicKey: a, AllowedIPs: []netip.Prefix{pfx("10.77.0.2/32")}, Endpoint: ep}}},
		{name: "a new peer is added with its endpoint and a keepalive",
			have: []wgtypes.Peer{devPeer(a, ka, ep, "10.77.0.2/32")},
			want: []Peer{{PublicKey: a, AllowedIPs: []netip.Prefix{pfx("10.77.0.2/32")}}, {PublicKey: b, AllowedIPs: []netip.Prefix{pfx("10.77.0.3/32")}, Endpoint: ep2}},
			plan: []change{{key: b, allowed: []string{"10.77.0.3/32"}, keepalive: &ka, endpoint: ep2}}},
		{name: "a peer no longer wanted is removed and nothing else",
			have: []wgtypes.Peer{devPeer(a, ka, ep, "10.77.0.2/32"), devPeer(b, ka, ep2, "10.77.0.3/32")},
			want: []Peer{{PublicKey: a, AllowedIPs: []netip.Prefix{pfx("10.77.0.2/32")}}},
			plan: []change{{key: b, remove: true}}},
		{name: "changed allowed IPs are replaced, in place",
			have: []wgtypes.Peer{devPeer(a, ka, ep, "10.77.0.2/32")},
			want: []Peer{{PublicKey: a, AllowedIPs: []netip.Prefix{pfx("10.77.0.2/32"), pfx("10.99.0.0/16")}}},
			plan: []change{{key: a, update: true, allowed: []string{"10.77.0.2/32", "10.99.0.0/16"}}}},
		{name: "allowed IPs compare as sets, host bits masked",
			have: []wgtypes.Peer{devPeer(a, ka, ep, "10.99.0.0/16", "10.77.0.2/32")},
			want: []Peer{{PublicKey: a, AllowedIPs: []netip.Prefix{pfx("10.77.0.2/32"), pfx("10.99.1.1/16")}}}},
		{name: "a peer without keepalive gets one",
			have: []wgtypes.Peer{devPeer(a, 0, ep, "10.77.0.2/32")},
			want: []Peer{{PublicKey: a, AllowedIPs: []netip.Prefix{pfx("10.77.0.2/32")}}},
			plan: []change{{key: a, update: true, keepalive: &ka}}},
		{name: "an endpoint is given to a peer the device has none for",
			have: []wgtypes.Peer{devPeer(a, ka, netip.AddrPort{}, "10.77.0.2/32")},
			want: []Peer{{PublicKey: a, AllowedIPs: []netip.Prefix{pfx("10.77.0.2/32")}, Endpoint: ep}},
			plan: []change{{key: a, update: true, endpoint: ep}}},
		{name: "a roamed endpoint the device learned is kept",
			have: []wgtypes.Peer{devPeer(a, ka, ep2, "10.77.0.2/32")},
			want: []Peer{{PublicKey: a, AllowedIPs: []netip.Prefix{pfx("10.77.0.2/32")}, Endpoint: ep}}},
		{name: "a preshared key is set",
			have: []wgtypes.Peer{devPeer(a, ka, ep, "10.77.0.2/32")},
			want: []Peer{{PublicKey: a, PresharedKey: psk, AllowedIPs: []netip.Prefix{pfx("10.77.0.2/32")}}},
			plan: []change{{key: a, update: true, psk: &psk}}},
		{name: "add, update and remove at once, ordered by key",
			have: []wgtypes.Peer{devPeer(a, 0, ep, "10.77.0.2/32"), devPeer(b, ka, ep2, "10.77.0.3/32")},
			want: []Peer{{PublicKey: c, AllowedIPs: []netip.Prefix{pfx("10.77.0.4/32")}}, {PublicKey: a, AllowedIPs: []netip.Prefix{pfx("10.77.0.2/32")}}},
			plan: []change{{key: a, update: true, keepalive: &ka}, {key: b, remove: true}, {key: c, allowed: []string{"10.77.0.4/32"}, keepalive: &ka}}},
		{name: "an empty want removes every peer",
			have: []wgtypes.Peer{devPeer(a, ka, ep, "10.77.0.2/32")},
			plan: []change{{key: a, remove: true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := planPeers(tt.have, tt.want)
			// planPeers orders by key
			want := slices.Clone(tt.plan)
			slices.SortFunc(want, func(x, y change) int { return bytes.Compare(x.key[:], y.key[:]) })
			if len(got) != len(want) {
				t.Fatalf("plan has %d changes, want %d: %+v", len(got), len(want), got)
			}
			for i, g := range got {
				w := want[i]
				if g.PublicKey != w.key || g.Remove != w.remove || g.UpdateOnly != w.update {
					t.Errorf("change %d: key/remove/update = %v/%v/%v, want %v/%v/%v", i, g.PublicKey == w.key, g.Remove, g.UpdateOnly, true, w.remove, w.update)
				}
				if w.allowed == nil {
					if g.ReplaceAllowedIPs || len(g.AllowedIPs) > 0 {
						t.Errorf("change %d touches allowed IPs: %v", i, g.AllowedIPs)
					}
				} else {
					var ps []netip.Prefix
					for _, s := range w.allowed {
						ps = append(ps, pfx(s))
					}
					if !g.ReplaceAllowedIPs || !samePrefixes(prefixesOf(g.AllowedIPs), ps) {
						t.Errorf("change %d allowed IPs = %v (replace %v), want %v", i, g.AllowedIPs, g.ReplaceAllowedIPs, ps)
					}
				}
				if (g.PersistentKeepaliveInterval == nil) != (w.keepalive == nil) ||
					(w.keepalive != nil && *g.PersistentKeepaliveInterval != *w.keepalive) {
					t.Errorf("change %d keepalive = %v, want %v", i, g.PersistentKeepaliveInterval, w.keepalive)
				}
				if addrPortOf(g.Endpoint) != w.endpoint {
					t.Errorf("change %d endpoint = %v, want %v", i, g.Endpoint, w.endpoint)
				}
				if (g.PresharedKey == nil) != (w.psk == nil) || (w.psk != nil && *g.PresharedKey != *w.psk) {
					t.Errorf("change %d preshared key wrong", i)
				}
			}
		})
	}
}
