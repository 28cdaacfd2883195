package report_test

// Unit tests of reading a take's progress from a report (carried.go), on reports decoded from
// JSON as the CLI gets them: a report of a pass that did not know the take says nothing; held
// files and containers are waited for; a failed resource of the module is the take's failure.

import (
	"encoding/json"
	"testing"
	"time"

	"meshd/fsm"
	"meshd/report"
)

// decoded is rep as a reader of the agent's API gets it: Kinds decoded into maps.
func decoded(t *testing.T, rep report.Report) *report.Report {
	t.Helper()
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

func TestUnitReportTake(t *testing.T) {
	held := report.Report{Node: "hub", Taken: []string{"mesh"},
		Held:  []report.HeldFile{{Path: "/etc/web.conf", Module: "web"}},
		Kinds: map[string]any{fsm.KindContainer: &report.ContainerReport{Containers: []report.ContainerView{{Name: "web", Module: "web", State: report.ContainerHeld}}}}}
	if c := report.ReportTake(decoded(t, held), "web"); c.Seen || c.Done || c.Waiting != "" {
		t.Fatalf("a report from before the take: %+v", c)
	}
	held.Taken = []string{"mesh", "web"}
	c := report.ReportTake(decoded(t, held), "web")
	if !c.Seen || c.Done || c.Waiting != "file /etc/web.conf still held; container web still held" {
		t.Fatalf("a take not carried out: %+v", c)
	}
	failed := held
	failed.Errors = []report.ResourceError{{Resource: "container:web", Module: "web", Reason: "image web:2 is missing"}, {Resource: "file:/x", Module: "other", Reason: "no"}}
	if c := report.ReportTake(decoded(t, failed), "web"); !c.Seen || c.Done || len(c.Failed) != 1 || c.Failed[0].Resource != "container:web" {
		t.Fatalf("a failed take: %+v", c)
	}
	done := report.Report{Node: "hub", Taken: []string{"web"}, Written: []report.WrittenFile{{Path: "/etc/web.conf", Module: "web"}},
		Kinds: map[string]any{
			fsm.KindContainer: &report.ContainerReport{Containers: []report.ContainerView{{Name: "web", Module: "web", State: report.ContainerReplaced}, {Name: "db", Module: "db", State: report.ContainerHeld}}},
			fsm.KindOpening:   &report.OpeningDetail{Openings: []report.OpeningView{{Module: "web", Taken: true, Opening: "8080/tcp"}}},
		}}
	if c := report.ReportTake(decoded(t, done), "web"); !c.Done || len(c.Failed) != 0 {
		t.Fatalf("a take carried out: %+v", c)
	}
}

func TestUnitReportTunnelTake(t *testing.T) {
	rep := func(det report.TunnelDetail, errs ...report.ResourceError) *report.Report {
		return decoded(t, report.Report{Node: "hub", Errors: errs, Kinds: map[string]any{fsm.KindTunnel: det}})
	}
	if c := report.ReportTunnelTake(rep(report.TunnelDetail{Interface: fsm.MeshInterface, State: report.TunnelMeshUp}), "wg0"); c.Seen {
		t.Fatalf("a hub's own interface before the take: %+v", c)
	}
	if c := report.ReportTunnelTake(rep(report.TunnelDetail{Found: "wg0", State: report.TunnelFoundUp}), "wg0"); c.Seen {
		t.Fatalf("a spoke riding its found tunnel before the take: %+v", c)
	}
	c := report.ReportTunnelTake(rep(report.TunnelDetail{Interface: fsm.MeshInterface, Found: "wg0", State: report.TunnelFoundUp}), "wg0")
	if !c.Seen || c.Done || c.Waiting != fsm.MeshInterface+" is found-up" {
		t.Fatalf("a takeover not carried out: %+v", c)
	}
	c = report.ReportTunnelTake(rep(report.TunnelDetail{Interface: fsm.MeshInterface, Found: "wg0", State: report.TunnelFoundUp},
		report.ResourceError{Resource: fsm.KindTunnel + ":" + fsm.MeshInterface, Module: "mesh", Reason: "not taking wg0 over: its key is A, the record took B"}), "wg0")
	if !c.Seen || c.Done || len(c.Failed) != 1 {
		t.Fatalf("a failed takeover: %+v", c)
	}
	c = report.ReportTunnelTake(rep(report.TunnelDetail{Interface: fsm.MeshInterface, Found: "wg0", State: report.TunnelMeshUp, TakenAt: time.Now()}), "wg0")
	if !c.Done {
		t.Fatalf("a takeover carried out: %+v", c)
	}
}
