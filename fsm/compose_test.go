package fsm

import (
	"testing"
	"time"
)

// The declaration carries the node's mesh ports, the catalogue's defaults filled in and a node's
// own setting winning, whether or not the mesh module is assigned to it: the host reads them from
// there and nowhere else.
func TestUnitComposeCarriesMeshPorts(t *testing.T) {
	r := NewRecord()
	for _, c := range script(t) {
		mustApply(t, r, c)
	}
	mustApply(t, r, cmd(t, OpSettingsSet, t0.Add(8*time.Minute),
		SetSettings{Node: "peer1", Values: map[string]string{"mesh.gossip": "8946", "mesh.raft": "8071"}}))

	hub, err := Compose(r, "hub")
	if err != nil {
		t.Fatal(err)
	}
	if want := (MeshPorts{Bus: 7070, Raft: 7071, Gossip: 7946, Tunnel: 51820}); hub.Mesh != want {
		t.Errorf("hub's mesh ports %+v, want the catalogue's defaults %+v", hub.Mesh, want)
	}
	peer, err := Compose(r, "peer1")
	if err != nil {
		t.Fatal(err)
	}
	if want := (MeshPorts{Bus: 7070, Raft: 8071, Gossip: 8946, Tunnel: 51820}); peer.Mesh != want {
		t.Errorf("peer1's mesh ports %+v, want its own settings over the defaults %+v", peer.Mesh, want)
	}
	// The one function the agent reads agrees with the declaration.
	if p, err := MeshPort(r, r.Nodes["peer1"], "gossip"); err != nil || p != 8946 {
		t.Errorf("MeshPort(peer1, gossip) = %d, %v; want 8946", p, err)
	}
	if _, err := MeshPort(r, r.Nodes["peer1"], "nosuch"); err == nil {
		t.Error("MeshPort of a setting the mesh module does not have: no error")
	}
}
