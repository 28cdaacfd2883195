package fsm

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"meshd/catalogue"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func cmd(t testing.TB, op Op, at time.Time, body any) []byte {
	t.Helper()
	b, err := Encode(op, at, body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func genesisCmd(t testing.TB, mode Mode) []byte {
	return cmd(t, OpGenesis, t0, Genesis{Node: "hub", ID: "id-hub", Mode: mode, Advertise: "198.51.100.1",
		Settings: map[string]string{"registry": "5001"}, Catalogue: catalogue.DefaultSources(),
		Assign: []string{"broker", "mesh", "registry", "store"}})
}

// script is a migration's worth of commands, used by several tests.
func script(t testing.TB) [][]byte {
	return [][]byte{
		genesisCmd(t, Adopted),
		cmd(t, OpModuleAssign, t0.Add(time.Minute), ModuleOnNode{Node: "hub", Module: "webapp"}),
		cmd(t, OpModuleTake, t0.Add(2*time.Minute), ModuleOnNode{Node: "hub", Module: "webapp"}),
		cmd(t, OpTokenCreate, t0.Add(3*time.Minute), TokenCreate{Hash: "h1", Mode: Adopted, Expires: t0.Add(time.Hour)}),
		cmd(t, OpNodeEnrol, t0.Add(4*time.Minute), Enrol{Node: "peer1", ID: "id-p1", TokenHash: "h1", PublicKey: "k1"}),
		cmd(t, OpModuleAssign, t0.Add(5*time.Minute), ModuleOnNode{Node: "peer1", Module: "notes"}),
		cmd(t, OpSettingsSet, t0.Add(6*time.Minute), SetSettings{Node: "peer1", Values: map[string]string{"notes.port": "9001"}}),
		cmd(t, OpModeSet, t0.Add(7*time.Minute), SetMode{Node: "peer1", Mode: Converged}),
	}
}

func mustApply(t testing.TB, r *Record, c []byte) {
	t.Helper()
	if _, err := Apply(r, c); err != nil {
		t.Fatalf("apply: %v", err)
	}
}

func marshal(t testing.TB, r *Record) []byte {
	t.Helper()
	b, err := r.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDeterministic(t *testing.T) {
	var outs [][]byte
	for i := 0; i < 3; i++ {
		r := NewRecord()
		for _, c := range script(t) {
			mustApply(t, r, c)
		}
		outs = append(outs, marshal(t, r))
	}
	for i := 1; i < len(outs); i++ {
		if !bytes.Equal(outs[0], outs[i]) {
			t.Fatalf("same commands, different records:\n%s\n%s", outs[0], outs[i])
		}
	}
}

func TestSnapshotRestoreRoundTrip(t *testing.T) {
	f := NewFSM()
	for i, c := range script(t) {
		res := f.Apply(&raft.Log{Index: uint64(i + 1), Data: c}).(Result)
		if res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	g := NewFSM()
	if err := g.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	var a, b []byte
	var ia, ib uint64
	f.Read(func(r *Record, i uint64) { a, ia = marshal(t, r), i })
	g.Read(func(r *Record, i uint64) { b, ib = marshal(t, r), i })
	if !bytes.Equal(a, b) || ia != ib {
		t.Fatalf("restore differs (index %d vs %d):\n%s\n%s", ia, ib, a, b)
	}
	// And the restored record goes on exactly as the original would.
	next := cmd(t, OpModuleUnassign, t0.Add(time.Hour), ModuleOnNode{Node: "hub", Module: "webapp"})
	f.Apply(&raft.Log{Index: 100, Data: next})
	g.Apply(&raft.Log{Index: 100, Data: next})
	f.Read(func(r *Record, _ uint64) { a = marshal(t, r) })
	g.Read(func(r *Record, _ uint64) { b = marshal(t, r) })
	if !bytes.Equal(a, b) {
		t.Fatal("restored record diverged after the next command")
	}
	if err := g.Restore(io.NopCloser(strings.NewReader(`{"format":"other"}`))); err == nil {
		t.Fatal("restore accepted a foreign snapshot")
	}
}

type memSink struct{ bytes.Buffer }

func (s *memSink) ID() string    { return "mem" }
func (s *memSink) Cancel() error { return nil }
func (s *memSink) Close() error  { return nil }

// Every refused command leaves the record byte for byte as it was, and names node and module.
func TestRefusalsLeaveRecordUnchanged(t *testing.T) {
	base := NewRecord()
	for _, c := range script(t) {
		mustApply(t, base, c)
	}
	later := t0.Add(2 * time.Hour)
	cases := []struct {
		name string
		c    []byte
		says []string
	}{
		{"second genesis", genesisCmd(t, Converged), []string{"node hub", "genesis runs once"}},
		{"take unassigned", cmd(t, OpModuleTake, later, ModuleOnNode{Node: "hub", Module: "notes"}), []string{"node hub", "module notes", "not assigned"}},
		{"take twice", cmd(t, OpModuleTake, later, ModuleOnNode{Node: "hub", Module: "webapp"}), []string{"module webapp", "already taken"}},
		{"take on converged", cmd(t, OpModuleTake, later, ModuleOnNode{Node: "peer1", Module: "notes"}), []string{"node peer1", "converged"}},
		{"assign unknown", cmd(t, OpModuleAssign, later, ModuleOnNode{Node: "hub", Module: "webap"}), []string{"module webap", "did you mean webapp"}},
		{"assign twice", cmd(t, OpModuleAssign, later, ModuleOnNode{Node: "hub", Module: "webapp"}), []string{"already assigned"}},
		{"assign to unknown node", cmd(t, OpModuleAssign, later, ModuleOnNode{Node: "nope", Module: "webapp"}), []string{"node nope", "no such node"}},
		{"unassign unassigned", cmd(t, OpModuleUnassign, later, ModuleOnNode{Node: "hub", Module: "notes"}), []string{"not assigned"}},
		{"mode to same", cmd(t, OpModeSet, later, SetMode{Node: "hub", Mode: Adopted}), []string{"node hub", "already adopted"}},
		{"mode unknown", cmd(t, OpModeSet, later, SetMode{Node: "hub", Mode: "sideways"}), []string{"sideways"}},
		{"port clash", cmd(t, OpSettingsSet, later, SetSettings{Node: "hub", Values: map[string]string{"webapp.port": "5001"}}), []string{"port 5001/tcp", "registry", "webapp"}},
		{"bad port setting", cmd(t, OpSettingsSet, later, SetSettings{Node: "hub", Values: map[string]string{"registry": "99999"}}), []string{"module registry", "out of range"}},
		{"unknown setting", cmd(t, OpSettingsSet, later, SetSettings{Node: "hub", Values: map[string]string{"nosuch": "1"}}), []string{"nosuch"}},
		{"token reused", cmd(t, OpNodeEnrol, later, Enrol{Node: "peer2", ID: "id-p2", TokenHash: "h1"}), []string{"already used by node peer1"}},
		{"token unknown", cmd(t, OpNodeEnrol, later, Enrol{Node: "peer2", ID: "id-p2", TokenHash: "forged"}), []string{"not one this mesh issued"}},
		{"name taken", cmd(t, OpNodeEnrol, later, Enrol{Node: "peer1", ID: "id-x", TokenHash: "h1"}), []string{"already enrolled"}},
		{"catalogue clash", cmd(t, OpCatalogueAdd, later, CatalogueAdd{Source: catalogue.Source{File: "web2.yaml",
			Data: "name: web2\ncontainers:\n  - {name: webapp, image: x}\n"}}), []string{"web2.yaml", "containers[0].name", "already declared by module webapp"}},
		{"catalogue update breaks a node", cmd(t, OpCatalogueAdd, later, CatalogueAdd{Source: catalogue.Source{File: "webapp.yaml",
			Data: "name: webapp\nsettings: {port: 8080}\ncontainers:\n  - {name: webapp, image: x, ports: [\"5001:80\"]}\n"}}), []string{"node hub", "port 5001/tcp"}},
		{"newer version", []byte(`{"v":99,"op":"module.take","body":{}}`), []string{"version 99"}},
		{"garbage", []byte(`not json`), []string{"not a command"}},
	}
	before := marshal(t, base)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Apply(base, c.c)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, s := range c.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not say %q", err, s)
				}
			}
			if after := marshal(t, base); !bytes.Equal(before, after) {
				t.Fatalf("record changed by a refused command:\n%s\n%s", before, after)
			}
		})
	}
	// An expired token, at the proposer's clock.
	r := NewRecord()
	mustApply(t, r, genesisCmd(t, Adopted))
	mustApply(t, r, cmd(t, OpTokenCreate, t0, TokenCreate{Hash: "h", Mode: Adopted, Expires: t0.Add(time.Minute)}))
	if _, err := Apply(r, cmd(t, OpNodeEnrol, t0.Add(time.Hour), Enrol{Node: "late", ID: "l", TokenHash: "h"})); err == nil || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("expired token: %v", err)
	}
}

