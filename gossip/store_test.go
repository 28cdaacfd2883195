package gossip

import (
	"fmt"
	"sort"
	"testing"
	"time"
)

// A server reads the fleet's reports by what changed: asked since the index it last saw, the
// store answers the reports kept since and the nodes whose report was dropped since, and an
// unchanged store answers nothing; a re-sent report (the same bytes) is no change; one node's
// report is read without the others'.
func TestReportsSinceAnswersTheChangesOnly(t *testing.T) {
	reg := &gsRegistry{}
	g := gsBare(reg, "srv", nil)
	g.cfg.Revoked = reg.isRevoked
	keys := map[string][]byte{}
	now := time.Now()
	send := func(node string, seq uint64) []byte {
		t.Helper()
		raw, err := signEnvelope(keys[node], node, seq, now, []byte(fmt.Sprintf(`{"n":%q,"seq":%d}`, node, seq)))
		if err != nil {
			t.Fatal(err)
		}
		if _, kept := g.receive(raw, "direct"); !kept {
			t.Fatalf("%s seq %d not kept", node, seq)
		}
		return raw
	}
	for _, n := range []string{"a", "b", "c"} {
		keys[n] = reg.enrol(t, n)
		send(n, 1)
	}
	names := func(rs []Report) string {
		var out []string
		for _, r := range rs {
			out = append(out, fmt.Sprintf("%s/%d", r.Node, r.Seq))
		}
		sort.Strings(out)
		return fmt.Sprint(out)
	}

	all, gone, i1 := g.ReportsSince(0)
	if names(all) != "[a/1 b/1 c/1]" || len(gone) != 0 {
		t.Fatalf("since 0: %s, gone %v", names(all), gone)
	}
	if ch, gone, i := g.ReportsSince(i1); len(ch) != 0 || len(gone) != 0 || i != i1 {
		t.Fatalf("nothing changed, yet: %s, gone %v, index %d→%d", names(ch), gone, i1, i)
	}
	raw := send("b", 2)
	if _, kept := g.receive(raw, "broadcast"); kept {
		t.Fatal("the same report again was kept again")
	}
	ch, _, i2 := g.ReportsSince(i1)
	if names(ch) != "[b/2]" {
		t.Fatalf("after b's second report: %s", names(ch))
	}
	if r, ok := g.Report("b"); !ok || r.Seq != 2 {
		t.Fatalf("Report(b): %+v %v", r, ok)
	}

	reg.revoke("c")
	g.sweep()
	send("a", 3)
	ch, gone, i3 := g.ReportsSince(i2)
	if names(ch) != "[a/3]" || fmt.Sprint(gone) != "[c]" {
		t.Fatalf("after c revoked and a's third: %s, gone %v", names(ch), gone)
	}
	if _, ok := g.Report("c"); ok {
		t.Fatal("c's report is still served after its key was revoked")
	}
	if ch, gone, _ := g.ReportsSince(i3); len(ch) != 0 || len(gone) != 0 {
		t.Fatalf("nothing changed since %d, yet: %s, gone %v", i3, names(ch), gone)
	}
	// An index from another life of the member (larger than any it gave) starts over.
	if ch, _, _ := g.ReportsSince(i3 + 100); names(ch) != "[a/3 b/2]" {
		t.Fatalf("from a foreign index: %s", names(ch))
	}
}
