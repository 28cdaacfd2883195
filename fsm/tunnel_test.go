package fsm

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"meshd/catalogue"
	"meshd/pki"
)

// wgKey is a real WireGuard public key, as a found tunnel or a joining machine presents one.
func wgKey(t testing.TB) string {
	t.Helper()
	k, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k.PublicKey().String()
}

// foundTunnel is the lab predecessor's hub tunnel: wg0, 10.44.0.1/24 on 51820, two peers, and a
// spoke-style peer routed the whole range.
type foundTunnel struct {
	hub, peer1, peer2, spoke string
	take                     TunnelTake
}

func newFoundTunnel(t testing.TB) foundTunnel {
	f := foundTunnel{hub: wgKey(t), peer1: wgKey(t), peer2: wgKey(t), spoke: wgKey(t)}
	f.take = TunnelTake{Node: "hub", Interface: "wg0", PublicKey: f.hub, Address: "10.44.0.1/24", Port: 51820,
		Peers: []FoundPeer{
			{PublicKey: f.peer1, AllowedIPs: []string{"10.44.0.2/32"}, Endpoint: "198.51.100.11:51820"},
			{PublicKey: f.peer2, AllowedIPs: []string{"10.44.0.3/32"}},
			{PublicKey: f.spoke, AllowedIPs: []string{"10.44.0.0/24"}},
		}}
	return f
}

func takeGenesis(t testing.TB, take *TunnelTake, settings map[string]string) []byte {
	return cmd(t, OpGenesis, t0, Genesis{Node: "hub", ID: "id-hub", Mode: Adopted, Advertise: "198.51.100.10",
		Settings: settings, Catalogue: catalogue.DefaultSources(), Assign: []string{"broker", "mesh", "registry", "store"},
		Tunnel: take})
}

// The controller reads the hub's address, the range and the port from the adopted tunnel, and
// carries its peers as peers of the tunnel, not nodes; a spoke's routed peer is skipped.
func TestUnitGenesisTakesTheTunnelsRangeAddressAndPort(t *testing.T) {
	f := newFoundTunnel(t)
	r := NewRecord()
	mustApply(t, r, takeGenesis(t, &f.take, map[string]string{"registry": "5001"}))
	hub := r.Nodes["hub"]
	if r.Tunnel.Range != "10.44.0.0/24" || r.Tunnel.HubAddress != "10.44.0.1" || hub.Address != "10.44.0.1" || r.Tunnel.Taken != "wg0" {
		t.Fatalf("tunnel %+v, hub address %s: want the found range, address and interface", r.Tunnel, hub.Address)
	}
	if p, err := MeshPort(r, hub, "tunnel"); err != nil || p != 51820 {
		t.Fatalf("mesh.tunnel = %d, %v; want the found port 51820", p, err)
	}
	if hub.WireGuardKey != f.hub {
		t.Fatalf("hub's overlay key %s, want the tunnel's %s", hub.WireGuardKey, f.hub)
	}
	want := map[string]string{f.peer1: "10.44.0.2", f.peer2: "10.44.0.3"}
	if len(r.Tunnel.Carried) != 2 {
		t.Fatalf("carried %+v, want peer1 and peer2 (the spoke's route is skipped)", r.Tunnel.Carried)
	}
	for _, c := range r.Tunnel.Carried {
		if want[c.PublicKey] != c.Address {
			t.Errorf("carried %s at %s, want %s", c.PublicKey, c.Address, want[c.PublicKey])
		}
	}
	if len(r.Nodes) != 1 {
		t.Errorf("carried peers became nodes: %v", r.NodeNames())
	}

	d, err := Compose(r, "hub")
	if err != nil {
		t.Fatal(err)
	}
	tv := d.Tunnel
	if tv.Interface != "wg0" || tv.Address != "10.44.0.1/24" || tv.ListenPort != 51820 || tv.Takeover != "wg0" || tv.PublicKey != f.hub {
		t.Fatalf("hub's tunnel %+v: want the found name wg0 at 10.44.0.1/24 on 51820 taking wg0 over", tv)
	}
	if len(tv.Peers) != 2 {
		t.Fatalf("hub's peers %+v, want the two carried", tv.Peers)
	}
	for _, p := range tv.Peers {
		if !p.Carried || p.Keepalive <= 0 || len(p.AllowedIPs) != 1 || p.AllowedIPs[0] != want[p.PublicKey]+"/32" {
			t.Errorf("peer %+v: want carried, its address /32 and a keepalive", p)
		}
		if p.PublicKey == f.peer1 && p.Endpoint != "198.51.100.11:51820" {
			t.Errorf("peer1's endpoint %q, want the one the tunnel knew", p.Endpoint)
		}
	}
	if d.Mesh.Tunnel != 51820 {
		t.Errorf("the declaration's mesh tunnel port %d, want 51820 (the guard and openings follow it)", d.Mesh.Tunnel)
	}
}

