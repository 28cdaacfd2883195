package wg

import (
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"
)

// A found hub as PiVPN writes one: dual stack, an MTU, a preshared key per peer, a site behind
// one peer, and a full-tunnel client's policy routing (fwmark, its own table).
func realHub(t *testing.T) (*Found, Config) {
	key, p1, p2 := mustKey(t), mustKey(t), mustKey(t)
	psk1, psk2 := mustKey(t), mustKey(t)
	f := &Found{Name: "wg0", PrivateKey: key, ListenPort: 51820, MTU: 1380, FwMark: 0xca6c,
		Addresses: []netip.Prefix{netip.MustParsePrefix("10.77.0.1/24"), netip.MustParsePrefix("fd77::1/64")},
		Routes: []Route{
			{Dst: netip.MustParsePrefix("10.88.1.0/24"), Table: MainTable, Scope: 253},
			{Dst: netip.MustParsePrefix("0.0.0.0/0"), Table: 51820, Scope: 253},
		},
		Rules: []Rule{
			{Family: 2, Table: 51820, Mark: 51820, Invert: true, SuppressPrefixlen: -1},
			{Family: 2, Table: MainTable, SuppressPrefixlen: 0},
		},
		File: &QuickFile{Hooks: Hooks{PostUp: []string{"iptables -A FORWARD -i %i -j ACCEPT"}}},
		Peers: []PeerStatus{
			{Peer: Peer{PublicKey: p1.PublicKey(), PresharedKey: psk1, Keepalive: 15 * time.Second, Endpoint: netip.MustParseAddrPort("198.51.100.2:44755"),
				AllowedIPs: []netip.Prefix{netip.MustParsePrefix("10.77.0.2/32"), netip.MustParsePrefix("fd77::2/128"), netip.MustParsePrefix("10.88.1.0/24")}}},
			{Peer: Peer{PublicKey: p2.PublicKey(), PresharedKey: psk2,
				AllowedIPs: []netip.Prefix{netip.MustParsePrefix("10.77.0.3/32"), netip.MustParsePrefix("fd77::3/128")}}},
		}}
	// What the record asks for: the IPv4 address, and each peer's one address in the range.
	rec := Config{Name: "wg0", PrivateKey: key, ListenPort: 51820, Address: netip.MustParsePrefix("10.77.0.1/24"), Peers: []Peer{
		{PublicKey: p1.PublicKey(), AllowedIPs: []netip.Prefix{netip.MustParsePrefix("10.77.0.2/32")}, Keepalive: DefaultKeepalive},
		{PublicKey: p2.PublicKey(), AllowedIPs: []netip.Prefix{netip.MustParsePrefix("10.77.0.3/32")}, Keepalive: DefaultKeepalive},
	}}
	return f, rec
}

func TestKeptCarriesEveryFieldOverTheRecord(t *testing.T) {
	f, rec := realHub(t)
	cfg := Keep(f).Apply(rec)
	if cfg.MTU != 1380 {
		t.Errorf("MTU %d, want the found 1380", cfg.MTU)
	}
	if cfg.FwMark != 0xca6c {
		t.Errorf("fwmark %#x, want the found 0xca6c", cfg.FwMark)
	}
	if !slices.Equal(cfg.MoreAddresses, []netip.Prefix{netip.MustParsePrefix("fd77::1/64")}) {
		t.Errorf("more addresses %v, want the found IPv6 address", cfg.MoreAddresses)
	}
	if !slices.Equal(cfg.Routes, f.Routes) {
		t.Errorf("routes %v, want the found %v", cfg.Routes, f.Routes)
	}
	if !slices.Equal(cfg.Rules, f.Rules) {
		t.Errorf("policy rules %v, want the found %v", cfg.Rules, f.Rules)
	}
	p1, p2 := cfg.Peers[0], cfg.Peers[1]
	if p1.PresharedKey != f.Peers[0].PresharedKey || p2.PresharedKey != f.Peers[1].PresharedKey {
		t.Error("a peer lost its preshared key")
	}
	if !samePrefixes(p1.AllowedIPs, f.Peers[0].AllowedIPs) || !samePrefixes(p2.AllowedIPs, f.Peers[1].AllowedIPs) {
		t.Errorf("allowed IPs %v and %v, want the found %v and %v", p1.AllowedIPs, p2.AllowedIPs, f.Peers[0].AllowedIPs, f.Peers[1].AllowedIPs)
	}
	if p1.Keepalive != 15*time.Second || p2.Keepalive != DefaultKeepalive {
		t.Errorf("keepalives %v, %v: want the found 15s, and the record's where the found had none", p1.Keepalive, p2.Keepalive)
	}
	if p1.Endpoint != f.Peers[0].Endpoint {
		t.Errorf("endpoint %v, want the one the found device learned, %v", p1.Endpoint, f.Peers[0].Endpoint)
	}
	// The site is routed as it was found, not derived a second time.
	if !containsPrefix(cfg.AsFound, netip.MustParsePrefix("10.88.1.0/24")) {
		t.Errorf("the site's allowed IP is not marked as found: %v", cfg.AsFound)
	}
	// and the match says so, field by field: every field the same, but the keepalive the mesh
	// gives the peer that had none, which it says it added.
	p2key := "peer " + f.Peers[1].PublicKey.String() + " keepalive"
	for _, fd := range Keep(f).Match(ConfigView(cfg)) {
		switch {
		case fd.Field == p2key:
			if fd.Same || !fd.Added || fd.Found != "none" || fd.Mesh != DefaultKeepalive.String() {
				t.Errorf("the keepalive the mesh adds reads %+v; want found none, mesh %s, added", fd, DefaultKeepalive)
			}
		case !fd.Same:
			t.Errorf("field %s: found %s, mesh %s", fd.Field, fd.Found, fd.Mesh)
		}
	}
	if d := Differs(Keep(f).Match(ConfigView(cfg))); len(d) > 0 {
		t.Errorf("an added keepalive counts as a difference: %v", d)
	}
}

