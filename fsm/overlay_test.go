package fsm

import (
	"encoding/json"
	"fmt"
	"meshd/catalogue"
	"meshd/pki"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"
)

// adoptedMesh is the lab's migration in the record: the hub took the predecessor's wg0 over at
// genesis, peer2 enrolled presenting its found tunnel, and a new machine enrolled with the key
// it made at join.
type adoptedMesh struct {
	r      *Record
	f      foundTunnel
	newKey string
}

func newAdoptedMesh(t *testing.T) *adoptedMesh {
	m := &adoptedMesh{r: NewRecord(), f: newFoundTunnel(t), newKey: wgKey(t)}
	mustApply(t, m.r, takeGenesis(t, &m.f.take, nil))
	for _, h := range []string{"a", "b", "c"} {
		mustApply(t, m.r, cmd(t, OpTokenCreate, t0, TokenCreate{Hash: h, Mode: Adopted, Expires: t0.Add(time.Hour)}))
	}
	mustApply(t, m.r, cmd(t, OpNodeEnrol, t0.Add(time.Minute), Enrol{Node: "peer2", ID: "p2", TokenHash: "a",
		WireGuardKey: m.f.peer2, FoundTunnel: "wg0", Advertise: "198.51.100.12"}))
	mustApply(t, m.r, cmd(t, OpNodeEnrol, t0.Add(2*time.Minute), Enrol{Node: "newnode", ID: "nn", TokenHash: "b",
		WireGuardKey: m.newKey, Advertise: "198.51.100.13"}))
	return m
}

func (m *adoptedMesh) tunnel(t *testing.T, node string) TunnelView {
	t.Helper()
	d, err := Compose(m.r, node)
	if err != nil {
		t.Fatal(err)
	}
	return d.Tunnel
}

func peerByName(v TunnelView, name string) *TunnelPeer {
	for i := range v.Peers {
		if v.Peers[i].Name == name {
			return &v.Peers[i]
		}
	}
	return nil
}

