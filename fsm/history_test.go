package fsm

// Unit tests of the history (history.go): every applied command is one event with its index and
// who gave it; a refused one is none; a version 4 command appends nothing; a standing host
// condition is one event however many reports show it; the bounds drop the oldest; a snapshot
// keeps it all.

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"meshd/catalogue"
)

func applyLog(t *testing.T, f *FSM, index uint64, data []byte) error {
	t.Helper()
	return f.Apply(&raft.Log{Index: index, Data: data}).(Result).Err
}

func events(f *FSM) []Event {
	var out []Event
	f.Read(func(r *Record, _ uint64) {
		if r.History != nil {
			out = append(out, r.History.Events...)
		}
	})
	return out
}

func TestUnitHistoryRecordsEveryCommandWithWhoGaveIt(t *testing.T) {
	f := NewFSM()
	for i, c := range script(t) {
		if err := applyLog(t, f, uint64(10+i), c); err != nil {
			t.Fatal(err)
		}
	}
	by := cmdBy(t, OpModuleAssign, t0.Add(8*time.Minute), "operator ops-laptop", ModuleOnNode{Node: "hub", Module: "notes"})
	if err := applyLog(t, f, 30, by); err != nil {
		t.Fatal(err)
	}
	// A refused command is no event.
	if err := applyLog(t, f, 31, cmd(t, OpModuleTake, t0.Add(9*time.Minute), ModuleOnNode{Node: "nosuch", Module: "webapp"})); err == nil {
		t.Fatal("a take on an unknown node applied")
	}
	evs := events(f)
	want := []struct {
		index uint64
		op    Op
		what  string
	}{
		{10, OpGenesis, "the mesh began on hub (adopted)"},
		{11, OpModuleAssign, "webapp assigned to hub"},
		{12, OpModuleTake, "webapp taken on hub"},
		{13, OpTokenCreate, "an enrolment token made for a client (adopted, expires 2026-11-29T13:00:00Z)"},
		{14, OpNodeEnrol, "peer1 enrolled as a client (adopted)"},
		{15, OpModuleAssign, "notes assigned to peer1"},
		{16, OpSettingsSet, "settings of peer1: notes.port=9001"},
		{17, OpModeSet, "peer1 set converged"},
		{30, OpModuleAssign, "notes assigned to hub"},
	}
	if len(evs) != len(want) {
		t.Fatalf("%d events, want %d: %+v", len(evs), len(want), evs)
	}
	for i, w := range want {
		if e := evs[i]; e.Index != w.index || e.Op != w.op || e.What != w.what {
			t.Errorf("event %d: %d %s %q, want %d %s %q", i, e.Index, e.Op, e.What, w.index, w.op, w.what)
		}
	}
	if e := evs[len(evs)-1]; e.By != "operator ops-laptop" || e.Node != "hub" || e.Module != "notes" || !e.At.Equal(t0.Add(8*time.Minute)) {
		t.Fatalf("the operator's assign: %+v", e)
	}
}

func TestUnitHistoryOfAnOldLogIsEmpty(t *testing.T) {
	f := NewFSM()
	if err := applyLog(t, f, 1, cmdV(t, 4, OpGenesis, t0, Genesis{Node: "hub", ID: "id-hub", Mode: Adopted, Advertise: "198.51.100.1",
		Settings: map[string]string{"registry": "5001"}, Catalogue: catalogue.DefaultSources(), Assign: []string{"broker", "mesh", "registry", "store"}})); err != nil {
		t.Fatal(err)
	}
	if err := applyLog(t, f, 2, cmdV(t, 4, OpModuleAssign, t0.Add(time.Minute), ModuleOnNode{Node: "hub", Module: "webapp"})); err != nil {
		t.Fatal(err)
	}
	f.Read(func(r *Record, _ uint64) {
		if r.History != nil {
			t.Fatalf("a version 4 log made a history: %+v", r.History)
		}
	})
	if err := applyLog(t, f, 3, cmdV(t, 4, OpHostEvents, t0, HostEvents{Node: "hub"})); err == nil {
		t.Fatal("a version 4 history.host applied")
	}
}

