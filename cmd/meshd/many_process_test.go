package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"meshd/api"
	"meshd/fsm"
	"meshd/report"
)

// fleetActs runs a module's assign and take on both nodes of a lab of two real agents (hub, a
// server, and edge, a client), each as one command: the preview lists both nodes and changes
// nothing; a selection naming a node the record has not is refused whole, naming that node, and
// changes neither; the assign and the take each come back with one raft index, in force on both
// nodes, with a history event naming each node under that index. Called by
// TestProcessDriftSeenAtOnceFromAClient, whose lab it shares.
func fleetActs(t *testing.T, hub *node) {
	dir := t.TempDir()
	manifest := filepath.Join(dir, "fleetapp.yaml")
	os.WriteFile(manifest, []byte("name: fleetapp\nprivileged: true\nsettings:\n  dir: /nowhere\nfiles:\n  - path: ${dir}/fleet.conf\n    content: \"fleet\\n\"\n"), 0o644)
	hub.ok("module", "add", "--privileged", manifest)
	confs := map[string]string{}
	for _, name := range []string{"hub", "edge"} {
		d := filepath.Join(dir, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		hub.ok("node", "set", name, "fleetapp.dir="+d)
		confs[name] = filepath.Join(d, "fleet.conf")
	}

	var pv manyResult
	hub.jsonOf(&pv, "module", "assign", "fleetapp", "--match", "*", "--preview")
	if pv.Act.Index != 0 || len(pv.Act.Nodes) != 2 || pv.Act.Counts[api.ChangeAssign] != 2 {
		t.Fatalf("the preview of assign --match '*': %+v", pv.Act)
	}
	text := hub.ok("module", "assign", "fleetapp", "--nodes", "hub,edge", "--preview")
	t.Logf("module assign fleetapp --nodes hub,edge --preview:\n%s", text)
	for _, want := range []string{"preview (nothing changed): assign fleetapp --nodes hub,edge: 2 node(s): 2 assign", "edge", "hub"} {
		if !strings.Contains(text, want) {
			t.Fatalf("the preview's text does not say %q:\n%s", want, text)
		}
	}
	if _, errs, code := hub.run("module", "assign", "fleetapp", "--nodes", "hub,edge,web-9"); code != 1 ||
		!strings.Contains(errs, "node web-9: no such node") || !strings.Contains(errs, "refused on 1 of 3 node(s), so on none") {
		t.Fatalf("an assign naming a node not in the record: exit %d, %s; want it refused whole, naming web-9", code, errs)
	}
	var st api.ModuleNodesView
	hub.jsonOf(&st, "module", "status", "fleetapp")
	if len(st.Nodes) != 0 {
		t.Fatalf("the preview or the refused assign changed the record: fleetapp on %+v", st.Nodes)
	}

	// The assign and the take: one command each, followed until in force on both nodes.
	for _, act := range []struct {
		args []string
		op   fsm.Op
		says string
	}{
		{[]string{"module", "assign", "fleetapp", "--match", "*"}, fsm.OpModuleAssignMany, "fleetapp assigned to %s (one of 2, --match *)"},
		{[]string{"module", "take", "fleetapp", "--all", "--wait", "60s"}, fsm.OpModuleTakeMany, "fleetapp taken on %s (one of 2, --all)"},
	} {
		var res manyResult
		hub.jsonOf(&res, act.args...)
		if res.Act.Index == 0 || res.Progress == nil || res.Progress.Counts[report.InForce] != 2 {
			t.Fatalf("%v: %+v, progress %+v; want one index and in force on both", act.args, res.Act, res.Progress)
		}
		var h api.HistoryView
		hub.jsonOf(&h, "history")
		named := map[string]bool{}
		for _, e := range h.Events {
			if e.Index == res.Act.Index && e.Op == act.op && e.What == fmt.Sprintf(act.says, e.Node) {
				named[e.Node] = true
			}
		}
		if !named["hub"] || !named["edge"] {
			t.Fatalf("%v: the history under index %d does not name each node: %+v", act.args, res.Act.Index, h.Events)
		}
	}
	for name, conf := range confs {
		if b, _ := os.ReadFile(conf); string(b) != "fleet\n" {
			t.Fatalf("taken and in force on %s, yet %s holds %q", name, conf, b)
		}
	}
	hub.jsonOf(&st, "module", "status", "fleetapp", "--state", "in force")
	if st.Counts[report.InForce] != 2 || len(st.Nodes) != 2 || !st.Nodes[0].Taken {
		t.Fatalf("module status fleetapp: %+v", st)
	}
	// Run again: nothing to change, nothing recorded.
	if out := hub.ok("module", "take", "fleetapp", "--all"); !strings.Contains(out, "2 unchanged; nothing to record") {
		t.Fatalf("a take run again:\n%s", out)
	}
}
