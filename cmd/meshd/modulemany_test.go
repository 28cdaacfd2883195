package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"meshd/api"
	"meshd/fsm"
	"meshd/report"
)

// A many-node act's answer says the counts first; past smallFleet nodes it lists only those not
// in force (refused, failed, pending), each with why, and a small one whole.
func TestManyActCountsFirstAndListsWhatIsNotThere(t *testing.T) {
	act := func(n int) (api.ModuleManyView, *api.ModuleNodesView) {
		v := api.ModuleManyView{Module: "webapp", Action: "assign", Selector: "--match web-*", Index: 42, Counts: map[string]int{}}
		p := &api.ModuleNodesView{Module: "webapp", Counts: map[string]int{}}
		for i := 1; i <= n; i++ {
			name := fmt.Sprintf("web-%04d", i)
			v.Nodes = append(v.Nodes, api.ModuleManyNode{Node: name, Mode: fsm.Adopted, Change: api.ChangeAssign})
			v.Counts[api.ChangeAssign]++
			st := api.ModuleOnNode{Node: name, State: report.InForce}
			if i == 7 {
				st.State, st.Why = report.Failed, "file:/etc/webapp/app.conf: read-only file system"
			}
			p.Nodes = append(p.Nodes, st)
			p.Counts[st.State]++
		}
		return v, p
	}
	var b bytes.Buffer
	v, p := act(500)
	writeManyAct(&b, v, p)
	out := b.String()
	for _, want := range []string{
		"assign webapp --match web-*: 500 node(s): 500 assign; recorded as one command at index 42",
		"carried out: 499 in force, 0 pending, 1 failed",
		"web-0007\tadopted\tassign\tfailed\tfile:/etc/webapp/app.conf: read-only file system",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the answer of an assign on 500 nodes does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "web-0008") {
		t.Errorf("the answer of an assign on 500 nodes lists nodes in force:\n%s", out)
	}
	b.Reset()
	v, p = act(3)
	writeManyAct(&b, v, p)
	if !strings.Contains(b.String(), "web-0003\tadopted\tassign\tin force") {
		t.Errorf("the answer of an assign on 3 nodes does not list each:\n%s", b.String())
	}
}
