package main

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"

	"meshd/api"
	"meshd/fsm"
)

// Issue 36: a client's `meshd status --json` printed null for nodes, voters and gossip.rejected.
// An answer's empty slices and maps, however deep, print as [] and {}; what marshals itself
// (times, addresses) prints as it did; the answer itself is not changed.
func TestEmitPrintsNoNullCollection(t *testing.T) {
	type inner struct {
		Tags  []string          `json:"tags"`
		Count map[string]uint64 `json:"count"`
		Skip  []string          `json:"skip,omitempty"`
	}
	type answer struct {
		api.StatusView
		Nested  *inner          `json:"nested"`
		Rows    []inner         `json:"rows"`
		ByName  map[string]any  `json:"by_name"`
		Any     any             `json:"any"`
		At      time.Time       `json:"at"`
		Addr    netip.Addr      `json:"addr"`
		Raw     json.RawMessage `json:"raw,omitempty"`
		private []string
	}
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	v := answer{StatusView: api.StatusView{Client: &api.ClientStatus{Node: "web1", Mode: fsm.Adopted}}, Nested: &inner{},
		Rows: []inner{{}}, ByName: map[string]any{"x": []int(nil)}, Any: inner{}, At: at, Addr: netip.MustParseAddr("10.99.0.2"), private: []string{"kept"}}
	b, err := json.Marshal(emptied(v))
	if err != nil {
		t.Fatal(err)
	}
	out := string(b)
	if strings.Contains(out, "null") {
		t.Errorf("null in %s", out)
	}
	for _, want := range []string{`"tags":[]`, `"count":{}`, `"x":[]`, `"at":"2026-12-01T12:00:00Z"`, `"addr":"10.99.0.2"`, `"nodes":[]`, `"voters":[]`,
		`"rejected":{}`, `"servers":[]`, `"members":[]`} {
		if !strings.Contains(out, want) {
			t.Errorf("no %s in %s", want, out)
		}
	}
	if strings.Contains(out, `"skip"`) || strings.Contains(out, `"raw"`) {
		t.Errorf("an empty omitempty field printed: %s", out)
	}
	if v.Nested.Tags != nil || v.Client.Servers != nil {
		t.Error("emptied changed the answer it was given")
	}
}
