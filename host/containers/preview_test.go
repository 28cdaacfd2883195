package containers

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"meshd/catalogue"
	"meshd/fsm"
	"meshd/host/hosttest"
	"meshd/host/preview"
	"meshd/report"
)

// The preview of a take reads the node's report and the declaration with the module taken: the
// held container (found id, image → new image, differences, where it will be kept), the held file
// (recorded and current hash, changed by something else), what is created, what starts to be
// guarded. It changes nothing.
func TestUnitTakePreview(t *testing.T) {
	h, f, root, foundID := takeBed(t)
	hosttest.PlaceAt(t, root, takeConf, "edited by hand while held\n")
	fresh := hosttest.OwnFile("webapp", "/etc/web/fresh.conf", "new\n", false)
	guard := fsm.Resource{Module: "webapp", Kind: fsm.KindOpening, Opening: &catalogue.PortOpening{Port: 6379, Proto: "tcp", From: "private", Path: "incoming", Guarded: true}}
	rep := h.Reconcile(hosttest.Ctx(t), takeDecl(false, fresh))
	hosttest.NoErrorsFatal(t, rep)
	f.takeOps()
	// Through JSON, as a server holds another node's report.
	b, _ := json.Marshal(rep)
	var remote report.Report
	if err := json.Unmarshal(b, &remote); err != nil {
		t.Fatal(err)
	}
	notCreated := declContainer("other", "notyet", "web:2", "x", true)
	pv, err := preview.Take(&remote, takeDecl(true, asTaken(fresh), asTaken(guard), notCreated, asTaken(declContainer("webapp", "db", "web:2", "x", false))), "webapp")
	if err != nil {
		t.Fatal(err)
	}
	if len(pv.Containers) != 1 {
		t.Fatalf("containers: %+v", pv.Containers)
	}
	c := pv.Containers[0]
	if c.Name != "web" || c.FoundID != foundID || c.Image != "web:1" || c.NewImage != "web:2" || c.Aside != report.AsideName("web", foundID) ||
		!slices.Contains(c.Differences, "image web:1 → web:2") || !slices.Contains(c.Differences, "env GREETING") {
		t.Fatalf("container preview: %+v", c)
	}
	if len(pv.Files) != 1 || pv.Files[0].Path != takeConf || !pv.Files[0].Changed || pv.Files[0].RecordedHash == pv.Files[0].CurrentHash {
		t.Fatalf("file preview: %+v", pv.Files)
	}
	// fresh.conf was created at assign already; db is not there yet.
	if !slices.Equal(pv.Created, []string{"container:db"}) {
		t.Fatalf("created: %q", pv.Created)
	}
	if !slices.Equal(pv.Guarded, []string{"6379/tcp incoming from private"}) {
		t.Fatalf("guarded: %q", pv.Guarded)
	}
	unitOps(t, f)
	// No report yet (the agent just started): a NoReportError, which the agent waits on.
	var none *preview.NoReportError
	if _, err := preview.Take(nil, takeDecl(true), "webapp"); !errors.As(err, &none) || !strings.Contains(err.Error(), "node n1 has sent no host report") {
		t.Fatalf("a preview without a report: %v", err)
	}
	// A report of a pass made before webapp was assigned (right after `module assign`) holds
	// nothing of webapp's: the preview refuses it, naming the node, the module and the report's
	// time, rather than call webapp's found file and container "created".
	before := h.Reconcile(hosttest.Ctx(t), hosttest.DeclUntaken(fsm.Adopted))
	var behind *preview.ReportBehindError
	if _, err := preview.Take(&before, takeDecl(true), "webapp"); !errors.As(err, &behind) ||
		!strings.Contains(err.Error(), "node n1's latest report (of "+before.When.Format(time.RFC3339)) || !strings.Contains(err.Error(), "before webapp was assigned") {
		t.Fatalf("a preview from a report made before the assignment: %v", err)
	}
	// An older agent's report says nothing of what was assigned: read as it is.
	before.Assigned = nil
	if _, err := preview.Take(&before, takeDecl(true), "webapp"); err != nil {
		t.Fatalf("a preview from a report without assignments: %v", err)
	}
}
