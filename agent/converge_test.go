package agent

import (
	"strings"
	"testing"

	"meshd/report"
)

// The plan check a flip passes through: the token of the preview read, with the node unchanged,
// goes; a stale one is refused naming each change; a token this server never made is refused
// saying it cannot name them; no token goes only when nothing will close.
func TestUnitCheckPlan(t *testing.T) {
	was := report.ConvergePreview{Node: "hub", Mode: "adopted", Take: []string{"web"}, Token: "aaaa"}
	now := was
	now.Take = []string{"cache", "web"}
	now.WillClose = 1
	now.Published = []report.PreviewPublished{{Container: "metrics", HostIP: "0.0.0.0", HostPort: 9090, Proto: "tcp", Verdict: report.Verdict{Mark: report.MarkWillClose}}}
	now.Token = "bbbb"
	known := func(tok string) (report.ConvergePreview, bool) { return was, tok == was.Token }

	if ref := checkPlan("hub", "bbbb", now, known); ref != nil {
		t.Fatalf("the current token was refused: %v", ref)
	}
	ref := checkPlan("hub", "aaaa", now, known)
	if ref == nil {
		t.Fatal("a stale token went through")
	}
	msg := ref.Error()
	for _, want := range []string{"changed since the preview of plan aaaa", "new: take cache,web", "gone: take web", "new: published tcp 0.0.0.0:9090 (container metrics): will close"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the refusal does not name %q:\n%s", want, msg)
		}
	}
	if ref := checkPlan("hub", "cccc", now, known); ref == nil || !strings.Contains(ref.Error(), "did not make that preview") {
		t.Fatalf("an unknown token: %v", ref)
	}
	if ref := checkPlan("hub", "", now, known); ref == nil || !strings.Contains(ref.Error(), "read `meshd converge hub --preview`") || strings.Contains(ref.Error(), "bbbb") {
		t.Fatalf("no token while something will close: %v", ref)
	}
	now.WillClose = 0
	if ref := checkPlan("hub", "", now, known); ref != nil {
		t.Fatalf("no token with nothing closing was refused: %v", ref)
	}
}
