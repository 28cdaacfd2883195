package fsm

// Unit tests of what the record keeps derived between commands (derived.go) and of the nodes a
// command touches (declared.go), issue 37: over random command sequences, a declaration that
// changed always moved its node's Declared index, and the record composes and judges exactly as
// a record worked out afresh (one decoded from its own bytes, which keeps nothing derived).

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"meshd/catalogue"
)

// randomMesh draws commands for a mesh of a few nodes: most apply, some are refused, every op
// the record has is among them.
type randomMesh struct {
	t     *testing.T
	rng   *rand.Rand
	at    time.Time
	count int
	keys  []string // WireGuard keys drawn in advance: a key a node.enrol may present
}

// the modules drawn from: the catalogue's, and tool, whose files go where its dir setting says
// (in its own places by default, beyond them with /etc/other); added at version 5 it reaches
// beyond them without the operator's word.
var drawnModules = []string{"webapp", "notes", "registry", "tool", "tool", "mesh", "broker"}

// pick is one of xs, drawn.
func pick[T any](m *randomMesh, xs []T) T { return xs[m.rng.IntN(len(xs))] }

// next is one command for record r, its index's turn.
func (m *randomMesh) next(r *Record) []byte {
	t := m.t
	m.at = m.at.Add(time.Minute)
	m.count++
	names := r.NodeNames()
	node := pick(m, append(names, "ghost"))
	module := pick(m, drawnModules)
	v := Version
	if m.rng.IntN(3) == 0 {
		v = 5
	}
	switch m.rng.IntN(18) {
	case 0, 1:
		h := fmt.Sprintf("t%d", m.count)
		server := m.rng.IntN(4) == 0
		e := Enrol{Node: fmt.Sprintf("n%d", m.count), ID: "id-" + h, TokenHash: h, PublicKey: "pk-" + h, Server: server}
		if m.rng.IntN(2) == 0 {
			e.WireGuardKey, e.Advertise = m.keys[m.count%len(m.keys)], fmt.Sprintf("198.51.100.%d", 10+m.count%200)
			if m.rng.IntN(3) == 0 {
				e.FoundTunnel = "wg0" // still on its found tunnel until taken or converged
			}
		}
		if m.rng.IntN(3) == 0 {
			e.Settings = map[string]string{"mesh.tunnel": fmt.Sprint(52000 + m.rng.IntN(5))}
		}
		return m.enrol(r, e, server)
	case 2, 3:
		vals := map[string]string{}
		switch m.rng.IntN(5) {
		case 0:
			vals["mesh.tunnel"] = fmt.Sprint(52000 + m.rng.IntN(5))
		case 1, 4:
			vals["tool.dir"] = pick(m, []string{"/etc/tool", "/etc/other", ""})
		case 2:
			vals["notes.port"] = fmt.Sprint(9000 + m.rng.IntN(3))
		default:
			vals["notes.greeting"] = pick(m, []string{"a", "b"})
		}
		return cmdV(t, v, OpSettingsSet, m.at, SetSettings{Node: node, Values: vals})
	case 4, 5:
		return cmdV(t, v, pick(m, []Op{OpModuleAssign, OpModuleAssign, OpModuleUnassign, OpModuleTake}), m.at, ModuleOnNode{Node: node, Module: module})
	case 6:
		var some []string
		for _, n := range names {
			if m.rng.IntN(2) == 0 {
				some = append(some, n)
			}
		}
		return cmd(t, pick(m, []Op{OpModuleAssignMany, OpModuleTakeMany}), m.at, ModuleOnNodes{Module: module, Nodes: some})
	case 7:
		return cmdV(t, v, OpCatalogueAdd, m.at, CatalogueAdd{Source: pick(m, []catalogue.Source{
			src("tool", "settings: {dir: /etc/tool}\nfiles: [{path: \"${dir}/job\", content: x}]\n"),
			src("tool", "settings: {dir: /etc/tool}\nfiles: [{path: \"${dir}/job\", content: y}]\n"),
			src("notes", "settings: {port: 8081, greeting: notes}\nfiles: [{path: /etc/notes/notes.conf, content: \"${port}\"}]\n"),
		})})
	case 8:
		return cmd(t, OpModuleConfirm, m.at, ModuleConfirm{Module: module})
	case 9:
		return cmd(t, OpModeSet, m.at, SetMode{Node: node, Mode: pick(m, []Mode{Adopted, Converged})})
	case 10:
		return cmd(t, OpFlip, m.at, Flip{Node: node, To: pick(m, []Mode{Adopted, Converged})})
	case 11:
		if n := r.Nodes[node]; n != nil && n.Flip != nil {
			return cmd(t, OpFlipDone, m.at, FlipDone{Node: node, To: n.Flip.To, Since: n.Flip.Since})
		}
		return cmd(t, OpHistoryKeep, m.at, HistoryKeepSet{Count: 100})
	case 12:
		return cmd(t, OpServerRemove, m.at, ServerRemove{Node: node})
	case 13:
		return cmd(t, OpNodeRemove, m.at, NodeRemove{Node: node, Leader: "hub", Until: m.at.Add(time.Hour)})
	case 14:
		return cmd(t, OpHostEvents, m.at, HostEvents{Node: node})
	case 15, 16:
		// tool moved beyond its places, or back, on a node it is assigned to (version 5 judges
		// by the deny list alone): whether it may reach moves on every node it is on.
		for _, n := range names {
			if has(r.Nodes[n].Assigned, "tool") && m.rng.IntN(2) == 0 {
				node = n
			}
		}
		for _, n := range names {
			if o := r.Nodes[n]; o.Settings["tool.dir"] == "/etc/other" && !has(o.Assigned, "tool") && m.rng.IntN(2) == 0 {
				return cmdV(t, 5, OpModuleAssign, m.at, ModuleOnNode{Node: n, Module: "tool"})
			}
		}
		return cmdV(t, 5, OpSettingsSet, m.at, SetSettings{Node: node, Values: map[string]string{"tool.dir": pick(m, []string{"/etc/other", "/etc/tool"})}})
	}
	return cmd(t, OpTokenCreate, m.at, TokenCreate{Hash: fmt.Sprintf("x%d", m.count), Mode: Adopted, Expires: m.at.Add(time.Hour)})
}