// A placement that disagrees with the tunnel is refused before anything is composed, naming both
// values; the record is unchanged.
func TestUnitTakeRefusesADisagreeingPlacement(t *testing.T) {
	f := newFoundTunnel(t)
	cases := map[string]struct {
		req      Placement
		settings map[string]string
		want     []string
	}{
		"address":          {req: Placement{Address: "10.44.0.9"}, want: []string{"10.44.0.9", "10.44.0.1/24"}},
		"port":             {req: Placement{Port: 51821}, want: []string{"51821", "51820"}},
		"range":            {req: Placement{Range: "10.99.0.0/24"}, want: []string{"10.99.0.0/24", "10.44.0.1"}},
		"--port tunnel":    {settings: map[string]string{"tunnel": "51821"}, want: []string{"51821", "51820"}},
		"--set mesh.range": {settings: map[string]string{"mesh.range": "10.99.0.0/24"}, want: []string{"10.99.0.0/24", "10.44.0.1"}},
	}
	for name, c := range cases {
		take := f.take
		take.Requested = c.req
		r := NewRecord()
		before := marshal(t, r)
		_, err := Apply(r, takeGenesis(t, &take, c.settings))
		if err == nil {
			t.Errorf("%s: a disagreeing placement was taken", name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: refusal %q does not name %s", name, err, w)
			}
		}
		if !bytes.Equal(before, marshal(t, r)) {
			t.Errorf("%s: a refused take changed the record", name)
		}
	}
	// Agreeing values are not a disagreement.
	take := f.take
	take.Requested = Placement{Address: "10.44.0.1", Port: 51820, Range: "10.44.0.0/24"}
	mustApply(t, NewRecord(), takeGenesis(t, &take, nil))
}

// On a running mesh, `meshd tunnel take` moves the range, the hub's address and its tunnel port to
// the found tunnel's; a node addressed outside the tunnel's range is refused with nothing changed.
func TestUnitTakeOnARunningMesh(t *testing.T) {
	f := newFoundTunnel(t)
	r := NewRecord()
	hubID, hubPub := identity(t)
	mustApply(t, r, identifiedGenesis(t, hubPub))
	if r.Tunnel.Range != "10.99.0.0/24" {
		t.Fatalf("default range %s", r.Tunnel.Range)
	}
	f.take.Announcement = pki.AnnounceKey(hubID, "hub", "", f.hub)
	mustApply(t, r, cmd(t, OpTunnelTake, t0.Add(time.Minute), f.take))
	if r.Tunnel.Range != "10.44.0.0/24" || r.Nodes["hub"].Address != "10.44.0.1" || len(r.Tunnel.Carried) != 2 {
		t.Fatalf("after the take: %+v, hub at %s", r.Tunnel, r.Nodes["hub"].Address)
	}
	if _, err := Apply(r, cmd(t, OpTunnelTake, t0.Add(2*time.Minute), f.take)); err == nil || !strings.Contains(err.Error(), "already took") {
		t.Fatalf("a second take: %v", err)
	}
	// The taken tunnel's port and range stay the hub's: a setting that moves them is refused.
	if _, err := Apply(r, cmd(t, OpSettingsSet, t0.Add(3*time.Minute), SetSettings{Node: "hub", Values: map[string]string{"tunnel": "51821"}})); err == nil || !strings.Contains(err.Error(), "51821") || !strings.Contains(err.Error(), "51820") {
		t.Fatalf("moving the taken tunnel's port: %v", err)
	}

	r = NewRecord()
	mustApply(t, r, identifiedGenesis(t, hubPub))
	mustApply(t, r, cmd(t, OpTokenCreate, t0, TokenCreate{Hash: "a", Mode: Adopted, Expires: t0.Add(time.Hour)}))
	mustApply(t, r, cmd(t, OpNodeEnrol, t0, Enrol{Node: "n1", ID: "1", TokenHash: "a"}))
	before := marshal(t, r)
	_, err := Apply(r, cmd(t, OpTunnelTake, t0.Add(time.Minute), f.take))
	if err == nil || !strings.Contains(err.Error(), "10.99.0.2") || !strings.Contains(err.Error(), "10.44.0.0/24") {
		t.Fatalf("take with a node outside the tunnel's range: %v", err)
	}
	if !bytes.Equal(before, marshal(t, r)) {
		t.Fatal("a refused take changed the record")
	}
	if _, err := Apply(r, cmd(t, OpTunnelTake, t0.Add(time.Minute), TunnelTake{Node: "n1", Interface: "wg0", PublicKey: f.hub, Address: "10.99.0.2/24", Port: 51820})); err == nil || !strings.Contains(err.Error(), "only the hub") {
		t.Fatalf("a spoke's take: %v", err)
	}
}

