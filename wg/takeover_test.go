package wg

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestTakeoverConfigCarriesTheFoundTunnel(t *testing.T) {
	key := mustKey(t)
	p1, p2 := mustKey(t).PublicKey(), mustKey(t).PublicKey()
	f := &Found{Name: "wg0", PrivateKey: key, ListenPort: 51820,
		Addresses: []netip.Prefix{netip.MustParsePrefix("fd77::1/64"), netip.MustParsePrefix("10.77.0.1/24")},
		Peers: []PeerStatus{
			{Peer: Peer{PublicKey: p1, AllowedIPs: []netip.Prefix{netip.MustParsePrefix("10.77.0.2/32")}, Endpoint: netip.MustParseAddrPort("198.51.100.2:40000")}, LastHandshake: time.Now()},
			{Peer: Peer{PublicKey: p2, AllowedIPs: []netip.Prefix{netip.MustParsePrefix("10.77.0.3/32")}, Keepalive: 10 * time.Second}},
		}}
	cfg, err := TakeoverConfig(f, "mesh0")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Name != "mesh0" || cfg.PrivateKey != key || cfg.ListenPort != 51820 || cfg.Address != netip.MustParsePrefix("10.77.0.1/24") {
		t.Errorf("config = name %s port %d address %v; want the found key, port and IPv4 address", cfg.Name, cfg.ListenPort, cfg.Address)
	}
	if f.Range() != netip.MustParsePrefix("10.77.0.0/24") {
		t.Errorf("range = %v", f.Range())
	}
	if len(cfg.Peers) != 2 {
		t.Fatalf("peers = %d", len(cfg.Peers))
	}
	if a := cfg.Peers[0]; a.PublicKey != p1 || a.Endpoint != f.Peers[0].Endpoint || a.Keepalive != DefaultKeepalive || !samePrefixes(a.AllowedIPs, f.Peers[0].AllowedIPs) {
		t.Errorf("peer 1 carried as %+v: want its endpoint and a keepalive", a)
	}
	if b := cfg.Peers[1]; b.Keepalive != 10*time.Second {
		t.Errorf("peer 2's own keepalive not kept: %v", b.Keepalive)
	}
}

func TestTakeoverConfigRefusesAnIncompleteTunnel(t *testing.T) {
	for name, f := range map[string]*Found{
		"no key":     {Name: "wg0", ListenPort: 51820, Addresses: []netip.Prefix{netip.MustParsePrefix("10.77.0.1/24")}},
		"no port":    {Name: "wg0", PrivateKey: mustKey(t), Addresses: []netip.Prefix{netip.MustParsePrefix("10.77.0.1/24")}},
		"no address": {Name: "wg0", PrivateKey: mustKey(t), ListenPort: 51820},
	} {
		if _, err := TakeoverConfig(f, "mesh0"); err == nil || !strings.Contains(err.Error(), "wg0") {
			t.Errorf("%s: err = %v, want a refusal naming wg0", name, err)
		}
	}
}

func TestStateSaysThreeThings(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range []State{FoundUp, MeshUp, Dark} {
		seen[s.String()] = true
	}
	if len(seen) != 3 || !strings.Contains(Dark.String(), "not up") {
		t.Errorf("states: %v", seen)
	}
}
