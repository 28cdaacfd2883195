package agent

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"meshd/api"
	"meshd/catalogue"
	"meshd/fsm"
	"meshd/setup"
)

// viewRecord is a record of a genesis server hub (127.0.0.1, its bus on busPort) and n enrolled
// nodes, with apply to change it.
func viewRecord(t *testing.T, busPort, n int) (*fsm.FSM, func(op fsm.Op, body any)) {
	f := fsm.NewFSM()
	apply := func(op fsm.Op, body any) {
		t.Helper()
		applyTo(t, f, op, body)
	}
	apply(fsm.OpGenesis, fsm.Genesis{Node: "hub", ID: "hub-id", Mode: fsm.Adopted, Advertise: "127.0.0.1",
		Catalogue: catalogue.DefaultSources(), Settings: map[string]string{"mesh.bus": strconv.Itoa(busPort)}})
	for i := range n {
		enrolNode(apply, fleetNode(i))
	}
	return f, apply
}

func enrolNode(apply func(fsm.Op, any), name string) {
	hash := "token-" + name
	apply(fsm.OpTokenCreate, fsm.TokenCreate{Hash: hash, Mode: fsm.Adopted, Expires: time.Now().Add(time.Hour)})
	apply(fsm.OpNodeEnrol, fsm.Enrol{Node: name, ID: "id-" + name, TokenHash: hash, Advertise: "127.0.0.2"})
}

// A server composes the view once per change of the record and names it by its content: a node
// that holds the current view is answered "unchanged" in a few bytes; a change of the record that
// leaves the view as it was (a token) keeps its index; one that changes it (an enrolment) gives
// the node the new view. A node that sends no index gets the whole view, as before indexes.
func TestUnitGossipViewByIndex(t *testing.T) {
	rec, apply := viewRecord(t, 4701, 20)
	views := &viewCache{rec: rec}
	var old api.GossipView
	rec.Read(func(r *fsm.Record, _ uint64) { old = gossipViewOf(r, fleetNode(3)) })

	full := views.answer(fleetNode(3), "", false)
	if full.Index == 0 || full.Unchanged || !reflect.DeepEqual(full.Nodes, old.Nodes) || full.Node != fleetNode(3) {
		t.Fatalf("no index sent: %+v; want the whole view as before, with its index", full)
	}
	held := strconv.FormatUint(full.Index, 10)
	for range 10 {
		v := views.answer(fleetNode(3), held, false)
		b, _ := json.Marshal(v)
		if !v.Unchanged || v.Nodes != nil || v.Index != full.Index || len(b) > 100 {
			t.Fatalf("the current index sent: %s; want unchanged, under 100 bytes", b)
		}
	}
	if views.composed != 1 {
		t.Fatalf("the view composed %d times for 11 answers on one record; want 1", views.composed)
	}

	apply(fsm.OpTokenCreate, fsm.TokenCreate{Hash: "another", Mode: fsm.Adopted, Expires: time.Now().Add(time.Hour)})
	if v := views.answer(fleetNode(3), held, false); !v.Unchanged || views.composed != 2 {
		t.Fatalf("a token created: %+v (%d compositions); want unchanged, composed again once", v, views.composed)
	}
	enrolNode(apply, "late")
	v := views.answer(fleetNode(3), held, false)
	if _, ok := v.Peer("late"); v.Unchanged || !ok || v.Index == full.Index {
		t.Fatalf("a node enrolled: %+v; want the new view with node late, a new index", v)
	}
	if w := views.answer(fleetNode(3), "12345", false); w.Unchanged || len(w.Nodes) != 22 {
		t.Fatalf("an index of no current view: %+v; want the whole view", w)
	}
}

