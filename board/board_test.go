package board_test

// Unit tests of the board on records and reports shaped like each step of a migration: a node
// just enrolled, a module assigned and prepared, a take waiting on a stopped found container, a
// held file changed by something else, a node not heard from, and a converged node.

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"meshd/api"
	"meshd/board"
	"meshd/catalogue"
	"meshd/fsm"
	"meshd/report"
)

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func apply(t *testing.T, r *fsm.Record, op fsm.Op, at time.Time, body any) {
	t.Helper()
	b, err := fsm.Encode(op, at, body)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fsm.Apply(r, b); err != nil {
		t.Fatalf("%s: %v", op, err)
	}
}

func record(t *testing.T) *fsm.Record {
	r := fsm.NewRecord()
	apply(t, r, fsm.OpGenesis, t0, fsm.Genesis{Node: "hub", ID: "id-hub", Mode: fsm.Adopted, Advertise: "198.51.100.1",
		Settings: map[string]string{"registry": "5001"}, Catalogue: catalogue.DefaultSources(), Assign: []string{"mesh"}})
	return r
}

// decoded is rep as gossip carries it: its kinds as generic JSON.
func decoded(t *testing.T, rep report.Report) *report.Report {
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var out report.Report
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

func row(t *testing.T, b api.Board, node string) api.BoardRow {
	for _, r := range b.Rows {
		if r.Node == node {
			return r
		}
	}
	t.Fatalf("no row for %s in %+v", node, b)
	return api.BoardRow{}
}

func TestUnitBoardSteps(t *testing.T) {
	r := record(t)
	now := t0.Add(time.Hour)
	// No report yet: the node is adopted an hour, its next step waits on a report.
	b := board.Build(r, nil, now)
	hub := row(t, b, "hub")
	if hub.AdoptedFor != time.Hour || len(hub.Blocking) != 1 || !strings.Contains(hub.Blocking[0], "no report") {
		t.Fatalf("a node without a report: %+v", hub)
	}
	if b.Summary != "0 of 1 nodes converged; 0 of 1 modules taken" {
		t.Fatalf("summary: %q", b.Summary)
	}

	// webapp assigned; the report knows it and holds its stopped container: prepared, and the take waits.
	apply(t, r, fsm.OpModuleAssign, t0.Add(time.Minute), fsm.ModuleOnNode{Node: "hub", Module: "webapp"})
	rep := report.Report{Node: "hub", Mode: fsm.Adopted, When: now.Add(-5 * time.Second), Assigned: []string{"mesh", "webapp"}, Taken: []string{},
		Held:  []report.HeldFile{{Path: "/etc/webapp.conf", Module: "webapp", Changed: true, Reason: report.ChangedBySomethingElse}},
		Kinds: map[string]any{fsm.KindContainer: report.ContainerReport{Containers: []report.ContainerView{{Name: "webapp", Module: "webapp", State: report.ContainerHeld}}}}}
	b = board.Build(r, map[string]*report.Report{"hub": decoded(t, rep)}, now)
	hub = row(t, b, "hub")
	if !strings.Contains(hub.Track(), "✓ prepared webapp") || hub.Next != "taken mesh" && hub.Next != "taken webapp" {
		t.Fatalf("prepared: %s (next %s)", hub.Track(), hub.Next)
	}
	joined := strings.Join(hub.Blocking, "; ")
	if !strings.Contains(joined, "held file /etc/webapp.conf (webapp) changed by something else") {
		t.Fatalf("blocking: %q", joined)
	}

	// Taken on the record, the report of that pass still holds the container: not taken yet, and why.
	apply(t, r, fsm.OpModuleTake, t0.Add(2*time.Minute), fsm.ModuleOnNode{Node: "hub", Module: "mesh"})
	apply(t, r, fsm.OpModuleTake, t0.Add(3*time.Minute), fsm.ModuleOnNode{Node: "hub", Module: "webapp"})
	rep.Taken, rep.Held = []string{"mesh", "webapp"}, nil
	hub = row(t, board.Build(r, map[string]*report.Report{"hub": decoded(t, rep)}, now), "hub")
	if hub.Next != "taken webapp" || !strings.Contains(strings.Join(hub.Blocking, "; "), "take of webapp: its found container webapp is not running") {
		t.Fatalf("a take waiting: next %q, blocking %q", hub.Next, hub.Blocking)
	}

	// Carried out; the report is two minutes old: not heard from, and the converge is next.
	rep.Kinds = nil
	rep.When = now.Add(-2 * time.Minute)
	b = board.Build(r, map[string]*report.Report{"hub": decoded(t, rep)}, now)
	hub = row(t, b, "hub")
	if hub.Next != "converged" || !strings.Contains(strings.Join(hub.Blocking, "; "), "not heard from for 120s") {
		t.Fatalf("taken, stale: next %q blocking %q track %s", hub.Next, hub.Blocking, hub.Track())
	}
	if b.Summary != "0 of 1 nodes converged; 2 of 2 modules taken" {
		t.Fatalf("summary: %q", b.Summary)
	}

	// Converged: every step done, nothing in the way, no longer adopted.
	apply(t, r, fsm.OpModeSet, t0.Add(4*time.Minute), fsm.SetMode{Node: "hub", Mode: fsm.Converged})
	rep.When, rep.Mode = now, fsm.Converged
	b = board.Build(r, map[string]*report.Report{"hub": decoded(t, rep)}, now)
	hub = row(t, b, "hub")
	if hub.Next != "" || len(hub.Blocking) != 0 || hub.AdoptedFor != 0 {
		t.Fatalf("converged: %+v", hub)
	}
	if b.Summary != "1 of 1 nodes converged; 2 of 2 modules taken" {
		t.Fatalf("summary: %q", b.Summary)
	}
}

// Issue 36: a node that joined converged never was adopted; its board row said "✓ adopted". The
// step reads as not applicable, and is not the next one; a node adopted then converged keeps it.
func TestUnitBoardJoinedConvergedNeverAdopted(t *testing.T) {
	r := record(t)
	apply(t, r, fsm.OpTokenCreate, t0, fsm.TokenCreate{Hash: "tok-web1", Mode: fsm.Converged, Expires: t0.Add(time.Hour)})
	apply(t, r, fsm.OpNodeEnrol, t0.Add(time.Minute), fsm.Enrol{Node: "web1", ID: "id-web1", TokenHash: "tok-web1", Advertise: "198.51.100.2"})
	now := t0.Add(time.Hour)
	rep := report.Report{Node: "web1", Mode: fsm.Converged, When: now, Assigned: []string{}, Taken: []string{}}
	web1 := row(t, board.Build(r, map[string]*report.Report{"web1": decoded(t, rep)}, now), "web1")
	if strings.Contains(web1.Track(), "✓ adopted") || !strings.Contains(web1.Track(), "– adopted (joined converged)") {
		t.Fatalf("a node that joined converged: %s", web1.Track())
	}
	if web1.Next == "adopted" || web1.AdoptedFor != 0 {
		t.Fatalf("a node that joined converged: next %q, adopted for %s", web1.Next, web1.AdoptedFor)
	}
	apply(t, r, fsm.OpModeSet, t0.Add(2*time.Minute), fsm.SetMode{Node: "hub", Mode: fsm.Converged})
	hub := row(t, board.Build(r, nil, now), "hub")
	if !strings.Contains(hub.Track(), "✓ adopted") {
		t.Fatalf("a node adopted, then converged: %s", hub.Track())
	}
}