// An enrolling node gets the address the tunnel had for its WireGuard key; others a fresh one,
// never one that is held; the range and the carried peers outlive the flip.
func TestUnitAssignAndTheFlip(t *testing.T) {
	f := newFoundTunnel(t)
	r := NewRecord()
	mustApply(t, r, takeGenesis(t, &f.take, nil))
	for _, h := range []string{"a", "b"} {
		mustApply(t, r, cmd(t, OpTokenCreate, t0, TokenCreate{Hash: h, Mode: Adopted, Expires: t0.Add(time.Hour)}))
	}
	mustApply(t, r, cmd(t, OpModeSet, t0.Add(time.Minute), SetMode{Node: "hub", Mode: Converged}))
	if r.Tunnel.Range != "10.44.0.0/24" || len(r.Tunnel.Carried) != 2 || r.Tunnel.Taken != "wg0" {
		t.Fatalf("after the flip the tunnel is %+v: the range and carried peers must outlive it", r.Tunnel)
	}
	a, err := AssignAddress(r, t0)
	if err != nil || a != "10.44.0.4" {
		t.Fatalf("AssignAddress = %s, %v; want 10.44.0.4 (.0 the network, .1 the hub, .2 and .3 carried)", a, err)
	}
	mustApply(t, r, cmd(t, OpNodeEnrol, t0.Add(2*time.Minute), Enrol{Node: "peer2", ID: "p2", TokenHash: "a", WireGuardKey: f.peer2, FoundTunnel: "wg0", Advertise: "198.51.100.12"}))
	if got := r.Nodes["peer2"].Address; got != "10.44.0.3" {
		t.Fatalf("peer2 enrolled at %s, want the address its key had, 10.44.0.3", got)
	}
	mustApply(t, r, cmd(t, OpNodeEnrol, t0.Add(3*time.Minute), Enrol{Node: "new", ID: "n", TokenHash: "b", WireGuardKey: wgKey(t)}))
	if got := r.Nodes["new"].Address; got != "10.44.0.4" {
		t.Fatalf("a new machine got %s, want a fresh 10.44.0.4", got)
	}
	// The enrolled peer is now the hub's peer as a node; peer1 is still carried.
	d, err := Compose(r, "hub")
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	for _, p := range d.Tunnel.Peers {
		names[p.PublicKey] = p.Name
	}
	if names[f.peer2] != "peer2" || len(d.Tunnel.Peers) != 3 {
		t.Fatalf("hub's peers %+v: want peer1 carried, peer2 and new as nodes", d.Tunnel.Peers)
	}
	// A node's tunnel: the hub routes the range, the other enrolled node directly.
	dp, err := Compose(r, "peer2")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range dp.Tunnel.Peers {
		switch p.Name {
		case "hub":
			if p.AllowedIPs[0] != "10.44.0.0/24" || p.Endpoint != "198.51.100.10:51820" {
				t.Errorf("peer2's hub peer %+v: want the range through the hub's endpoint", p)
			}
		case "new":
			if p.AllowedIPs[0] != "10.44.0.4/32" {
				t.Errorf("peer2's peer new %+v", p)
			}
		default:
			t.Errorf("peer2 peers with %+v", p)
		}
	}
	if dp.Tunnel.Takeover != "" || dp.Tunnel.Address != "10.44.0.3/24" {
		t.Errorf("peer2's tunnel %+v", dp.Tunnel)
	}
	// Its found tunnel still carries its traffic: no mesh interface is raised beside it; a node
	// with its own key gets one.
	if dp.Tunnel.Interface != "" {
		t.Errorf("peer2 (found tunnel wg0) is told to raise %s beside it", dp.Tunnel.Interface)
	}
	if dn, _ := Compose(r, "new"); dn.Tunnel.Interface != MeshInterface {
		t.Errorf("a node with its own key is not told to raise %s: %+v", MeshInterface, dn.Tunnel)
	}
}

// identity is a node's ed25519 identity key and its public key as the record keeps it.
func identity(t testing.TB) (ed25519.PrivateKey, string) {
	t.Helper()
	k, err := pki.NewNodeKey()
	if err != nil {
		t.Fatal(err)
	}
	return k, pki.PublicKeyString(k.Public().(ed25519.PublicKey))
}