// A rolling upgrade: a client asks an old server (which ignores the index and sends no index of
// its own) and a new one in turn, and holds the whole view from either; against the new one its
// second call is answered "unchanged". A change of the view reaches it at its next call.
func TestUnitGossipViewAcrossARollingUpgrade(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	rec, apply := viewRecord(t, port, 5)
	b := &bus{views: &viewCache{rec: rec}}
	var (
		mu      sync.Mutex
		asked   []string // each call's index, as sent
		oldKind = true
		sizes   []int
	)
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		asked = append(asked, req.URL.Query().Get("index"))
		old := oldKind
		mu.Unlock()
		rw := &countingWriter{ResponseWriter: w}
		if old { // the handler before indexes
			var v api.GossipView
			rec.Read(func(r *fsm.Record, _ uint64) { v = gossipViewOf(r, fleetNode(1)) })
			api.WriteJSON(rw, http.StatusOK, v)
		} else {
			b.getGossipView(rw, req, fleetNode(1))
		}
		mu.Lock()
		sizes = append(sizes, rw.n)
		mu.Unlock()
	}))
	ts.Listener = ln
	ts.StartTLS()
	defer ts.Close()
	addr := ln.Addr().String()
	c := &clientRole{core: core{self: self{node: &setup.NodeFile{Name: fleetNode(1)}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}},
		servers: []string{addr}, busClient: ts.Client()}
	refresh := func(what string) api.GossipView {
		t.Helper()
		if err := c.refreshView(t.Context()); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return c.gossipView()
	}

	for i := range 2 {
		if v := refresh(fmt.Sprintf("old server, call %d", i)); len(v.Nodes) != 6 || v.Index != 0 {
			t.Fatalf("from an old server: %d nodes, index %d; want 6, none", len(v.Nodes), v.Index)
		}
	}
	mu.Lock()
	oldKind = false
	mu.Unlock()
	first := refresh("new server, first call")
	second := refresh("new server, second call")
	if len(second.Nodes) != 6 || second.Index == 0 || second.Index != first.Index {
		t.Fatalf("from the new server: %d nodes, index %d then %d", len(second.Nodes), first.Index, second.Index)
	}
	enrolNode(apply, "late")
	after := refresh("after an enrolment")
	if _, ok := after.Peer("late"); !ok {
		t.Fatal("the view after node late enrolled does not hold it")
	}
	// The change came as a delta, and the view the node made of it is the whole view.
	var whole api.GossipView
	rec.Read(func(r *fsm.Record, _ uint64) { whole = gossipViewOf(r, fleetNode(1)) })
	if !reflect.DeepEqual(after.Nodes, whole.Nodes) || after.Index != viewIndex(whole) {
		t.Fatalf("the node's view after the change: %+v; want %+v", after, whole)
	}
	mu.Lock()
	defer mu.Unlock()
	held := strconv.FormatUint(first.Index, 10)
	if want := []string{"", "", "", held, held}; !reflect.DeepEqual(asked, want) {
		t.Fatalf("indexes sent: %q; want %q (none to the old server)", asked, want)
	}
	if sizes[3] > 100 || sizes[2] < 5*sizes[3] {
		t.Fatalf("answer sizes %v: the unchanged answer should be tiny beside the view", sizes)
	}
	if sizes[4] > 300 || 2*sizes[4] > sizes[2] {
		t.Fatalf("answer sizes %v: the answer after one enrolment should be its change alone", sizes)
	}
	mu.Unlock()

	// An old client sends no index and reads the view as it always did.
	resp, err := ts.Client().Get("https://" + addr + "/v1/gossip")
	if err != nil {
		t.Fatal(err)
	}
	var asOld struct {
		Node  string           `json:"node"`
		Nodes []api.GossipPeer `json:"nodes"`
	}
	if err := (api.Endpoint{}).Read(resp, &asOld); err != nil || len(asOld.Nodes) != 7 || asOld.Node != fleetNode(1) {
		t.Fatalf("an old client's call: %+v, %v; want the whole view of 7 nodes", asOld, err)
	}
	mu.Lock()
}

// countingWriter counts the body bytes written.
type countingWriter struct {
	http.ResponseWriter
	n int
}

func (w *countingWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.n += n
	return n, err
}

// A join changes every node's view; a node that asks for the change (delta=1) gets the joined
// node alone, the same bytes at 20 nodes as at 200, and makes of it the very view a whole answer
// gives. A node that does not ask (an agent from before) gets the whole view, as it did; so does
// one holding a view the server no longer keeps.
func TestUnitGossipViewDeltaPerJoin(t *testing.T) {
	size := map[int]int{}
	for _, n := range []int{20, 200} {
		rec, apply := viewRecord(t, 4701, n)
		views := &viewCache{rec: rec}
		had := views.answer(fleetNode(3), "", true)
		held := strconv.FormatUint(had.Index, 10)
		enrolNode(apply, fleetNode(n))
		whole := views.answer(fleetNode(3), "", false)

		d := views.answer(fleetNode(3), held, true)
		if !d.Delta || len(d.Nodes) != 1 || d.Nodes[0].Name != fleetNode(n) || d.Since != had.Index || d.Index != whole.Index {
			t.Fatalf("N=%d: the answer after one join to a node asking for the change: %+v", n, d)
		}
		b, _ := json.Marshal(d)
		size[n] = len(b)
		got, ok := had.ApplyDelta(d)
		if !ok || !reflect.DeepEqual(got.Nodes, whole.Nodes) || got.Index != whole.Index || !reflect.DeepEqual(got.Revoked, whole.Revoked) {
			t.Fatalf("N=%d: the view made of the change differs from the whole view:\n%+v\n%+v", n, got, whole)
		}
		if old := views.answer(fleetNode(3), held, false); old.Delta || len(old.Nodes) != n+2 {
			t.Fatalf("N=%d: a node not asking for the change got %d nodes, delta %v; want the whole view", n, len(old.Nodes), old.Delta)
		}
		if w := views.answer(fleetNode(3), "12345", true); w.Delta || len(w.Nodes) != n+2 {
			t.Fatalf("N=%d: a node holding an unknown view got %d nodes, delta %v; want the whole view", n, len(w.Nodes), w.Delta)
		}
	}
	if size[20] != size[200] {
		t.Fatalf("one join's change is %d bytes at 20 nodes and %d at 200; want the same", size[20], size[200])
	}
	t.Logf("one join's change: %d bytes at 20 and at 200 nodes", size[200])
}