// ADR 0100: the controller carries the mode and the taken modules in every declaration.
func TestDeclarationCarriesModeAndTaken(t *testing.T) {
	r := NewRecord()
	cmds := script(t)
	for i, c := range cmds {
		mustApply(t, r, c)
		for _, name := range r.NodeNames() {
			d, err := Compose(r, name)
			if err != nil {
				t.Fatalf("after command %d: %v", i, err)
			}
			n := r.Nodes[name]
			if d.Mode != n.Mode || !d.Mode.valid() {
				t.Fatalf("after command %d, %s's declaration says mode %q, record %q", i, name, d.Mode, n.Mode)
			}
			if d.Taken == nil {
				t.Fatalf("after command %d, %s's declaration has no taken list", i, name)
			}
			want := n.Taken
			if n.Mode == Converged {
				want = n.Assigned
			}
			if fmt.Sprint(d.Taken) != fmt.Sprint(want) {
				t.Fatalf("%s: declaration taken %v, want %v", name, d.Taken, want)
			}
			for _, res := range d.Resources {
				if res.Taken != n.IsTaken(res.Module) {
					t.Fatalf("%s: resource %s taken=%v, module taken=%v", name, res.ID(), res.Taken, n.IsTaken(res.Module))
				}
			}
		}
	}
	hub, _ := Compose(r, "hub")
	if hub.Mode != Adopted || fmt.Sprint(hub.Taken) != "[webapp]" {
		t.Fatalf("hub: %s %v", hub.Mode, hub.Taken)
	}
	// Settings filled in: the hub's registry is on the port genesis gave, everywhere it is used.
	found := 0
	for _, res := range hub.Resources {
		if res.Module != "registry" {
			continue
		}
		if res.Container != nil && res.Container.Ports[0] == "5001:5000/tcp" {
			found++
		}
		if res.Opening != nil && res.Opening.Port == 5001 {
			found++
		}
		if res.Taken {
			t.Fatal("registry counts as taken on an adopted hub that never took it")
		}
	}
	if found != 2 || hub.Settings["registry.port"] != "5001" {
		t.Fatalf("registry port 5001 not filled in everywhere: %+v", hub)
	}
	// On a converged node an assigned module counts as taken, with its node's settings.
	p1, _ := Compose(r, "peer1")
	if p1.Mode != Converged || fmt.Sprint(p1.Taken) != "[mesh notes]" {
		t.Fatalf("peer1: %s %v", p1.Mode, p1.Taken)
	}
	for _, res := range p1.Resources {
		if !res.Taken {
			t.Fatalf("converged node has an untaken resource %s", res.ID())
		}
		if res.Module == "notes" && res.Opening != nil && res.Opening.Port != 9001 {
			t.Fatalf("peer1's notes opening on %d, want 9001", res.Opening.Port)
		}
	}
}