// enrol makes the token first, straight into r (a token changes no declaration), then returns
// the enrolment.
func (m *randomMesh) enrol(r *Record, e Enrol, server bool) []byte {
	m.t.Helper()
	mode := pick(m, []Mode{Adopted, Converged})
	mustApply(m.t, r, cmd(m.t, OpTokenCreate, m.at, TokenCreate{Hash: e.TokenHash, Mode: mode, Expires: m.at.Add(time.Hour), Server: server}))
	return cmd(m.t, OpNodeEnrol, m.at, e)
}

// composedAll is every node's declaration, encoded, by node (an error's text for one that does
// not compose).
func composedAll(r *Record) map[string]string {
	out := map[string]string{}
	for _, n := range r.NodeNames() {
		d, err := Compose(r, n)
		if err != nil {
			out[n] = "error: " + err.Error()
			continue
		}
		b, _ := json.Marshal(d)
		out[n] = string(b)
	}
	return out
}

// afresh is r decoded from its own bytes: nothing derived kept.
func afresh(t *testing.T, r *Record) *Record {
	t.Helper()
	back, err := UnmarshalRecord(marshal(t, r))
	if err != nil {
		t.Fatal(err)
	}
	return back
}

// Over random command sequences (every op, refused ones among them): a node whose declaration
// changed has its Declared index moved to the command's; one a refused command or a token left
// alone has not; and what the record kept derived composes every node, lists the unconfirmed
// modules and judges the next command exactly as the record decoded afresh does.
func TestUnitDeclaredMovesWithEveryChangedDeclaration(t *testing.T) {
	keys := make([]string, 8)
	for i := range keys {
		keys[i] = wgKey(t)
	}
	reached := 0 // times the unconfirmed modules changed, over every sequence
	for seed := range uint64(12) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			m := &randomMesh{t: t, rng: rand.New(rand.NewPCG(seed, 37)), at: t0, keys: keys}
			f := NewFSM()
			genesis := genesisCmd(t, Adopted)
			if seed%2 == 0 { // the hub with its own overlay key: every node with one peers it
				genesis = cmd(t, OpGenesis, t0, Genesis{Node: "hub", ID: "id-hub", Mode: Adopted, Advertise: "198.51.100.1",
					WireGuardKey: wgKey(t), Catalogue: catalogue.DefaultSources(), Assign: []string{"broker", "mesh", "registry", "store"}})
			}
			if err := applyLog(t, f, 1, genesis); err != nil {
				t.Fatal(err)
			}
			mustApply(t, f.rec, cmdV(t, 5, OpCatalogueAdd, t0, CatalogueAdd{Source: src("tool", "settings: {dir: /etc/tool}\nfiles: [{path: \"${dir}/job\", content: x}]\n")}))
			applied, moved, kept := 0, 0, 0
			var unconfirmed []Unconfirmed
			for index := uint64(2); index < 260; index++ {
				data := m.next(f.rec)
				before := composedAll(f.rec)
				was := map[string]uint64{}
				for n := range before {
					was[n] = f.Declared(n)
				}
				res := f.Apply(&raft.Log{Index: index, Data: data}).(Result)
				after := composedAll(f.rec)
				var c Command
				_ = json.Unmarshal(data, &c)
				for n, b := range before {
					a, ok := after[n]
					if !ok {
						continue // removed: it has no declaration to watch
					}
					now := f.Declared(n)
					switch {
					case a != b && now == was[n]:
						t.Fatalf("index %d, %s (%s): node %s's declaration changed and its Declared stayed %d\nbefore %s\nafter  %s",
							index, c.Op, c.Body, n, now, b, a)
					case res.Err != nil && now != was[n]:
						t.Fatalf("index %d: the refused %s moved node %s's Declared", index, c.Op, n)
					case c.Op == OpTokenCreate || c.Op == OpHistoryKeep || c.Op == OpHostEvents:
						if now != was[n] {
							t.Fatalf("index %d: %s moved node %s's Declared", index, c.Op, n)
						}
					case a != b:
						moved++
					case now != was[n]:
						kept++
					}
				}
				if res.Err == nil {
					applied++
				}
				fresh := afresh(t, f.rec)
				if got := composedAll(fresh); !reflect.DeepEqual(got, after) {
					t.Fatalf("index %d, %s: the record's declarations differ from the record's decoded afresh", index, c.Op)
				}
				un := f.rec.Unconfirmed()
				if want := fresh.Unconfirmed(); !reflect.DeepEqual(un, want) {
					t.Fatalf("index %d, %s: unconfirmed %+v, afresh %+v", index, c.Op, un, want)
				}
				if !reflect.DeepEqual(un, unconfirmed) {
					reached++
				}
				unconfirmed = un
				for _, mod := range f.rec.Catalogue.Names() {
					if got, want := f.rec.RootEquivalent(mod), fresh.RootEquivalent(mod); !reflect.DeepEqual(got, want) {
						t.Fatalf("index %d, %s: %s reaches %q, afresh %q", index, c.Op, mod, got, want)
					}
				}
				if got, want := serverAddresses(f.rec), serverAddresses(fresh); !reflect.DeepEqual(got, want) {
					t.Fatalf("index %d, %s: servers %v, afresh %v", index, c.Op, got, want)
				}
			}
			t.Logf("%d of %d commands applied; %d declarations changed, %d touched and not changed; %d changes of the unconfirmed so far",
				applied, m.count, moved, kept, reached)
			if applied < 60 || moved < 40 {
				t.Fatalf("the sequence exercised too little: %d applied, %d changes", applied, moved)
			}
		})
	}
	if reached < 20 {
		t.Fatalf("the sequences moved a module beyond its places or back only %d times", reached)
	}
}

