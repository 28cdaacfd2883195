package api

import (
	"encoding/json"
	"testing"
	"time"

	"meshd/fsm"
)

// The board's shape moved here from package board: its JSON stays as `meshd status --json`, the
// status page and the end-to-end tests read it (the counts without tags, as they always were).
func TestBoardKeepsItsJSON(t *testing.T) {
	b := Board{Summary: "0 of 1 nodes converged", Rows: []BoardRow{{Node: "hub", Mode: fsm.Adopted,
		Steps: []BoardStep{{Name: "enrolled", Done: true}, {Name: "converged"}}, Next: "converged",
		Blocking: []string{"no report from this node yet"}, AdoptedFor: time.Hour,
		LastHeard: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}}, Nodes: 1, Modules: 2, Taken: 1, CarriedNotEnrolled: 3}
	want := `{"summary":"0 of 1 nodes converged","rows":[{"node":"hub","mode":"adopted",` +
		`"steps":[{"name":"enrolled","done":true},{"name":"converged","done":false}],"next":"converged",` +
		`"blocking":["no report from this node yet"],"adopted_for_ns":3600000000000,` +
		`"last_heard":"2026-12-01T12:00:00Z"}],"Nodes":1,"Converged":0,"Modules":2,"Taken":1,"CarriedNotEnrolled":3}`
	if got, err := json.Marshal(b); err != nil || string(got) != want {
		t.Fatalf("got  %s (%v)\nwant %s", got, err, want)
	}
}