// A machine that joins with no found tunnel is given a fresh address of the range and carries
// the key it made as its overlay key: it raises the mesh's interface with the hub (routing the
// range) as its peer, and the hub peers it directly at its underlay endpoint. A node still on
// its found tunnel is reached through the hub (its tunnel knows no other key); once its tunnel
// is taken over it raises the mesh's interface in its place, and the two enrolled nodes peer
// each other directly, each at the other's endpoint.
func TestUnitANewMachineGetsItsOwnOverlay(t *testing.T) {
	m := newAdoptedMesh(t)
	nn := m.r.Nodes["newnode"]
	if nn.Address != "10.44.0.4" || nn.WireGuardKey != m.newKey || nn.FoundTunnel != "" {
		t.Fatalf("newnode enrolled as %+v: want the fresh 10.44.0.4 with its own key", nn)
	}
	v := m.tunnel(t, "newnode")
	if v.Interface != MeshInterface || v.Address != "10.44.0.4/24" || v.ListenPort != 51820 || v.PublicKey != m.newKey || v.Takeover != "" {
		t.Fatalf("newnode's tunnel %+v: want %s at 10.44.0.4/24 on 51820 with its own key", v, MeshInterface)
	}
	if hub := peerByName(v, "hub"); hub == nil || hub.AllowedIPs[0] != "10.44.0.0/24" || hub.Endpoint != "198.51.100.10:51820" || hub.Keepalive <= 0 {
		t.Fatalf("newnode's hub peer %+v: want the range through 198.51.100.10:51820", hub)
	}
	if len(v.Peers) != 1 {
		t.Fatalf("newnode's peers %+v: peer2 is still on its found tunnel, reached through the hub", v.Peers)
	}
	if p := peerByName(m.tunnel(t, "hub"), "newnode"); p == nil || p.AllowedIPs[0] != "10.44.0.4/32" || p.Endpoint != "198.51.100.13:51820" {
		t.Fatalf("the hub's newnode peer %+v", p)
	}

	// peer2's tunnel is taken over: a refusal first names what disagrees and changes nothing.
	before := marshal(t, m.r)
	for _, bad := range []struct {
		take TunnelTake
		want []string
	}{
		{TunnelTake{Node: "peer2", Interface: "wg1"}, []string{"wg0", "wg1"}},
		{TunnelTake{Node: "peer2", Interface: "wg0", PublicKey: m.newKey}, []string{m.newKey, m.f.peer2}},
		{TunnelTake{Node: "peer2", Interface: "wg0", Requested: Placement{Address: "10.44.0.9"}}, []string{"10.44.0.9", "10.44.0.3"}},
		{TunnelTake{Node: "peer2", Interface: "wg0", Requested: Placement{Range: "10.45.0.0/24"}}, []string{"10.45.0.0/24", "10.44.0.0/24"}},
		{TunnelTake{Node: "peer2", Interface: "wg0", Requested: Placement{Port: 7946}}, []string{"7946"}}, // gossip's, udp too
	} {
		_, err := Apply(m.r, cmd(t, OpTunnelTake, t0.Add(3*time.Minute), bad.take))
		if err == nil {
			t.Fatalf("take %+v was recorded", bad.take)
		}
		for _, w := range bad.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("refusal %q does not name %s", err, w)
			}
		}
	}
	if string(before) != string(marshal(t, m.r)) {
		t.Fatal("a refused take changed the record")
	}
	// --port is the found tunnel's port: it becomes peer2's mesh.tunnel.
	mustApply(t, m.r, cmd(t, OpTunnelTake, t0.Add(4*time.Minute), TunnelTake{Node: "peer2", Interface: "wg0", Requested: Placement{Port: 51821}}))
	if _, err := Apply(m.r, cmd(t, OpTunnelTake, t0.Add(5*time.Minute), TunnelTake{Node: "peer2", Interface: "wg0"})); err == nil || !strings.Contains(err.Error(), "already") {
		t.Fatalf("a second take of peer2's tunnel: %v", err)
	}
	p2 := m.tunnel(t, "peer2")
	if p2.Interface != "wg0" || p2.Takeover != "wg0" || p2.Address != "10.44.0.3/24" || p2.PublicKey != m.f.peer2 || p2.ListenPort != 51821 {
		t.Fatalf("peer2's tunnel after the take %+v: want the found name wg0 taking wg0 over at 10.44.0.3/24 with its found key", p2)
	}
	if p := peerByName(p2, "newnode"); p == nil || p.AllowedIPs[0] != "10.44.0.4/32" || p.Endpoint != "198.51.100.13:51820" {
		t.Fatalf("peer2's newnode peer %+v: want it direct at its endpoint", p)
	}
	if p := peerByName(m.tunnel(t, "newnode"), "peer2"); p == nil || p.AllowedIPs[0] != "10.44.0.3/32" || p.Endpoint != "198.51.100.12:51821" {
		t.Fatalf("newnode's peer2 peer %+v: want it direct at its endpoint", p)
	}
	// The hub's view of both is unchanged: two enrolled peers and peer1 carried.
	if h := m.tunnel(t, "hub"); len(h.Peers) != 3 {
		t.Fatalf("the hub's peers %+v", h.Peers)
	}
}