// A command about some nodes moves those nodes' Declared alone: a module assigned to two of a
// fleet's nodes moves two, a token none, and a node's settings its own.
func TestUnitDeclaredMovesOnlyTheNodesACommandIsAbout(t *testing.T) {
	f := NewFSM()
	next := fleetOf(t, f, 5)
	was := map[string]uint64{}
	for _, n := range []string{"web-4", "web-5"} {
		was[n] = f.Declared(n)
	}
	if err := applyLog(t, f, next, cmd(t, OpModuleAssignMany, t0.Add(time.Hour), ModuleOnNodes{Module: "webapp", Nodes: []string{"web-1", "web-2"}})); err != nil {
		t.Fatal(err)
	}
	if err := applyLog(t, f, next+1, cmd(t, OpSettingsSet, t0.Add(time.Hour), SetSettings{Node: "web-3", Values: map[string]string{"notes.port": "9001"}})); err != nil {
		t.Fatal(err)
	}
	if err := applyLog(t, f, next+2, cmd(t, OpTokenCreate, t0.Add(time.Hour), TokenCreate{Hash: "later", Mode: Adopted, Expires: t0.Add(2 * time.Hour)})); err != nil {
		t.Fatal(err)
	}
	for node, want := range map[string]uint64{"web-1": next, "web-2": next, "web-3": next + 1, "web-4": was["web-4"], "web-5": was["web-5"]} {
		if got := f.Declared(node); got != want {
			t.Errorf("node %s: Declared %d, want %d", node, got, want)
		}
	}
}