// identifiedGenesis is genesisCmd with the hub's identity recorded, as the agent's genesis does.
func identifiedGenesis(t testing.TB, pub string) []byte {
	return cmd(t, OpGenesis, t0, Genesis{Node: "hub", ID: "id-hub", Mode: Adopted, Advertise: "198.51.100.1", PublicKey: pub,
		Settings: map[string]string{"registry": "5001"}, Catalogue: catalogue.DefaultSources(),
		Assign: []string{"broker", "mesh", "registry", "store"}})
}

// A hub that enrolled before takes the found tunnel's key as its overlay key only on its own
// announcement, signed with its recorded identity: an unsigned one, one signed by another node's
// identity, one whose key was changed after signing, another node's own, or an old one replayed
// is refused naming the node, and moves nothing; the good one moves the key.
func TestUnitForgedKeyAnnouncementMovesNothing(t *testing.T) {
	f := newFoundTunnel(t)
	hubID, hubPub := identity(t)
	otherID, otherPub := identity(t)
	r := NewRecord()
	mustApply(t, r, identifiedGenesis(t, hubPub))
	mustApply(t, r, cmd(t, OpTokenCreate, t0, TokenCreate{Hash: "a", Mode: Adopted, Expires: t0.Add(time.Hour)}))
	mustApply(t, r, cmd(t, OpNodeEnrol, t0, Enrol{Node: "other", ID: "2", TokenHash: "a", PublicKey: otherPub}))
	// the hub's own overlay key, as a node that enrolled before has one
	own := wgKey(t)
	r.Nodes["hub"].WireGuardKey = own
	r.Nodes["other"].Address = "" // outside any range question: this test is about the key

	tampered := pki.AnnounceKey(hubID, "hub", own, wgKey(t))
	tampered.Key = f.hub
	for _, c := range []struct {
		what string
		a    *pki.KeyAnnouncement
		want string
	}{
		{"unsigned", nil, "unsigned"},
		{"signature stripped", &pki.KeyAnnouncement{Node: "hub", Previous: own, Key: f.hub}, "unsigned"},
		{"signed by another node's identity", pki.AnnounceKey(otherID, "hub", own, f.hub), "not signed by node hub's identity"},
		{"the key changed after signing", tampered, "not signed by node hub's identity"},
		{"another node's announcement", pki.AnnounceKey(otherID, "other", "", f.hub), "is node other's, not node hub's"},
		{"an old announcement replayed", pki.AnnounceKey(hubID, "hub", "", f.hub), "stale or replayed"},
	} {
		before := marshal(t, r)
		take := f.take
		take.Announcement = c.a
		_, err := Apply(r, cmd(t, OpTunnelTake, t0.Add(time.Minute), take))
		if err == nil || !strings.Contains(err.Error(), "node hub") || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "no key moved") {
			t.Errorf("%s: %v, want a refusal naming node hub and %q", c.what, err, c.want)
		}
		if !bytes.Equal(before, marshal(t, r)) {
			t.Errorf("%s: the record changed", c.what)
		}
		if r.Nodes["hub"].WireGuardKey != own {
			t.Fatalf("%s moved the hub's key to %s", c.what, r.Nodes["hub"].WireGuardKey)
		}
	}

	take := f.take
	take.Announcement = pki.AnnounceKey(hubID, "hub", own, f.hub)
	mustApply(t, r, cmd(t, OpTunnelTake, t0.Add(time.Minute), take))
	if n := r.Nodes["hub"]; n.WireGuardKey != f.hub || n.PublicKey != hubPub || n.ID != "id-hub" {
		t.Fatalf("after the signed announcement: overlay key %s (want the tunnel's %s), identity %s id %s (kept?)", n.WireGuardKey, f.hub, n.PublicKey, n.ID)
	}
}

// A take in a log written before announcements existed (command version 1) applies on replay as
// it did when it was acknowledged; the same take as a version 2 command is refused unsigned.
func TestUnitAnnouncementIsRequiredFromVersion2(t *testing.T) {
	f := newFoundTunnel(t)
	_, hubPub := identity(t)
	body, err := json.Marshal(f.take)
	if err != nil {
		t.Fatal(err)
	}
	v1, err := json.Marshal(Command{V: 1, Op: OpTunnelTake, At: t0.Add(time.Minute), Body: body})
	if err != nil {
		t.Fatal(err)
	}
	r := NewRecord()
	mustApply(t, r, identifiedGenesis(t, hubPub))
	if _, err := Apply(r, cmd(t, OpTunnelTake, t0.Add(time.Minute), f.take)); err == nil || !strings.Contains(err.Error(), "unsigned") {
		t.Fatalf("an unsigned version %d take: %v", Version, err)
	}
	mustApply(t, r, v1)
	if r.Nodes["hub"].WireGuardKey != f.hub {
		t.Fatalf("a version 1 take replayed: the hub's key is %q", r.Nodes["hub"].WireGuardKey)
	}
}