// ADR 0105: an enrolling node whose WireGuard key the tunnel already carries keeps its address;
// others get a fresh one that nobody holds. The match is on the WireGuard key the machine
// presents, never on its ed25519 identity (issue 12: the two never match).
func TestAddresses(t *testing.T) {
	r := NewRecord()
	mustApply(t, r, cmd(t, OpGenesis, t0, Genesis{Node: "hub", ID: "h", Mode: Adopted, Catalogue: catalogue.DefaultSources(),
		Settings: map[string]string{"mesh.range": "10.44.0.0/29"}}))
	if r.Tunnel.HubAddress != "10.44.0.1" || r.Nodes["hub"].Address != "10.44.0.1" {
		t.Fatalf("hub address %s", r.Tunnel.HubAddress)
	}
	peerKey, otherKey := wgKey(t), wgKey(t)
	r.Tunnel.Carried = []CarriedPeer{{PublicKey: peerKey, Address: "10.44.0.2"}, {PublicKey: otherKey, Address: "10.44.0.3"}}
	for _, h := range []string{"a", "b", "c", "d", "e", "f"} {
		mustApply(t, r, cmd(t, OpTokenCreate, t0, TokenCreate{Hash: h, Mode: Adopted, Expires: t0.Add(time.Hour)}))
	}
	mustApply(t, r, cmd(t, OpNodeEnrol, t0, Enrol{Node: "fresh", ID: "f", TokenHash: "a", PublicKey: "ed25519-identity", WireGuardKey: wgKey(t)}))
	if got := r.Nodes["fresh"].Assigned; len(got) != 1 || got[0] != catalogue.MeshModule {
		t.Fatalf("an enrolled node is assigned %v, want the mesh module (its own ports' openings)", got)
	}
	if got := r.Nodes["fresh"].Address; got != "10.44.0.4" {
		t.Fatalf("fresh node got %s, want 10.44.0.4 (.2 and .3 are carried)", got)
	}
	// Its identity key is the carried peer's WireGuard key by string: still no match.
	mustApply(t, r, cmd(t, OpNodeEnrol, t0, Enrol{Node: "imposter", ID: "i", TokenHash: "f", PublicKey: otherKey}))
	if got := r.Nodes["imposter"].Address; got == "10.44.0.3" {
		t.Fatalf("a node matched a carried peer on its identity key and got %s", got)
	}
	mustApply(t, r, cmd(t, OpNodeEnrol, t0, Enrol{Node: "peer", ID: "p", TokenHash: "b", PublicKey: "ed25519-of-peer", WireGuardKey: peerKey}))
	if got := r.Nodes["peer"].Address; got != "10.44.0.2" {
		t.Fatalf("carried peer got %s, want its tunnel address 10.44.0.2", got)
	}
	if len(r.Tunnel.Carried) != 1 {
		t.Fatalf("enrolled peer still carried: %+v", r.Tunnel.Carried)
	}
	mustApply(t, r, cmd(t, OpNodeEnrol, t0, Enrol{Node: "n6", ID: "6", TokenHash: "c"}))
	if _, err := Apply(r, cmd(t, OpNodeEnrol, t0, Enrol{Node: "n7", ID: "7", TokenHash: "d"})); err == nil || !strings.Contains(err.Error(), "no free address") {
		t.Fatalf("full range: %v", err)
	}
}

