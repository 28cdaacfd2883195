package fsm

// Unit tests of a module on many nodes in one command (many.go): every node changes under one
// index with an event naming each; one node refused refuses all, naming it; version 7 knows no
// such op and applies its own commands as before.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// fleetOf is a record of the hub and n adopted clients web-1..web-n, through f.
func fleetOf(t *testing.T, f *FSM, n int) uint64 {
	t.Helper()
	index := uint64(1)
	apply := func(c []byte) {
		t.Helper()
		if err := applyLog(t, f, index, c); err != nil {
			t.Fatal(err)
		}
		index++
	}
	apply(genesisCmd(t, Adopted))
	for i := 1; i <= n; i++ {
		h := fmt.Sprintf("h%d", i)
		apply(cmd(t, OpTokenCreate, t0.Add(time.Minute), TokenCreate{Hash: h, Mode: Adopted, Expires: t0.Add(time.Hour)}))
		apply(cmd(t, OpNodeEnrol, t0.Add(2*time.Minute), Enrol{Node: fmt.Sprintf("web-%d", i), ID: "id-" + h, TokenHash: h, PublicKey: "k" + h}))
	}
	return index
}

func nodeOf(f *FSM, name string) Node {
	var n Node
	f.Read(func(r *Record, _ uint64) { n = *r.Nodes[name] })
	return n
}

func TestUnitManyAssignsAndTakesUnderOneIndex(t *testing.T) {
	f := NewFSM()
	next := fleetOf(t, f, 3)
	nodes := []string{"web-1", "web-2", "web-3"}
	assign := cmdBy(t, OpModuleAssignMany, t0.Add(5*time.Minute), "operator ops", ModuleOnNodes{Module: "webapp", Nodes: nodes, Selector: "--match web-*"})
	res := f.Apply(&raft.Log{Index: next, Data: assign}).(Result)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if got := res.Value.(*ManyApplied); len(got.Nodes) != 3 || !has(got.Nodes[2].Assigned, "webapp") {
		t.Fatalf("answer %+v: want the three nodes with webapp assigned", got)
	}
	take := cmd(t, OpModuleTakeMany, t0.Add(6*time.Minute), ModuleOnNodes{Module: "webapp", Nodes: nodes[:2],
		AcceptLoss: map[string][]string{"web-2": {"container webapp: capabilities: NET_ADMIN dropped"}}})
	if err := applyLog(t, f, next+1, take); err != nil {
		t.Fatal(err)
	}
	for _, name := range nodes {
		n := nodeOf(f, name)
		if !has(n.Assigned, "webapp") {
			t.Errorf("%s: webapp not assigned: %v", name, n.Assigned)
		}
		if want := name != "web-3"; has(n.Taken, "webapp") != want {
			t.Errorf("%s: webapp taken %v, want %v", name, n.Taken, want)
		}
	}
	var got []string
	for _, e := range events(f) {
		if e.Index >= next {
			got = append(got, fmt.Sprintf("%d %s %s %s %s: %s", e.Index, e.Op, e.Node, e.Module, e.By, e.What))
		}
	}
	want := []string{
		fmt.Sprintf("%d module.assign.many web-1 webapp operator ops: webapp assigned to web-1 (one of 3, --match web-*)", next),
		fmt.Sprintf("%d module.assign.many web-2 webapp operator ops: webapp assigned to web-2 (one of 3, --match web-*)", next),
		fmt.Sprintf("%d module.assign.many web-3 webapp operator ops: webapp assigned to web-3 (one of 3, --match web-*)", next),
		fmt.Sprintf("%d module.take.many web-1 webapp : webapp taken on web-1 (one of 2)", next+1),
		fmt.Sprintf("%d module.take.many web-2 webapp : webapp taken on web-2 (one of 2), accepting the loss of: container webapp: capabilities: NET_ADMIN dropped", next+1),
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("history:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func recordBytes(t *testing.T, f *FSM) []byte {
	var b []byte
	f.Read(func(r *Record, _ uint64) { b = marshal(t, r) })
	return b
}

func TestUnitManyRefusedOnOneNodeChangesNone(t *testing.T) {
	f := NewFSM()
	next := fleetOf(t, f, 3)
	if err := applyLog(t, f, next, cmd(t, OpModuleAssign, t0.Add(5*time.Minute), ModuleOnNode{Node: "web-2", Module: "webapp"})); err != nil {
		t.Fatal(err)
	}
	before := recordBytes(t, f)
	for _, tc := range []struct {
		name  string
		op    Op
		nodes []string
		says  []string
	}{
		{"one already has it", OpModuleAssignMany, []string{"web-1", "web-2", "web-3"}, []string{"refused on 1 of 3 node(s), so on none", "node web-2: already assigned"}},
		{"an unknown node", OpModuleAssignMany, []string{"web-1", "web-9"}, []string{"node web-9: no such node"}},
		{"a node named twice", OpModuleAssignMany, []string{"web-1", "web-1"}, []string{"node web-1: named twice"}},
		{"no nodes", OpModuleAssignMany, nil, []string{"no nodes named"}},
		{"a take where it is not assigned", OpModuleTakeMany, []string{"web-2", "web-3", "web-1"},
			[]string{"refused on 2 of 3", "node web-3: not assigned", "node web-1: not assigned"}},
	} {
		err := applyLog(t, f, next+1, cmd(t, tc.op, t0.Add(6*time.Minute), ModuleOnNodes{Module: "webapp", Nodes: tc.nodes}))
		if err == nil {
			t.Fatalf("%s: applied", tc.name)
		}
		for _, s := range tc.says {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: refusal %q does not say %q", tc.name, err, s)
			}
		}
		if !bytes.Equal(recordBytes(t, f), before) {
			t.Fatalf("%s: the refused command changed the record", tc.name)
		}
	}
}

// A version 7 log applies as it did: the one-node commands hold the record a version 8 log of the
// same commands holds, and a many-node op said at version 7 is refused (no version 7 server
// applies it).
func TestUnitManyIsVersion8(t *testing.T) {
	replay := func(v int) *Record {
		r := NewRecord()
		for _, c := range script(t) {
			var cc Command
			if err := json.Unmarshal(c, &cc); err != nil {
				t.Fatal(err)
			}
			mustApply(t, r, cmdV(t, v, cc.Op, cc.At, cc.Body))
		}
		return r
	}
	r := replay(7)
	if !bytes.Equal(marshal(t, r), marshal(t, replay(8))) {
		t.Fatal("a version 7 log holds a record other than the same commands at version 8")
	}
	_, err := Apply(r, cmdV(t, 7, OpModuleAssignMany, t0, ModuleOnNodes{Module: "webapp", Nodes: []string{"hub"}}))
	if err == nil || !strings.Contains(err.Error(), "needs command version 8") {
		t.Fatalf("a version 7 module.assign.many: %v, want refused for its version", err)
	}
}
