package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"meshd/api"
	"meshd/fsm"
)

// fleetStatus is a status of n nodes web-0001..: every third converged, every tenth failed in
// gossip, webapp assigned to each and pending on every fifth.
func fleetStatus(n int) api.StatusView {
	st := api.StatusView{Leader: api.LeaderView{Node: "web-0001"}}
	for i := 1; i <= n; i++ {
		ns := api.NodeSummary{Name: fmt.Sprintf("web-%04d", i), Mode: fsm.Adopted, Liveness: "alive",
			Modules: map[string]string{"webapp": api.ModuleInForce}}
		if i%3 == 0 {
			ns.Mode = fsm.Converged
		}
		if i%10 == 0 {
			ns.Liveness = "failed"
		}
		if i%5 == 0 {
			ns.Modules["webapp"] = api.ModulePending
		}
		st.Nodes = append(st.Nodes, ns)
	}
	c := api.CountNodes(st.Nodes)
	st.Counts = &c
	return st
}

func statusText(st api.StatusView, f statusFilter) string {
	f.apply(&st)
	var b bytes.Buffer
	writeStatusOf(&b, st, f)
	return b.String()
}

// At 1000 nodes status says the counts and lists no node unless asked; a filter lists only the
// nodes it keeps; a small fleet is listed whole.
func TestStatusAtAThousandNodesCountsFirst(t *testing.T) {
	st := fleetStatus(1000)
	out := statusText(st, statusFilter{})
	for _, want := range []string{
		"nodes: 1000: 667 adopted, 333 converged; 900 alive, 100 failed",
		"module webapp on 1000: 800 in force, 200 pending, 0 failed",
		"1000 nodes: each one with --list",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("status of 1000 nodes does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "web-0002") || strings.Count(out, "\n") > 20 {
		t.Errorf("status of 1000 nodes lists them (%d lines):\n%s", strings.Count(out, "\n"), out)
	}
	if got := strings.Count(statusText(st, statusFilter{list: true}), "web-0"); got < 1000 {
		t.Errorf("status --list names %d nodes, want every one", got)
	}
	for _, tc := range []struct {
		f    statusFilter
		want int
	}{
		{statusFilter{state: "failed"}, 100},
		{statusFilter{state: "converged"}, 333},
		{statusFilter{module: "webapp", state: api.ModulePending}, 200},
		{statusFilter{module: "webapp"}, 1000},
		{statusFilter{module: "notes"}, 0},
	} {
		s := st
		tc.f.apply(&s)
		if len(s.Nodes) != tc.want || s.Counts.Nodes != 1000 {
			t.Errorf("%+v keeps %d nodes (counts of %d), want %d (counts of the whole fleet)", tc.f, len(s.Nodes), s.Counts.Nodes, tc.want)
		}
	}
	if err := (statusFilter{state: "sleeping"}).check(); err == nil || !strings.Contains(err.Error(), "adopted, converged, alive") {
		t.Errorf("--state sleeping: %v", err)
	}
	if small := statusText(fleetStatus(30), statusFilter{}); !strings.Contains(small, "web-0030") {
		t.Errorf("a fleet of 30 is not listed whole:\n%s", small)
	}
}