func TestWaitWakesOnApply(t *testing.T) {
	f := NewFSM()
	done := make(chan uint64)
	go func() { done <- f.Wait(context.Background(), 0) }()
	f.Apply(&raft.Log{Index: 7, Data: genesisCmd(t, Adopted)})
	select {
	case got := <-done:
		if got != 7 {
			t.Fatalf("Wait returned %d", got)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not wake on Apply")
	}
}

func BenchmarkCompose(b *testing.B) {
	r := NewRecord()
	for _, c := range script(b) {
		mustApply(b, r, c)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Compose(r, "hub"); err != nil {
			b.Fatal(err)
		}
	}
}

// Issue 11: `meshd join --port` values are the enrolled node's settings, and its declaration
// carries them: the ports its agent binds. A bad value refuses the enrolment and spends nothing.
func TestEnrolCarriesSettings(t *testing.T) {
	r := NewRecord()
	mustApply(t, r, genesisCmd(t, Adopted))
	mustApply(t, r, cmd(t, OpTokenCreate, t0, TokenCreate{Hash: "h", Mode: Converged, Expires: t0.Add(time.Hour)}))
	before := marshal(t, r)
	bad := Enrol{Node: "edge", ID: "e", TokenHash: "h", Settings: map[string]string{"mesh.gossip": "99999"}}
	if _, err := Apply(r, cmd(t, OpNodeEnrol, t0, bad)); err == nil || !strings.Contains(err.Error(), "out of range") {
		t.Fatalf("enrol with gossip port 99999: %v", err)
	}
	if !bytes.Equal(before, marshal(t, r)) {
		t.Fatal("a refused enrolment changed the record (the token must stay unused)")
	}
	good := Enrol{Node: "edge", ID: "e", TokenHash: "h", Settings: map[string]string{"mesh.gossip": "17946", "mesh.bus": "17170"}}
	mustApply(t, r, cmd(t, OpNodeEnrol, t0, good))
	n := r.Nodes["edge"]
	if n.Settings["mesh.gossip"] != "17946" || n.Settings["mesh.bus"] != "17170" || n.Mode != Converged {
		t.Fatalf("enrolled node: mode %s settings %v", n.Mode, n.Settings)
	}
	d, err := Compose(r, "edge")
	if err != nil {
		t.Fatal(err)
	}
	if d.Mesh.Gossip != 17946 || d.Mesh.Bus != 17170 || d.Mesh.Tunnel != 51820 {
		t.Fatalf("the declaration's mesh ports: %+v, want gossip 17946, bus 17170, tunnel the default 51820", d.Mesh)
	}
}

// A server token enrols only a server, a client's token only a client: the record says which
// machines vote, and no join can choose otherwise.
func TestServerTokenEnrolsOnlyAServer(t *testing.T) {
	r := NewRecord()
	mustApply(t, r, genesisCmd(t, Adopted))
	mustApply(t, r, cmd(t, OpTokenCreate, t0, TokenCreate{Hash: "srv", Mode: Adopted, Expires: t0.Add(time.Hour), Server: true}))
	mustApply(t, r, cmd(t, OpTokenCreate, t0, TokenCreate{Hash: "cli", Mode: Adopted, Expires: t0.Add(time.Hour)}))
	if _, err := Apply(r, cmd(t, OpNodeEnrol, t0, Enrol{Node: "s2", ID: "2", TokenHash: "srv"})); err == nil || !strings.Contains(err.Error(), "server's") {
		t.Fatalf("a server token used by a client: %v", err)
	}
	if _, err := Apply(r, cmd(t, OpNodeEnrol, t0, Enrol{Node: "s2", ID: "2", TokenHash: "cli", Server: true})); err == nil || !strings.Contains(err.Error(), "--server") {
		t.Fatalf("a client token used by a server: %v", err)
	}
	mustApply(t, r, cmd(t, OpNodeEnrol, t0, Enrol{Node: "s2", ID: "2", TokenHash: "srv", Server: true}))
	if !r.Nodes["s2"].Server {
		t.Fatal("a node enrolled with a server token is not a server in the record")
	}
}

// A removed server stays a node but no longer a server; the control-node cannot be removed.
func TestServerRemove(t *testing.T) {
	r := NewRecord()
	mustApply(t, r, genesisCmd(t, Adopted))
	mustApply(t, r, cmd(t, OpTokenCreate, t0, TokenCreate{Hash: "srv", Mode: Adopted, Expires: t0.Add(time.Hour), Server: true}))
	mustApply(t, r, cmd(t, OpNodeEnrol, t0, Enrol{Node: "s2", ID: "2", TokenHash: "srv", Server: true}))
	if _, err := Apply(r, cmd(t, OpServerRemove, t0, ServerRemove{Node: "hub"})); err == nil || !strings.Contains(err.Error(), "control-node") {
		t.Fatalf("removing the control-node: %v", err)
	}
	mustApply(t, r, cmd(t, OpServerRemove, t0, ServerRemove{Node: "s2"}))
	if n := r.Nodes["s2"]; n == nil || n.Server {
		t.Fatalf("s2 after remove: %+v", n)
	}
	if _, err := Apply(r, cmd(t, OpServerRemove, t0, ServerRemove{Node: "s2"})); err == nil || !strings.Contains(err.Error(), "not a server") {
		t.Fatalf("removing it twice: %v", err)
	}
}