// A restored record keeps nothing derived and touches every node: a watch at any index before
// the restore wakes.
func TestUnitRestoreTouchesEveryDeclaration(t *testing.T) {
	f := NewFSM()
	next := fleetOf(t, f, 2)
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	g := NewFSM()
	for i := uint64(1); i < next+3; i++ {
		_ = applyLog(t, g, i, cmd(t, OpTokenCreate, t0, TokenCreate{Hash: fmt.Sprint(i), Mode: Adopted, Expires: t0.Add(time.Hour)}))
	}
	before := g.Declared("web-1")
	if err := g.Restore(io.NopCloser(&sink.Buffer)); err != nil {
		t.Fatal(err)
	}
	if got := g.Declared("web-1"); got <= before || got != indexOf(g) {
		t.Fatalf("Declared after the restore: %d (before %d, record at %d)", got, before, indexOf(g))
	}
}

// Watches compose under the read lock, side by side, while commands apply: what the record keeps
// is filled in and dropped under its own lock (go test -race holds it).
func TestUnitComposeWhileCommandsApply(t *testing.T) {
	f := NewFSM()
	next := fleetOf(t, f, 6)
	done := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				f.Read(func(r *Record, _ uint64) {
					_, _ = Compose(r, fmt.Sprintf("web-%d", 1+w))
					_ = r.Unconfirmed()
				})
			}
		}()
	}
	for i := range 60 {
		// A manifest added again drops its reach, and a node enrolled the lists: the watches
		// work them out again side by side.
		var c []byte
		switch i % 3 {
		case 0:
			c = cmd(t, OpModuleAssign, t0.Add(time.Hour), ModuleOnNode{Node: fmt.Sprintf("web-%d", 1+i/3%6), Module: "notes"})
		case 1:
			c = cmd(t, OpCatalogueAdd, t0.Add(time.Hour), CatalogueAdd{Source: src("notes", fmt.Sprintf("settings: {port: 8081}\nfiles: [{path: /etc/notes/n.conf, content: \"%d\"}]\n", i))})
		default:
			c = cmd(t, OpModuleUnassign, t0.Add(time.Hour), ModuleOnNode{Node: fmt.Sprintf("web-%d", 1+i/3%6), Module: "notes"})
		}
		if err := applyLog(t, f, next+uint64(i), c); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
}