func TestKeptMatchNamesWhatDiffers(t *testing.T) {
	f, rec := realHub(t)
	// the record alone: what a takeover that read only the file and the record raised
	got := Differs(Keep(f).Match(ConfigView(rec)))
	for _, want := range []string{"addresses", "mtu", "fwmark", "routes", "preshared key", "allowed ips", "keepalive"} {
		if !slices.ContainsFunc(got, func(s string) bool { return containsWord(s, want) }) {
			t.Errorf("the match does not name %q as differing: %v", want, got)
		}
	}
	for _, s := range got {
		for _, p := range f.Peers {
			if containsWord(s, p.PresharedKey.String()) {
				t.Fatalf("a preshared key is shown: %s", s)
			}
		}
	}
}

func TestKeptSurvivesItsFile(t *testing.T) {
	f, _ := realHub(t)
	b, err := json.Marshal(Keep(f))
	if err != nil {
		t.Fatal(err)
	}
	k, err := ReadKept(b)
	if err != nil {
		t.Fatal(err)
	}
	if k.PublicKey != f.PrivateKey.PublicKey() || k.MTU != 1380 || len(k.Peers) != 2 || k.Peers[0].PresharedKey != f.Peers[0].PresharedKey ||
		k.Peers[0].Keepalive != 15*time.Second || !slices.Equal(k.Routes, f.Routes) || !slices.Equal(k.Rules, f.Rules) ||
		!slices.Equal(k.Hooks.PostUp, f.File.Hooks.PostUp) {
		t.Errorf("read back %+v", k)
	}
}

func containsWord(s, w string) bool {
	return strings.Contains(s, w)
}

// The preflight's preview of a takeover lists every field of a real hub, the same on both sides:
// the preshared keys (as set), both addresses, the site behind a peer, the policy rules and the
// hooks meshd will run at a boot.
func TestPreviewListsTheRealHubFieldByField(t *testing.T) {
	f, _ := realHub(t)
	fields := Preview(f)
	if d := Differs(fields); len(d) > 0 {
		t.Errorf("the preview of a real hub differs: %v", d)
	}
	got := map[string]Field{}
	for _, x := range fields {
		got[x.Field] = x
	}
	p1 := "peer " + f.Peers[0].PublicKey.String()
	for name, want := range map[string]string{
		"addresses":             "10.77.0.1/24, fd77::1/64",
		"mtu":                   "1380",
		p1 + " preshared key":   "set",
		p1 + " allowed ips":     "10.77.0.2/32, fd77::2/128, 10.88.1.0/24",
		"policy rules":          "not fwmark 0xca6c lookup 51820, lookup main suppress_prefixlength 0",
		"hooks (PreUp, PostUp)": "1 lines, run by wg-quick at up",
	} {
		if got[name].Found != want {
			t.Errorf("preview field %q: found %q, want %q", name, got[name].Found, want)
		}
	}
}
