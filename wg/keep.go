package wg

// What a takeover keeps of the found interface beyond what the record holds. The record holds
// what every node must agree on (the key, port and IPv4 address, the range, a peer's key and
// address); everything else a peer or the machine depends on is read from the live device and
// link at the takeover, kept on the machine (sealed: it holds the preshared keys), and laid over
// the record's configuration on every pass, so the mesh's interface keeps matching the found one
// field by field long after the found one is gone.

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// Kept is what a takeover carries of a found interface beyond the record.
type Kept struct {
	Name string `json:"name"`
	// PublicKey and ListenPort are the found key's public half and port, which the record holds
	// too: kept here so the mesh's interface can be compared with the found one on its own.
	PublicKey  wgtypes.Key `json:"-"`
	PublicText string      `json:"public_key"`
	ListenPort int         `json:"listen_port"`
	// MTU is the found link's MTU (wg-quick's own, computed, where its file gives none).
	MTU int `json:"mtu,omitempty"`
	// FwMark is the device's firewall mark: a full-tunnel peer's policy routing needs it.
	FwMark int `json:"fwmark,omitempty"`
	// Addresses are every address of the found link, IPv4 and IPv6.
	Addresses []netip.Prefix `json:"addresses,omitempty"`
	// Routes are the routes through the found link its owner installed, every table.
	Routes []Route `json:"routes,omitempty"`
	// Rules are the policy rules into the found link's own tables (a full tunnel's).
	Rules []Rule     `json:"rules,omitempty"`
	Peers []KeptPeer `json:"peers,omitempty"`
	// Hooks are the found wg-quick file's PreUp/PostUp/PreDown/PostDown lines, which meshd runs
	// where wg-quick would have: PreUp and PostUp each time it raises the interface anew (a boot).
	Hooks Hooks `json:"hooks,omitzero"`
	// Tables are wg-quick's own nftables tables for the found interface (ReadQuickTables), put
	// back when the interface is raised anew.
	Tables []QuickTable `json:"wg_quick_tables,omitempty"`
	// DNS are the found file's DNS= values, handed to resolvconf as wg-quick does (DNSLine)
	// when the interface is raised anew.
	DNS []string `json:"dns,omitempty"`
}

// KeptPeer is what the found device had for one peer.
type KeptPeer struct {
	PublicKey    wgtypes.Key
	PresharedKey wgtypes.Key // zero: none
	AllowedIPs   []netip.Prefix
	Keepalive    time.Duration // 0: none
	Endpoint     netip.AddrPort
}

type keptPeerJSON struct {
	PublicKey    string         `json:"public_key"`
	PresharedKey string         `json:"preshared_key,omitempty"`
	AllowedIPs   []netip.Prefix `json:"allowed_ips,omitempty"`
	Keepalive    int            `json:"keepalive,omitempty"` // seconds
	Endpoint     netip.AddrPort `json:"endpoint,omitzero"`
}

