package fsm

import (
	"encoding/json"
	"testing"
	"time"
)

// routedOf is the routed opening in node's declaration, nil when there is none.
func routedOf(t *testing.T, r *Record, node string) *Resource {
	t.Helper()
	d, err := Compose(r, node)
	if err != nil {
		t.Fatal(err)
	}
	var found *Resource
	for i, res := range d.Resources {
		if res.Kind == KindOpening && res.Opening != nil && res.Opening.Path == PathRouted {
			if found != nil {
				t.Fatalf("%s's declaration has two routed openings", node)
			}
			found = &d.Resources[i]
		}
	}
	return found
}

// The hub forwards between the range's addresses only while some of them are reached through it
// alone (a carried peer, a spoke on its found tunnel), and no other node is told to.
func TestUnitHubRoutesOnlyWhileAMachineRidesTheFoundTunnel(t *testing.T) {
	f := newFoundTunnel(t)
	r := NewRecord()
	mustApply(t, r, takeGenesis(t, &f.take, nil))
	res := routedOf(t, r, "hub")
	if res == nil {
		t.Fatal("the hub carries two peers of the tunnel and is not told to forward between the range's addresses")
	}
	if o := res.Opening; o.Proto != ProtoAll || o.Port != 0 || o.From != "private" || res.Module != "mesh" {
		t.Errorf("the routed opening %+v of module %s: want every protocol from private, the mesh's", o, res.Module)
	}
	for i, h := range []string{"a", "b", "c"} {
		mustApply(t, r, cmd(t, OpTokenCreate, t0.Add(time.Duration(i)*time.Second), TokenCreate{Hash: h, Mode: Adopted, Expires: t0.Add(time.Hour)}))
	}
	// Both carried peers enrol presenting their found tunnels: no longer carried, still on them.
	mustApply(t, r, cmd(t, OpNodeEnrol, t0.Add(time.Minute), Enrol{Node: "peer1", ID: "p1", TokenHash: "a", WireGuardKey: f.peer1, FoundTunnel: "wg0", Advertise: "198.51.100.11"}))
	mustApply(t, r, cmd(t, OpNodeEnrol, t0.Add(2*time.Minute), Enrol{Node: "peer2", ID: "p2", TokenHash: "b", WireGuardKey: f.peer2, FoundTunnel: "wg0", Advertise: "198.51.100.12"}))
	mustApply(t, r, cmd(t, OpNodeEnrol, t0.Add(3*time.Minute), Enrol{Node: "new", ID: "n", TokenHash: "c", WireGuardKey: wgKey(t), Advertise: "198.51.100.13"}))
	if len(r.Tunnel.Carried) != 0 {
		t.Fatalf("carried after both enrolled: %+v", r.Tunnel.Carried)
	}
	if routedOf(t, r, "hub") == nil {
		t.Fatal("two spokes still ride their found tunnels and the hub is not told to forward to them")
	}
	for _, n := range []string{"peer1", "peer2", "new"} {
		if routedOf(t, r, n) != nil {
			t.Errorf("node %s, not the hub, is told to forward", n)
		}
	}
	mustApply(t, r, cmd(t, OpTunnelTake, t0.Add(4*time.Minute), TunnelTake{Node: "peer1", Interface: "wg0"}))
	if routedOf(t, r, "hub") == nil {
		t.Fatal("peer2 still rides its found tunnel and the hub is no longer told to forward to it")
	}
	mustApply(t, r, cmd(t, OpTunnelTake, t0.Add(5*time.Minute), TunnelTake{Node: "peer2", Interface: "wg0"}))
	if res := routedOf(t, r, "hub"); res != nil {
		t.Fatalf("every machine is migrated and the hub still forwards: %+v", res.Opening)
	}
}

// Converging a spoke that still rides its found tunnel takes it over, as `tunnel take` would; a
// version 2 flip (a log written before) does not.
func TestUnitConvergingASpokeTakesItsFoundTunnel(t *testing.T) {
	f := newFoundTunnel(t)
	r := NewRecord()
	mustApply(t, r, takeGenesis(t, &f.take, nil))
	mustApply(t, r, cmd(t, OpTokenCreate, t0, TokenCreate{Hash: "a", Mode: Adopted, Expires: t0.Add(time.Hour)}))
	mustApply(t, r, cmd(t, OpNodeEnrol, t0.Add(time.Minute), Enrol{Node: "peer1", ID: "p1", TokenHash: "a", WireGuardKey: f.peer1, FoundTunnel: "wg0", Advertise: "198.51.100.11"}))

	old, err := UnmarshalRecord(marshal(t, r))
	if err != nil {
		t.Fatal(err)
	}
	v2 := cmd(t, OpFlip, t0.Add(2*time.Minute), Flip{Node: "peer1", To: Converged})
	var c Command
	if err := json.Unmarshal(v2, &c); err != nil {
		t.Fatal(err)
	}
	c.V = 2
	v2, _ = json.Marshal(c)
	mustApply(t, old, v2)
	if old.Nodes["peer1"].TookTunnel {
		t.Error("a version 2 flip took peer1's found tunnel over: a replayed log would compose something else")
	}

	if d, err := Compose(r, "peer1"); err != nil || d.Tunnel.Rides != "wg0" || d.Tunnel.Interface != "" {
		t.Fatalf("peer1 on its found tunnel: %+v (%v), want it riding wg0 with no interface of its own", d.Tunnel, err)
	}
	mustApply(t, r, cmd(t, OpFlip, t0.Add(2*time.Minute), Flip{Node: "peer1", To: Converged}))
	if !r.Nodes["peer1"].TookTunnel {
		t.Fatal("converging peer1 did not take its found tunnel over")
	}
	d, err := Compose(r, "peer1")
	if err != nil {
		t.Fatal(err)
	}
	if d.Tunnel.Interface != "wg0" || d.Tunnel.Takeover != "wg0" || d.Tunnel.Rides != "" || d.Tunnel.PublicKey != f.peer1 || d.Tunnel.Address != "10.44.0.2/24" {
		t.Fatalf("converging peer1 composes the tunnel %+v: want the found name wg0 taking wg0 over with its key and address", d.Tunnel)
	}
	// Returning to adopted keeps the tunnel taken: the found one is not raised again.
	mustApply(t, r, cmd(t, OpFlip, t0.Add(3*time.Minute), Flip{Node: "peer1", To: Adopted}))
	if !r.Nodes["peer1"].TookTunnel {
		t.Error("returning peer1 to adopted gave its tunnel back")
	}
	// The hub converges too: it has no found tunnel of a spoke's to take, and nothing moves.
	mustApply(t, r, cmd(t, OpFlip, t0.Add(4*time.Minute), Flip{Node: "hub", To: Converged}))
	if r.Tunnel.Taken != "wg0" || r.Nodes["hub"].WireGuardKey != f.hub {
		t.Errorf("converging the hub moved its tunnel: %+v, key %s", r.Tunnel, r.Nodes["hub"].WireGuardKey)
	}
}