func TestUnitStandingHostConditionIsOneEvent(t *testing.T) {
	f := NewFSM()
	if err := applyLog(t, f, 1, genesisCmd(t, Adopted)); err != nil {
		t.Fatal(err)
	}
	changed := HostCondition{Key: "held-changed:/etc/web.conf", Module: "webapp", Says: "held file /etc/web.conf changed by something else",
		Ended: "held file /etc/web.conf no longer changed by something else"}
	fw := HostCondition{Key: "firewall-active-again:ufw", Says: "the found firewall ufw enabled again by hand"}
	reports := [][]HostCondition{{changed}, {changed}, {changed, fw}, {fw}, {fw}}
	for i, conds := range reports {
		if err := applyLog(t, f, uint64(2+i), cmd(t, OpHostEvents, t0.Add(time.Duration(i)*time.Second), HostEvents{Node: "hub", Conditions: conds})); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	for _, e := range events(f)[1:] {
		if !e.Host || e.Node != "hub" {
			t.Fatalf("a host event: %+v", e)
		}
		got = append(got, e.What)
	}
	want := "held file /etc/web.conf changed by something else|the found firewall ufw enabled again by hand|held file /etc/web.conf no longer changed by something else"
	if strings.Join(got, "|") != want {
		t.Fatalf("host events:\n%s\nwant\n%s", strings.Join(got, "|"), want)
	}
	f.Read(func(r *Record, _ uint64) {
		if !SameConditions(r.StandingConditions("hub"), []HostCondition{fw}) {
			t.Fatalf("standing: %+v", r.StandingConditions("hub"))
		}
	})
	if err := applyLog(t, f, 20, cmd(t, OpHostEvents, t0, HostEvents{Node: "nosuch"})); err == nil {
		t.Fatal("host events of an unknown node applied")
	}
}

func TestUnitHistoryIsBounded(t *testing.T) {
	f := NewFSM()
	if err := applyLog(t, f, 1, genesisCmd(t, Adopted)); err != nil {
		t.Fatal(err)
	}
	if err := applyLog(t, f, 2, cmd(t, OpHistoryKeep, t0, HistoryKeepSet{Count: 3})); err == nil {
		t.Fatal("a bound of 3 events applied")
	}
	if err := applyLog(t, f, 3, cmd(t, OpHistoryKeep, t0, HistoryKeepSet{Count: 10, Age: 2 * time.Hour})); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 20; i++ {
		op := OpModuleAssign
		if i%2 == 1 {
			op = OpModuleUnassign
		}
		if err := applyLog(t, f, uint64(10+i), cmd(t, op, t0.Add(time.Duration(i)*time.Minute), ModuleOnNode{Node: "hub", Module: "webapp"})); err != nil {
			t.Fatal(err)
		}
	}
	evs := events(f)
	if len(evs) != 10 || evs[0].Index != 20 || evs[9].Index != 29 {
		t.Fatalf("kept %d events, %d to %d", len(evs), evs[0].Index, evs[len(evs)-1].Index)
	}
	// Three hours on, what is older than two hours goes.
	if err := applyLog(t, f, 40, cmd(t, OpModuleAssign, t0.Add(3*time.Hour), ModuleOnNode{Node: "hub", Module: "webapp"})); err != nil {
		t.Fatal(err)
	}
	if evs := events(f); len(evs) != 1 || evs[0].Index != 40 {
		t.Fatalf("after the age: %+v", evs)
	}
}

func TestUnitSnapshotKeepsHistory(t *testing.T) {
	f := NewFSM()
	for i, c := range script(t) {
		if err := applyLog(t, f, uint64(i+1), c); err != nil {
			t.Fatal(err)
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
	a, b := events(f), events(g)
	if len(a) != len(script(t)) || len(a) != len(b) || a[len(a)-1].What != b[len(b)-1].What {
		t.Fatalf("history after a restore: %d events, before %d", len(b), len(a))
	}
}

// A take the operator gave with --accept-loss says in the history what was accepted, and who
// accepted it (issue 38).
func TestUnitHistoryNamesAcceptedLosses(t *testing.T) {
	f := NewFSM()
	for i, c := range script(t)[:2] {
		if err := applyLog(t, f, uint64(10+i), c); err != nil {
			t.Fatal(err)
		}
	}
	take := cmdBy(t, OpModuleTake, t0.Add(time.Hour), "operator alice", ModuleOnNode{Node: "hub", Module: "webapp",
		AcceptLoss: []string{"container webapp: capabilities: NET_ADMIN dropped", "container webapp: memory limit 64m removed"}})
	if err := applyLog(t, f, 20, take); err != nil {
		t.Fatal(err)
	}
	evs := events(f)
	e := evs[len(evs)-1]
	want := "webapp taken on hub, accepting the loss of: container webapp: capabilities: NET_ADMIN dropped; container webapp: memory limit 64m removed"
	if e.Op != OpModuleTake || e.What != want || e.By != "operator alice" {
		t.Errorf("the take's event: %+v, want %q by operator alice", e, want)
	}
	flip := cmdBy(t, OpFlip, t0.Add(2*time.Hour), "operator bob", Flip{Node: "hub", To: Converged, Plan: "p1",
		AcceptLoss: []string{"container notes: user 65534 → the image's default"}})
	if err := applyLog(t, f, 21, flip); err != nil {
		t.Fatal(err)
	}
	evs = events(f)
	e = evs[len(evs)-1]
	want = "the converge of hub recorded (plan p1), accepting the loss of: container notes: user 65534 → the image's default"
	if e.Op != OpFlip || e.What != want || e.By != "operator bob" {
		t.Errorf("the flip's event: %+v, want %q by operator bob", e, want)
	}
}

// Converging a node takes every assigned module, and the history said only "the converge of hub
// recorded": a reader looking for when a module was taken found nothing. A converge naming what
// it takes appends one "taken" event a module, under its own index and By; one that names none
// (an older proposer's, replayed) appends its one event as before.
func TestUnitHistoryNamesWhatAConvergeTakes(t *testing.T) {
	for _, named := range []bool{true, false} {
		f := NewFSM()
		for i, c := range script(t)[:3] {
			if err := applyLog(t, f, uint64(10+i), c); err != nil {
				t.Fatal(err)
			}
		}
		for i, m := range []string{"notes"} {
			if err := applyLog(t, f, uint64(20+i), cmd(t, OpModuleAssign, t0.Add(time.Hour), ModuleOnNode{Node: "hub", Module: m})); err != nil {
				t.Fatal(err)
			}
		}
		flip := Flip{Node: "hub", To: Converged, Plan: "p1"}
		if named {
			flip.Takes = []string{"notes", "gone"} // gone: not assigned, named by no event
		}
		before := len(events(f))
		if err := applyLog(t, f, 30, cmdBy(t, OpFlip, t0.Add(2*time.Hour), "operator bob", flip)); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range events(f)[before:] {
			if e.Index != 30 || e.Op != OpFlip || e.By != "operator bob" || e.Node != "hub" {
				t.Errorf("named %v: event %+v not the flip's", named, e)
			}
			got = append(got, e.Module+": "+e.What)
		}
		want := []string{": the converge of hub recorded (plan p1)"}
		if named {
			want = append(want, "notes: notes taken on hub, by its converge")
		}
		if !slices.Equal(got, want) {
			t.Errorf("named %v: events %q, want %q", named, got, want)
		}
	}
}
