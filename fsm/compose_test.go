package fsm

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"meshd/catalogue"
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

// Nothing refuses traffic for a module before it is taken, except the foundation's guard: a
// guarded opening of another module is guarded only once the module is taken, while every
// foundation opening from private is guarded on an adopted node from genesis on.
func TestUnitGuardedOnlyOnceTakenExceptFoundation(t *testing.T) {
	r := NewRecord()
	mustApply(t, r, genesisCmd(t, Adopted))
	src := catalogue.Source{File: "cache.yaml", Data: "name: cache\nsettings:\n  port: 6380\n" +
		"openings:\n  - {port: \"${port}\", proto: tcp, from: private, path: forwarded, guarded: true}\n"}
	mustApply(t, r, cmd(t, OpCatalogueAdd, t0.Add(time.Minute), CatalogueAdd{Source: src}))
	mustApply(t, r, cmd(t, OpModuleAssign, t0.Add(2*time.Minute), ModuleOnNode{Node: "hub", Module: "cache"}))

	guarded := func() map[string]bool {
		d, err := Compose(r, "hub")
		if err != nil {
			t.Fatal(err)
		}
		g := map[string]bool{}
		for _, res := range d.Resources {
			if res.Opening != nil && res.Opening.Guarded {
				g[fmt.Sprintf("%s:%d", res.Module, res.Opening.Port)] = true
			}
		}
		return g
	}
	g := guarded()
	for _, want := range []string{"store:6379", "broker:5672", "broker:15672"} {
		if !g[want] {
			t.Errorf("foundation opening %s is not guarded on the adopted hub: %v", want, g)
		}
	}
	if !g["mesh:7071"] {
		t.Error("raft is not guarded on the adopted hub: anyone on the underlay reaches it")
	}
	if g["cache:6380"] {
		t.Error("cache's opening is guarded before cache is taken: the predecessor's service on 6380 would be refused")
	}
	mustApply(t, r, cmd(t, OpModuleTake, t0.Add(3*time.Minute), ModuleOnNode{Node: "hub", Module: "cache"}))
	if !guarded()["cache:6380"] {
		t.Error("cache's opening is not guarded once cache is taken")
	}
}

// The raft opening admits the record's servers at their underlay addresses, and the declaration
// says which: a server that enrols is in every node's declaration at once, a client is not, and a
// server taken out of the group (remove-peer) no longer is.
func TestUnitRaftAdmitsTheRecordsServers(t *testing.T) {
	r := NewRecord()
	mustApply(t, r, genesisCmd(t, Adopted))
	mustApply(t, r, cmd(t, OpTokenCreate, t0, TokenCreate{Hash: "srv", Mode: Adopted, Expires: t0.Add(time.Hour), Server: true}))
	mustApply(t, r, cmd(t, OpTokenCreate, t0, TokenCreate{Hash: "cl", Mode: Adopted, Expires: t0.Add(time.Hour)}))
	mustApply(t, r, cmd(t, OpNodeEnrol, t0.Add(time.Minute), Enrol{Node: "s2", ID: "id-s2", TokenHash: "srv", Server: true, Advertise: "198.51.100.2"}))
	mustApply(t, r, cmd(t, OpNodeEnrol, t0.Add(time.Minute), Enrol{Node: "c1", ID: "id-c1", TokenHash: "cl", Advertise: "198.51.100.3"}))
	for _, node := range []string{"hub", "s2", "c1"} {
		d, err := Compose(r, node)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(d.Servers, ","); got != "198.51.100.1,198.51.100.2" {
			t.Errorf("%s's declaration says the servers are %q, want 198.51.100.1,198.51.100.2", node, got)
		}
	}
	d, err := Compose(r, "hub")
	if err != nil {
		t.Fatal(err)
	}
	admits := false
	for _, res := range d.Resources {
		if o := res.Opening; o != nil && res.Module == "mesh" && o.Port == d.Mesh.Raft {
			admits = o.Guarded && o.Admit == "servers"
		}
	}
	if !admits {
		t.Errorf("the hub's raft opening (port %d) is not guarded admitting the servers: %+v", d.Mesh.Raft, d.Resources)
	}
	mustApply(t, r, cmd(t, OpServerRemove, t0.Add(2*time.Minute), ServerRemove{Node: "s2"}))
	if d, _ := Compose(r, "hub"); strings.Join(d.Servers, ",") != "198.51.100.1" {
		t.Errorf("after s2 left the group the hub's declaration still admits %v", d.Servers)
	}
}
