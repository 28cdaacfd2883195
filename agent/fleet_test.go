package agent

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"meshd/catalogue"
	"meshd/fsm"
	"meshd/gossip"
	"meshd/report"
)

// feedFake is gossip's store of verified reports as the fleet reads it: each change takes the
// next index, and ReportsSince walks back over the changes only, as gossip's does.
type feedFake struct {
	mu    sync.Mutex
	index uint64
	log   []feedChange
	last  map[string]gossip.Report
}

type feedChange struct {
	node  string
	index uint64
}

func (f *feedFake) put(t testing.TB, rep report.Report) {
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.last == nil {
		f.last = map[string]gossip.Report{}
	}
	f.index++
	f.last[rep.Node] = gossip.Report{Node: rep.Node, Seq: f.index, At: rep.When, Payload: b}
	f.log = append(f.log, feedChange{rep.Node, f.index})
}

func (f *feedFake) ReportsSince(index uint64) ([]gossip.Report, []string, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []gossip.Report
	seen := map[string]bool{}
	for i := len(f.log) - 1; i >= 0 && f.log[i].index > index; i-- {
		if n := f.log[i].node; !seen[n] {
			seen[n] = true
			out = append(out, f.last[n])
		}
	}
	return out, nil, f.index
}

// all is every report, each payload copied: what gossip.Reports hands out.
func (f *feedFake) all() map[string]gossip.Report {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]gossip.Report, len(f.last))
	for n, r := range f.last {
		r.Payload = append([]byte(nil), r.Payload...)
		out[n] = r
	}
	return out
}

// feedGossip is a server's gossip member as the fleet reads it: only its reports.
type feedGossip struct{ feed *feedFake }

func (feedGossip) member() *gossip.Gossip                  { return nil }
func (g feedGossip) reportFeed() reportFeed                { return g.feed }
func (feedGossip) membersByName() map[string]gossip.Member { return nil }

// fleetRecord is a record after an adopted genesis of hub and the enrolment of n nodes
// node-0001…, applied straight to the state machine.
func fleetRecord(t testing.TB, n int) *fsm.FSM {
	at := time.Unix(1_700_000_000, 0)
	f := fsm.NewFSM()
	index := uint64(0)
	apply := func(op fsm.Op, body any) {
		b, err := fsm.Encode(op, at, body)
		if err != nil {
			t.Fatal(err)
		}
		index++
		if res, ok := f.Apply(&raft.Log{Index: index, Data: b}).(fsm.Result); !ok || res.Err != nil {
			t.Fatalf("%s: %+v", op, res)
		}
	}
	wide := map[string]string{"mesh.range": "10.96.0.0/16"} // the default /24 holds 253 nodes
	apply(fsm.OpGenesis, fsm.Genesis{Node: "hub", ID: "hub-id", Mode: fsm.Adopted, Advertise: "127.0.0.1",
		Catalogue: catalogue.DefaultSources(), Settings: wide})
	for i := range n {
		hash := fmt.Sprintf("token-%d", i)
		apply(fsm.OpTokenCreate, fsm.TokenCreate{Hash: hash, Mode: fsm.Adopted, Expires: at.Add(time.Hour)})
		apply(fsm.OpNodeEnrol, fsm.Enrol{Node: fleetNode(i), ID: fmt.Sprintf("id-%d", i), TokenHash: hash, Settings: wide})
	}
	return f
}

func fleetNode(i int) string { return fmt.Sprintf("node-%04d", i) }

// fleetReport is a client's report shaped like the lab's: a dozen held files, a dozen
// containers, the listening sockets; changed marks one held file changed by something else.
func fleetReport(node string, when time.Time, changed bool) report.Report {
	rep := report.Report{Node: node, Mode: fsm.Adopted, When: when, Taken: []string{}, Assigned: []string{"webapp"}}
	for i := range 12 {
		rep.Held = append(rep.Held, report.HeldFile{Path: fmt.Sprintf("/etc/app/file-%02d.conf", i), Module: "webapp",
			RecordedHash: "sha256:0123456789abcdef", CurrentHash: "sha256:0123456789abcdef", Since: when,
			Changed: changed && i == 0, Reason: map[bool]string{true: report.ChangedBySomethingElse}[changed && i == 0]})
	}
	var cr report.ContainerReport
	for i := range 12 {
		cr.Containers = append(cr.Containers, report.ContainerView{Name: fmt.Sprintf("app-%02d", i), Module: "webapp",
			State: report.ContainerHeld, Image: "registry.local/app:1.0", Running: true, Ports: []string{"0.0.0.0:8080->80/tcp"}})
	}
	rep.Kinds = map[string]any{fsm.KindContainer: cr}
	for i := range 20 {
		rep.Listeners = append(rep.Listeners, report.Listener{Proto: "tcp", Addr: netip.MustParseAddr("0.0.0.0"), Port: uint16(8000 + i)})
	}
	return rep
}

