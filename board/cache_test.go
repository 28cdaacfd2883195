package board_test

import (
	"reflect"
	"testing"
	"time"

	"meshd/board"
	"meshd/fsm"
	"meshd/report"
)

// The cache builds a row once while neither the record nor the node's report moves, and the
// board it gives is Build's at every time: a report changed is read again, a record moved
// rebuilds every row, a node removed from the record has no row and none kept.
func TestUnitBoardCacheBuildsWhatChanged(t *testing.T) {
	r := record(t)
	apply(t, r, fsm.OpTokenCreate, t0, fsm.TokenCreate{Hash: "tok-web1", Mode: fsm.Adopted, Expires: t0.Add(time.Hour)})
	apply(t, r, fsm.OpNodeEnrol, t0.Add(time.Minute), fsm.Enrol{Node: "web1", ID: "id-web1", TokenHash: "tok-web1", Advertise: "198.51.100.2"})
	now := t0.Add(time.Hour)
	hubRep := decoded(t, report.Report{Node: "hub", Mode: fsm.Adopted, When: now, Assigned: []string{"mesh"}, Taken: []string{}})
	webRep := decoded(t, report.Report{Node: "web1", Mode: fsm.Adopted, When: now, Assigned: []string{}, Taken: []string{}})
	stamped := map[string]board.Stamped{"hub": {Report: hubRep, Seq: 1}, "web1": {Report: webRep, Seq: 2}}
	plain := func() map[string]*report.Report {
		out := map[string]*report.Report{}
		for n, s := range stamped {
			out[n] = s.Report
		}
		return out
	}
	var c board.Cache
	check := func(index uint64, at time.Time, wantBuilt uint64, wantKept int) {
		t.Helper()
		got := c.Build(r, index, stamped, at)
		if want := board.Build(r, plain(), at); !reflect.DeepEqual(got, want) {
			t.Fatalf("the cache's board differs from Build's:\n got %+v\nwant %+v", got, want)
		}
		if built, kept := c.Built(); built != wantBuilt || kept != wantKept {
			t.Fatalf("rows built %d, kept %d; want %d, %d", built, kept, wantBuilt, wantKept)
		}
	}

	check(10, now, 2, 2)
	for i := range 5 { // at rest, time passing: no row built again, the age read at each time
		check(10, now.Add(time.Duration(i)*30*time.Second), 2, 2)
	}
	webRep = decoded(t, report.Report{Node: "web1", Mode: fsm.Adopted, When: now.Add(time.Minute), Assigned: []string{},
		Taken: []string{}, Held: []report.HeldFile{{Path: "/etc/x", Module: "webapp", Changed: true}}})
	stamped["web1"] = board.Stamped{Report: webRep, Seq: 3}
	check(10, now.Add(time.Minute), 3, 2)

	apply(t, r, fsm.OpNodeRemove, now, fsm.NodeRemove{Node: "web1", Until: now.Add(time.Hour), Leader: "hub"})
	check(11, now.Add(time.Minute), 4, 1)
	if b := c.Build(r, 11, stamped, now); len(b.Rows) != 1 || b.Rows[0].Node != "hub" {
		t.Fatalf("after web1 removed: %+v", b.Rows)
	}
}
