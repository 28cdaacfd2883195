package api

import (
	"encoding/json"
	"testing"
)

// The leave and restore answers were maps before they had types: their JSON stays as it was
// (encoding/json writes a map's keys sorted, the types declare their fields in that order).
func TestTypedAnswersKeepTheirJSON(t *testing.T) {
	for _, c := range []struct {
		v    any
		want string
	}{
		{LeaveView{Left: true, Node: "edge"}, `{"left":true,"node":"edge"}`},
		{RestoreView{Index: 42, Nodes: 3, Restored: true}, `{"index":42,"nodes":3,"restored":true}`},
	} {
		b, err := json.Marshal(c.v)
		if err != nil || string(b) != c.want {
			t.Errorf("%T: got %s (%v), want %s", c.v, b, err, c.want)
		}
	}
}

// A report's part decodes into its type whether it is a typed value or generic JSON; none is
// false.
func TestDecodeInto(t *testing.T) {
	type part struct {
		State string `json:"state"`
	}
	var p part
	if !DecodeInto(map[string]any{"state": "up"}, &p) || p.State != "up" {
		t.Fatalf("generic JSON: got %+v", p)
	}
	p = part{}
	if !DecodeInto(part{State: "dark"}, &p) || p.State != "dark" {
		t.Fatalf("typed value: got %+v", p)
	}
	if DecodeInto(nil, &p) {
		t.Fatal("no part decoded as one")
	}
}