// fleetOf is a fleet over n enrolled nodes, each with a report in feed, whose decodes are
// counted in decodes.
func fleetOf(t testing.TB, n int) (*fleet, *fsm.FSM, *feedFake, *int) {
	rec := fleetRecord(t, n)
	feed := &feedFake{}
	now := time.Now()
	for i := range n {
		feed.put(t, fleetReport(fleetNode(i), now, false))
	}
	fl := newFleet("hub", func() report.Report { return report.Report{} }, rec, feedGossip{feed}, &pulse{},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	decodes := new(int)
	fl.decode = func(b []byte) (*report.Report, error) {
		*decodes++
		return decodeReport(b)
	}
	return fl, rec, feed, decodes
}

// The leader's host-events loop works on what changed: its first look decodes every report
// once; a look at an unchanged fleet decodes nothing and has nothing due; a node whose report
// changed (a held file changed by something else) is decoded alone and due, once; a node whose
// conditions the record already holds is not due again; a new term looks at every node again,
// from the reports already decoded.
func TestUnitHostEventsLookAtChangedReportsOnly(t *testing.T) {
	const n = 200
	fl, rec, feed, decodes := fleetOf(t, n)
	look := hostEventsLook{self: "hub"}

	if due := look.due(rec, fl, 1); len(due) != 0 || *decodes != n {
		t.Fatalf("first look: %d due, %d decodes; want 0 due, %d decodes", len(due), *decodes, n)
	}
	*decodes = 0
	for range 3 {
		if due := look.due(rec, fl, 1); len(due) != 0 || *decodes != 0 {
			t.Fatalf("unchanged fleet: %d due, %d decodes; want none", len(due), *decodes)
		}
	}

	feed.put(t, fleetReport(fleetNode(7), time.Now(), true))
	due := look.due(rec, fl, 1)
	if *decodes != 1 || len(due) != 1 || due[0].Node != fleetNode(7) || len(due[0].Conditions) != 1 {
		t.Fatalf("one node's held file changed: %d decodes, due %+v; want 1 decode, %s due", *decodes, due, fleetNode(7))
	}
	b, err := fsm.Encode(fsm.OpHostEvents, time.Now(), due[0])
	if err != nil {
		t.Fatal(err)
	}
	if res, ok := rec.Apply(&raft.Log{Index: rec.Applied() + 1, Data: b}).(fsm.Result); !ok || res.Err != nil {
		t.Fatalf("record host events: %+v", res)
	}

	*decodes = 0
	feed.put(t, fleetReport(fleetNode(7), time.Now().Add(time.Second), true)) // the same conditions, republished
	if due := look.due(rec, fl, 1); len(due) != 0 || *decodes != 1 {
		t.Fatalf("republished, conditions recorded: %d due, %d decodes; want 0 due, 1 decode", len(due), *decodes)
	}
	*decodes = 0
	if due := look.due(rec, fl, 2); len(due) != 0 || *decodes != 0 {
		t.Fatalf("a new term: %d due, %d decodes; want 0 due and no decode (every node looked at from the cache)", len(due), *decodes)
	}
}

// One node's report, read among a thousand, is that node's only: nothing is copied or decoded
// of the others.
func TestUnitOneNodesReportCopiesNothingElse(t *testing.T) {
	fl, _, feed, decodes := fleetOf(t, 1000)
	fl.reports() // the fleet's first look
	*decodes = 0
	feed.put(t, fleetReport(fleetNode(3), time.Now(), true))
	rep, from := fl.reportFrom(fleetNode(3))
	if rep == nil || from != "gossip" || !rep.Held[0].Changed || *decodes != 1 {
		t.Fatalf("node 3: %v from %q, %d decodes; want its new report from gossip, 1 decode", rep != nil, from, *decodes)
	}
	if rep := fl.report(fleetNode(4)); rep == nil || rep.Held[0].Changed || *decodes != 1 {
		t.Fatalf("node 4 read after: %d decodes in all, want still 1", *decodes)
	}
}

// The board, the metrics and the page read the fleet every look; over many looks each report is
// decoded once and each node's row built once; a changed report is decoded again and its row
// alone built again; a node removed from the record leaves the fleet and the board.
func TestUnitBoardDecodesAndBuildsWhatChanged(t *testing.T) {
	const n = 100
	fl, rec, feed, decodes := fleetOf(t, n)
	for range 10 {
		if b := fl.board(); len(b.Rows) != n+1 {
			t.Fatalf("board: %d rows, want %d", len(b.Rows), n+1)
		}
		fl.reports()
	}
	if built, _ := fl.boards.Built(); *decodes != n || built != n+1 {
		t.Fatalf("10 looks at a fleet at rest: %d decodes, %d rows built; want %d and %d", *decodes, built, n, n+1)
	}

	feed.put(t, fleetReport(fleetNode(7), time.Now(), true))
	for range 10 {
		fl.board()
	}
	row := fl.board().Rows
	if built, _ := fl.boards.Built(); *decodes != n+1 || built != n+2 {
		t.Fatalf("one report changed: %d decodes, %d rows built; want %d and %d", *decodes, built, n+1, n+2)
	}
	for _, r := range row {
		if r.Node == fleetNode(7) && !strings.Contains(strings.Join(r.Blocking, "; "), "held file /etc/app/file-00.conf") {
			t.Fatalf("node 7's row after its report changed: %+v", r)
		}
	}

	applyTo(t, rec, fsm.OpNodeRemove, fsm.NodeRemove{Node: fleetNode(7), Until: time.Now().Add(time.Hour), Leader: "hub"})
	if b := fl.board(); len(b.Rows) != n {
		t.Fatalf("board after node 7 removed: %d rows, want %d", len(b.Rows), n)
	}
	fl.mu.Lock()
	_, still := fl.nodes[fleetNode(7)]
	fl.mu.Unlock()
	if _, kept := fl.boards.Built(); still || kept != n || *decodes != n+1 {
		t.Fatalf("node 7 removed: still in the fleet %v, %d rows kept, %d decodes; want gone, %d, %d", still, kept, *decodes, n, n+1)
	}
}

// The status page's nodes, rendered at every report that arrives, are built once each while the
// record and their reports stay: a changed report builds its node alone again (the same part a
// fresh build makes), and a node removed from the record leaves the page.
func TestUnitPageBuildsChangedNodesOnly(t *testing.T) {
	const n = 50
	fl, rec, feed, _ := fleetOf(t, n)
	var c pageNodes
	none := func(*fsm.Record, uint64) {}
	for range 5 {
		if got := c.build(rec, fl.stampedReports(), none); len(got) != n+1 {
			t.Fatalf("page: %d nodes, want %d", len(got), n+1)
		}
	}
	if c.built != n+1 {
		t.Fatalf("5 renders at rest: %d nodes built, want %d", c.built, n+1)
	}
	feed.put(t, fleetReport(fleetNode(9), time.Now(), true))
	got := c.build(rec, fl.stampedReports(), none)
	var fresh pageNodes
	if want := fresh.build(rec, fl.stampedReports(), none); c.built != n+2 || !reflect.DeepEqual(got, want) {
		t.Fatalf("node 9's report changed: %d nodes built (want %d), same as a fresh build %v", c.built, n+2, reflect.DeepEqual(got, want))
	}
	applyTo(t, rec, fsm.OpNodeRemove, fsm.NodeRemove{Node: fleetNode(9), Until: time.Now().Add(time.Hour), Leader: "hub"})
	if got := c.build(rec, fl.stampedReports(), none); len(got) != n || len(c.kept) != n {
		t.Fatalf("node 9 removed: %d nodes on the page, %d kept; want %d", len(got), len(c.kept), n)
	}
}

// applyTo applies one command to rec at its next index, as Raft would.
func applyTo(t testing.TB, rec *fsm.FSM, op fsm.Op, body any) {
	t.Helper()
	b, err := fsm.Encode(op, time.Now(), body)
	if err != nil {
		t.Fatal(err)
	}
	if res, ok := rec.Apply(&raft.Log{Index: rec.Applied() + 1, Data: b}).(fsm.Result); !ok || res.Err != nil {
		t.Fatalf("%s: %+v", op, res)
	}
}

// A report's parts are typed once, as the fleet decodes it, so the board, status, the page and the
// metrics read them without decoding them again; each reads the same part it read as JSON.
func TestUnitFleetTypesReportPartsOnce(t *testing.T) {
	fl, _, _, _ := fleetOf(t, 3)
	rep := fl.report(fleetNode(1))
	cr, ok := rep.Kinds[fsm.KindContainer].(*report.ContainerReport)
	if !ok || len(cr.Containers) != 12 {
		t.Fatalf("the container part as the fleet keeps it: %T", rep.Kinds[fsm.KindContainer])
	}
	if files, containers := heldCounts(rep); files != 12 || containers != 12 {
		t.Fatalf("held counts: %d files, %d containers; want 12 and 12", files, containers)
	}
}