// MarshalJSON writes keys in WireGuard's base64.
func (p KeptPeer) MarshalJSON() ([]byte, error) {
	j := keptPeerJSON{PublicKey: p.PublicKey.String(), AllowedIPs: p.AllowedIPs, Keepalive: int(p.Keepalive / time.Second), Endpoint: p.Endpoint}
	if p.PresharedKey != (wgtypes.Key{}) {
		j.PresharedKey = p.PresharedKey.String()
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON wrote.
func (p *KeptPeer) UnmarshalJSON(b []byte) error {
	var j keptPeerJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	k, err := wgtypes.ParseKey(j.PublicKey)
	if err != nil {
		return fmt.Errorf("kept peer key %q: %w", j.PublicKey, err)
	}
	*p = KeptPeer{PublicKey: k, AllowedIPs: j.AllowedIPs, Keepalive: time.Duration(j.Keepalive) * time.Second, Endpoint: j.Endpoint}
	if j.PresharedKey != "" {
		if p.PresharedKey, err = wgtypes.ParseKey(j.PresharedKey); err != nil {
			return fmt.Errorf("kept preshared key of peer %s: %w", j.PublicKey, err)
		}
	}
	return nil
}

// ReadKept parses what json.Marshal wrote of a Kept.
func ReadKept(b []byte) (Kept, error) {
	var k Kept
	if err := json.Unmarshal(b, &k); err != nil {
		return Kept{}, fmt.Errorf("the kept found interface: %w", err)
	}
	if k.PublicText != "" {
		pub, err := wgtypes.ParseKey(k.PublicText)
		if err != nil {
			return Kept{}, fmt.Errorf("the kept found interface's key %q: %w", k.PublicText, err)
		}
		k.PublicKey = pub
	}
	return k, nil
}

// Keep is what a takeover of f carries beyond the record.
func Keep(f *Found) Kept {
	pub := f.PrivateKey.PublicKey()
	k := Kept{Name: f.Name, PublicKey: pub, PublicText: pub.String(), ListenPort: f.ListenPort, MTU: f.MTU, FwMark: f.FwMark, Addresses: slices.Clone(f.Addresses), Routes: slices.Clone(f.Routes), Rules: slices.Clone(f.Rules)}
	if f.File != nil {
		k.Hooks, k.DNS = f.File.Hooks, slices.Clone(f.File.DNS)
	}
	for _, p := range f.Peers {
		k.Peers = append(k.Peers, KeptPeer{PublicKey: p.PublicKey, PresharedKey: p.PresharedKey,
			AllowedIPs: slices.Clone(p.AllowedIPs), Keepalive: p.Keepalive, Endpoint: p.Endpoint})
	}
	return k
}

// Apply lays k over cfg, the configuration the record asks for: the found MTU, firewall mark,
// every found address, the found routes as they were; and for each of cfg's peers the found
// device had, its preshared key, every allowed IP it had (the record's are kept too), its own
// keepalive when it had one, its endpoint when cfg knows none. A found peer cfg does not have
// stays out: the record says who is a peer. The allowed IPs only the found device had are routed
// as the found routes say (AsFound), not derived: a file with Table = off had no route for them.
func (k Kept) Apply(cfg Config) Config {
	if k.MTU > 0 {
		cfg.MTU = k.MTU
	}
	cfg.FwMark = k.FwMark
	cfg.MoreAddresses = nil
	for _, a := range k.Addresses {
		if a != cfg.Address {
			cfg.MoreAddresses = append(cfg.MoreAddresses, a)
		}
	}
	cfg.Routes = slices.Clone(k.Routes)
	cfg.Rules = slices.Clone(k.Rules)
	byKey := make(map[wgtypes.Key]KeptPeer, len(k.Peers))
	for _, p := range k.Peers {
		byKey[p.PublicKey] = p
	}
	cfg.AsFound = nil
	peers := make([]Peer, len(cfg.Peers))
	for i, p := range cfg.Peers {
		kp, ok := byKey[p.PublicKey]
		if !ok {
			peers[i] = p
			continue
		}
		if p.PresharedKey == (wgtypes.Key{}) {
			p.PresharedKey = kp.PresharedKey
		}
		p.AllowedIPs = slices.Clone(p.AllowedIPs)
		for _, a := range kp.AllowedIPs {
			if !containsPrefix(p.AllowedIPs, a) {
				p.AllowedIPs = append(p.AllowedIPs, a.Masked())
				cfg.AsFound = append(cfg.AsFound, a.Masked())
			}
		}
		if kp.Keepalive > 0 {
			p.Keepalive = kp.Keepalive
		}
		if !p.Endpoint.IsValid() {
			p.Endpoint = kp.Endpoint
		}
		peers[i] = p
	}
	cfg.Peers = peers
	return cfg
}

func containsPrefix(ps []netip.Prefix, p netip.Prefix) bool {
	return slices.ContainsFunc(ps, func(q netip.Prefix) bool { return q.Masked() == p.Masked() })
}

// Field is one field of a found interface beside the mesh's interface that took it over (or
// will): what `meshd tunnel show` and a takeover's preview list, so the operator sees the same
// interface on both sides. A preshared key is never shown, only whether there is one.
type Field struct {
	Field string `json:"field"`
	Found string `json:"found"`
	Mesh  string `json:"mesh"`
	Same  bool   `json:"same"`
	// Added says the mesh has what the found interface had not (a keepalive on a peer that had
	// none): not the same, but nothing lost, so nothing refuses it.
	Added bool `json:"added,omitempty"`
}

// Match lists k's fields beside mesh's, the mesh's interface as it is (Discover) or as it will
// be raised (ConfigView). Allowed IPs, addresses and routes match when mesh has every one k has
// (the record may add its own); an endpoint is not compared (a peer roams).
func (k Kept) Match(mesh *Found) []Field {
	var out []Field
	add := func(field, found, have string, same bool) {
		out = append(out, Field{Field: field, Found: found, Mesh: have, Same: same})
	}
	add("interface", k.Name, mesh.Name, k.Name == mesh.Name)
	add("public key", keyText(k.PublicKey), keyText(mesh.PrivateKey.PublicKey()), k.PublicKey == mesh.PrivateKey.PublicKey())
	add("listen port", strconv.Itoa(k.ListenPort), strconv.Itoa(mesh.ListenPort), k.ListenPort == mesh.ListenPort)
	add("addresses", prefixesText(k.Addresses), prefixesText(mesh.Addresses), allIn(k.Addresses, mesh.Addresses))
	add("mtu", strconv.Itoa(k.MTU), strconv.Itoa(mesh.MTU), k.MTU == 0 || k.MTU == mesh.MTU)
	add("fwmark", markText(k.FwMark), markText(mesh.FwMark), k.FwMark == mesh.FwMark)
	haveRoute := func(r Route) bool {
		return slices.ContainsFunc(mesh.Routes, func(m Route) bool { return m.Dst == r.Dst && m.Table == r.Table })
	}
	sameRoutes := true
	for _, r := range k.Routes {
		sameRoutes = sameRoutes && haveRoute(r)
	}
	add("routes", listText(texts(k.Routes)), listText(texts(mesh.Routes)), sameRoutes)
	sameRules := true
	for _, r := range k.Rules {
		sameRules = sameRules && slices.ContainsFunc(mesh.Rules, func(m Rule) bool {
			return m.Family == r.Family && m.Table == r.Table && m.Mark == r.Mark && m.Invert == r.Invert && m.SuppressPrefixlen == r.SuppressPrefixlen
		})
	}
	if len(k.Rules) > 0 {
		add("policy rules", listText(texts(k.Rules)), listText(texts(mesh.Rules)), sameRules)
	}
	if len(k.Tables) > 0 {
		add("wg-quick tables", listText(texts(k.Tables)), "kept, put back when meshd raises "+mesh.Name, true)
	}
	if len(k.DNS) > 0 {
		add("dns (resolvconf)", strings.Join(k.DNS, ", "), "handed to resolvconf when meshd raises "+mesh.Name, true)
	}
	if !k.Hooks.Empty() {
		n := len(k.Hooks.PreUp) + len(k.Hooks.PostUp)
		add("hooks (PreUp, PostUp)", fmt.Sprintf("%d lines, run by wg-quick at up", n), fmt.Sprintf("%d lines, run by meshd when it raises %s", n, mesh.Name), true)
	}
	meshPeers := map[wgtypes.Key]PeerStatus{}
	for _, p := range mesh.Peers {
		meshPeers[p.PublicKey] = p
	}
	for _, kp := range k.Peers {
		name := "peer " + kp.PublicKey.String()
		mp, ok := meshPeers[kp.PublicKey]
		if !ok {
			add(name, "present", "not carried", false)
			continue
		}
		add(name+" preshared key", pskText(kp.PresharedKey), pskText(mp.PresharedKey), kp.PresharedKey == mp.PresharedKey)
		add(name+" allowed ips", prefixesText(kp.AllowedIPs), prefixesText(mp.AllowedIPs), allIn(kp.AllowedIPs, mp.AllowedIPs))
		if kp.Keepalive > 0 || mp.Keepalive > 0 {
			add(name+" keepalive", durationText(kp.Keepalive), durationText(mp.Keepalive), kp.Keepalive == mp.Keepalive)
			out[len(out)-1].Added = kp.Keepalive == 0 && mp.Keepalive > 0
		}
	}
	return out
}

// Preview is what a takeover of f will raise beside what f is, field by field, before anything
// stops: the record's part as a take records it (the key, port and IPv4 address, each peer with
// its addresses in the tunnel's range and its endpoint) with Keep(f) laid over it, as the
// driver raises it. What the preflights list; a field that differs is one meshd cannot carry.
func Preview(f *Found) []Field {
	cfg := Config{Name: f.Name, PrivateKey: f.PrivateKey, ListenPort: f.ListenPort, Address: f.Address()}
	rng := f.Range()
	for _, p := range f.Peers {
		var in []netip.Prefix
		for _, a := range p.AllowedIPs {
			if rng.IsValid() && a.Addr().Is4() == rng.Addr().Is4() && a.Bits() >= rng.Bits() && rng.Contains(a.Addr()) {
				in = append(in, a)
			}
		}
		cfg.Peers = append(cfg.Peers, Peer{PublicKey: p.PublicKey, AllowedIPs: in, Endpoint: p.Endpoint})
	}
	k := Keep(f)
	return k.Match(ConfigView(k.Apply(cfg)))
}

// ConfigView is cfg as Discover would read the interface it raises: what a preview compares.
func ConfigView(cfg Config) *Found {
	f := &Found{Name: cfg.Name, PrivateKey: cfg.PrivateKey, ListenPort: cfg.ListenPort, MTU: cfg.MTU, FwMark: cfg.FwMark,
		Addresses: append([]netip.Prefix{cfg.Address}, cfg.MoreAddresses...), Routes: slices.Clone(cfg.Routes), Rules: slices.Clone(cfg.Rules)}
	if f.MTU == 0 {
		f.MTU = 1420
	}
	for _, p := range cfg.Peers {
		p.Keepalive = p.keepalive()
		f.Peers = append(f.Peers, PeerStatus{Peer: p})
	}
	return f
}

// Differs lists the fields of fs that do not match, as "field: found X, mesh Y" (one the mesh
// only added is not among them).
func Differs(fs []Field) []string {
	var out []string
	for _, f := range fs {
		if !f.Same && !f.Added {
			out = append(out, fmt.Sprintf("%s: found %s, mesh %s", f.Field, f.Found, f.Mesh))
		}
	}
	return out
}

func allIn(want, have []netip.Prefix) bool {
	for _, w := range want {
		if !slices.ContainsFunc(have, func(h netip.Prefix) bool { return h == w || h.Masked() == w.Masked() && w.Addr() == w.Masked().Addr() }) {
			return false
		}
	}
	return true
}

// texts is each of vs as it prints.
func texts[T fmt.Stringer](vs []T) []string {
	out := make([]string, 0, len(vs))
	for _, v := range vs {
		out = append(out, v.String())
	}
	return out
}

func durationText(d time.Duration) string {
	if d == 0 {
		return "none"
	}
	return d.String()
}

func keyText(k wgtypes.Key) string {
	if k == (wgtypes.Key{}) {
		return "none"
	}
	return k.String()
}

func pskText(k wgtypes.Key) string {
	if k == (wgtypes.Key{}) {
		return "none"
	}
	return "set"
}

func markText(m int) string {
	if m == 0 {
		return "off"
	}
	return fmt.Sprintf("0x%x", m)
}

func prefixesText(ps []netip.Prefix) string {
	s := make([]string, 0, len(ps))
	for _, p := range ps {
		s = append(s, p.String())
	}
	return listText(s)
}

func listText(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
