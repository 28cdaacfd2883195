package agent

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"meshd/api"
	"meshd/catalogue"
	"meshd/fsm"
)

// manyRecord is a record of the hub and clients web-1, web-2 and db-1, webapp assigned on web-2.
func manyRecord(t *testing.T) *fsm.Record {
	at := time.Date(2026, 12, 1, 5, 0, 0, 0, time.UTC)
	r := fsm.NewRecord()
	apply(t, r, fsm.OpGenesis, at, fsm.Genesis{Node: "hub", ID: "id-hub", Mode: fsm.Adopted, Advertise: "198.51.100.10",
		Settings: map[string]string{"registry": "5001"}, Catalogue: catalogue.DefaultSources(), Assign: []string{"broker", "mesh", "registry", "store"}})
	for i, name := range []string{"web-1", "web-2", "db-1"} {
		h := fmt.Sprintf("h%d", i)
		apply(t, r, fsm.OpTokenCreate, at, fsm.TokenCreate{Hash: h, Mode: fsm.Adopted, Expires: at.Add(time.Hour)})
		apply(t, r, fsm.OpNodeEnrol, at, fsm.Enrol{Node: name, ID: "id-" + name, TokenHash: h})
	}
	apply(t, r, fsm.OpModuleAssign, at, fsm.ModuleOnNode{Node: "web-2", Module: "webapp"})
	return r
}

// A selection is the union of names, globs and --all, said in the operator's words; a glob that
// matches nothing, a bad glob and no selector at all are refused, saying so.
func TestUnitSelectionIsTheUnion(t *testing.T) {
	r := manyRecord(t)
	for _, tc := range []struct {
		in    api.ModuleManyRequest
		nodes string
		words string
		err   string
	}{
		{api.ModuleManyRequest{Match: []string{"web-*"}}, "web-1,web-2", "--match web-*", ""},
		{api.ModuleManyRequest{Match: []string{"web-*"}, Nodes: []string{"db-1"}}, "db-1,web-1,web-2", "--nodes db-1 --match web-*", ""},
		{api.ModuleManyRequest{All: true}, "db-1,hub,web-1,web-2", "--all", ""},
		{api.ModuleManyRequest{Nodes: []string{"web-9"}}, "web-9", "--nodes web-9", ""},
		{api.ModuleManyRequest{Match: []string{"cache-*"}}, "", "", `--match "cache-*" matches no node`},
		{api.ModuleManyRequest{Match: []string{"web-["}}, "", "", `--match "web-["`},
		{api.ModuleManyRequest{}, "", "", "select the nodes"},
	} {
		got, words, err := selection(r, tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%+v: %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || strings.Join(got, ",") != tc.nodes || words != tc.words {
			t.Errorf("%+v: %v %q %v, want %s %q", tc.in, got, words, err, tc.nodes, tc.words)
		}
	}
}

// Each node is judged as the record would: one already assigned is unchanged, one not in the
// record refused, the rest assigned; a take where it is not assigned is refused.
func TestUnitJudgeManyNamesEachNode(t *testing.T) {
	r := manyRecord(t)
	say := func(v []api.ModuleManyNode) string {
		var out []string
		for _, n := range v {
			out = append(out, n.Node+" "+n.Change+" "+n.Why)
		}
		return strings.Join(out, "; ")
	}
	prep := "prepared: what the machine lacks is created, what is found is held"
	if got, want := say(judgeMany(r, "assign", "webapp", []string{"db-1", "web-1", "web-2", "web-9"})),
		"db-1 assign "+prep+"; web-1 assign "+prep+"; web-2 unchanged already assigned; web-9 refused no such node"; got != want {
		t.Errorf("assign:\n got %s\nwant %s", got, want)
	}
	if got := say(judgeMany(r, "take", "webapp", []string{"web-1", "web-2"})); !strings.HasPrefix(got, "web-1 refused not assigned") || !strings.HasSuffix(got, "web-2 take ") {
		t.Errorf("take: %s", got)
	}
}