// The address handed out is fresh: never the network's, the broadcast, the hub's, a carried
// peer's or an enrolled node's; a full range is refused, naming it.
func TestUnitAssignNeverHandsOutAHeldAddress(t *testing.T) {
	f := newFoundTunnel(t)
	take := f.take
	take.Address = "10.44.0.1/29" // .0 network, .1 hub, .2 .3 carried, .7 broadcast
	r := NewRecord()
	mustApply(t, r, takeGenesis(t, &take, nil))
	var got []string
	for i := 0; i < 4; i++ {
		h := fmt.Sprint("t", i)
		mustApply(t, r, cmd(t, OpTokenCreate, t0, TokenCreate{Hash: h, Mode: Adopted, Expires: t0.Add(time.Hour)}))
		_, err := Apply(r, cmd(t, OpNodeEnrol, t0.Add(time.Minute), Enrol{Node: fmt.Sprint("n", i), ID: h, TokenHash: h, WireGuardKey: wgKey(t)}))
		if i == 3 {
			if err == nil || !strings.Contains(err.Error(), "10.44.0.0/29") {
				t.Fatalf("a fourth node in a full /29: %v", err)
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r.Nodes[fmt.Sprint("n", i)].Address)
	}
	if strings.Join(got, " ") != "10.44.0.4 10.44.0.5 10.44.0.6" {
		t.Fatalf("assigned %v, want 10.44.0.4 10.44.0.5 10.44.0.6", got)
	}
}

var ipv4Re = regexp.MustCompile(`\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}(/\d+|:\d+)?\b`)

// staleIn lists every address in node's declaration that does not come from the tunnel the
// record holds: a private address outside the record's range, a range that is not the record's,
// or an endpoint that is not a node's underlay address with its own mesh.tunnel port (or a
// carried peer's recorded one). Loopback bindings are not derived from any address.
func staleIn(t *testing.T, r *Record, node string) []string {
	t.Helper()
	d, err := Compose(r, node)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	rng := netip.MustParsePrefix(r.Tunnel.Range)
	endpoints := map[string]bool{}
	underlay := map[string]bool{}
	for _, n := range r.Nodes {
		underlay[n.Advertise] = true
		if p, err := MeshPort(r, n, "tunnel"); err == nil {
			endpoints[fmt.Sprintf("%s:%d", n.Advertise, p)] = true
		}
	}
	for _, c := range r.Tunnel.Carried {
		endpoints[c.Endpoint] = true
	}
	var stale []string
	for _, s := range ipv4Re.FindAllString(string(b), -1) {
		switch {
		case strings.HasPrefix(s, "127."):
			// a binding to loopback (the broker's management port) is not derived from an address
		case strings.Contains(s, ":"):
			if !endpoints[s] {
				stale = append(stale, node+": endpoint "+s)
			}
		case strings.Contains(s, "/"):
			p := netip.MustParsePrefix(s)
			if p.Bits() == 32 && !rng.Contains(p.Addr()) || p.Bits() != 32 && p.Masked() != rng {
				stale = append(stale, node+": prefix "+s)
			}
		default:
			a := netip.MustParseAddr(s)
			if !rng.Contains(a) && !underlay[s] {
				stale = append(stale, node+": address "+s)
			}
		}
	}
	return stale
}

func staleEverywhere(t *testing.T, r *Record) []string {
	var out []string
	for _, name := range r.NodeNames() {
		out = append(out, staleIn(t, r, name)...)
	}
	return out
}

// Addresses follow the range (ADR 0105, issue 102): on a mesh begun on the default range whose
// hub then took the predecessor's tunnel over, every address, range, binding and endpoint the
// controller composes for every node comes from the tunnel the record holds — before and after a
// push that re-composes (a node's tunnel port moved, a spoke's tunnel taken over). Nothing keeps
// the range of genesis (10.99.0.0/24, the catalogue's build-time default).
func TestUnitNothingDerivedFromTheAddressIsStale(t *testing.T) {
	f := newFoundTunnel(t)
	r := NewRecord()
	hubID, hubPub := identity(t)
	mustApply(t, r, identifiedGenesis(t, hubPub))
	take := f.take
	take.Announcement = pki.AnnounceKey(hubID, "hub", "", f.hub) // the hub's own, signed move of its overlay key
	mustApply(t, r, cmd(t, OpTunnelTake, t0.Add(time.Minute), take))
	for _, h := range []string{"a", "b"} {
		mustApply(t, r, cmd(t, OpTokenCreate, t0, TokenCreate{Hash: h, Mode: Adopted, Expires: t0.Add(time.Hour)}))
	}
	mustApply(t, r, cmd(t, OpNodeEnrol, t0.Add(2*time.Minute), Enrol{Node: "peer2", ID: "p2", TokenHash: "a",
		WireGuardKey: f.peer2, FoundTunnel: "wg0", Advertise: "198.51.100.12"}))
	mustApply(t, r, cmd(t, OpNodeEnrol, t0.Add(3*time.Minute), Enrol{Node: "newnode", ID: "nn", TokenHash: "b",
		WireGuardKey: wgKey(t), Advertise: "198.51.100.13"}))

	check := func(when string) {
		t.Helper()
		if s := staleEverywhere(t, r); len(s) > 0 {
			t.Errorf("%s: composed values not from the record's tunnel %s:\n%s", when, r.Tunnel.Range, strings.Join(s, "\n"))
		}
		for _, name := range r.NodeNames() {
			d, _ := Compose(r, name)
			if v, ok := d.Settings["mesh.range"]; ok && v != r.Tunnel.Range {
				t.Errorf("%s: node %s is told mesh.range=%s, the record's range is %s", when, name, v, r.Tunnel.Range)
			}
			if d.Address != "" && !strings.HasPrefix(d.Tunnel.Address, d.Address+"/") {
				t.Errorf("%s: node %s's address %s and tunnel address %s differ", when, name, d.Address, d.Tunnel.Address)
			}
		}
	}
	check("before a push")
	mustApply(t, r, cmd(t, OpSettingsSet, t0.Add(4*time.Minute), SetSettings{Node: "newnode", Values: map[string]string{"tunnel": "51830"}}))
	mustApply(t, r, cmd(t, OpTunnelTake, t0.Add(5*time.Minute), TunnelTake{Node: "peer2", Interface: "wg0"}))
	check("after a push")
	for _, name := range []string{"hub", "peer2"} {
		d, _ := Compose(r, name)
		if p := peerByName(d.Tunnel, "newnode"); p == nil || p.Endpoint != "198.51.100.13:51830" {
			t.Errorf("after newnode's tunnel port moved to 51830, %s reaches it at %+v", name, p)
		}
	}
	if d, _ := Compose(r, "newnode"); d.Tunnel.ListenPort != 51830 || d.Mesh.Tunnel != 51830 {
		t.Errorf("newnode's own tunnel: listen %d, mesh port %d; want 51830", d.Tunnel.ListenPort, d.Mesh.Tunnel)
	}
}

// A control-node made by genesis without a tunnel to take makes its own overlay key, as a joining
// node does: the record holds its public half, and the hub's declaration raises the mesh's
// interface at the range's first address, routing the range to the nodes that join after it. A
// take on the running mesh later moves that key, on the hub's signed announcement naming it.
func TestUnitGenesisWithoutATunnelGivesTheHubItsOwnOverlay(t *testing.T) {
	hubID, hubPub := identity(t)
	own := wgKey(t)
	r := NewRecord()
	mustApply(t, r, cmd(t, OpGenesis, t0, Genesis{Node: "hub", ID: "id-hub", Mode: Adopted, Advertise: "198.51.100.1", PublicKey: hubPub,
		Settings: map[string]string{"registry": "5001"}, Catalogue: catalogue.DefaultSources(),
		Assign: []string{"broker", "mesh", "registry", "store"}, WireGuardKey: own}))
	d, err := Compose(r, "hub")
	if err != nil {
		t.Fatal(err)
	}
	if tv := d.Tunnel; tv.Interface != MeshInterface || tv.PublicKey != own || tv.Address != "10.99.0.1/24" {
		t.Fatalf("the hub's tunnel after genesis: %+v, want %s with its own key at 10.99.0.1/24", tv, MeshInterface)
	}
	f := newFoundTunnel(t)
	take := f.take
	take.Announcement = pki.AnnounceKey(hubID, "hub", "", f.hub) // names no previous key: stale
	if _, err := Apply(r, cmd(t, OpTunnelTake, t0.Add(time.Minute), take)); err == nil || !strings.Contains(err.Error(), "stale or replayed") {
		t.Fatalf("a take announced over no key, while the hub holds its own: %v", err)
	}
	take.Announcement = pki.AnnounceKey(hubID, "hub", own, f.hub)
	mustApply(t, r, cmd(t, OpTunnelTake, t0.Add(2*time.Minute), take))
	if k := r.Nodes["hub"].WireGuardKey; k != f.hub {
		t.Fatalf("after the take the hub's overlay key is %s, want the found tunnel's %s", k, f.hub)
	}
}
