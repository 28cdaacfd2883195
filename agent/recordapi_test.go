package agent

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"meshd/agent/record"
	"meshd/api"
	"meshd/catalogue"
	"meshd/fsm"
	"meshd/gossip"
	"meshd/report"
	"meshd/setup"
)

// noGossip is a node whose gossip member has not started.
type noGossip struct{}

func (noGossip) member() *gossip.Gossip                  { return nil }
func (noGossip) reportFeed() reportFeed                  { return nil }
func (noGossip) membersByName() map[string]gossip.Member { return nil }

// inmemRecordAPI is the record API over a record in memory after an adopted genesis of hub:
// no disk, no network, no bus, no agent.
func inmemRecordAPI(t *testing.T) (*recordAPI, *record.Service) {
	t.Helper()
	rec := record.New()
	nf := &setup.NodeFile{Name: "hub", ID: "hub-id", Server: true, Advertise: "127.0.0.1"}
	if err := rec.OpenInmem(nf.RaftSelf(), io.Discard); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	t.Cleanup(func() { rec.Close(log) })
	if err := rec.BootstrapSelf(nf.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := rec.Propose("", fsm.OpGenesis, fsm.Genesis{Node: "hub", ID: nf.ID, Mode: fsm.Adopted, Advertise: "127.0.0.1",
		Catalogue: catalogue.DefaultSources()}); err != nil {
		t.Fatal(err)
	}
	fl := newFleet("hub", func() report.Report { return report.Report{} }, rec, noGossip{}, &pulse{}, log)
	return &recordAPI{self: self{node: nf, log: log}, rec: rec, fleet: fl, why: func() string { return "it is alone" }}, rec
}

// ask sends one request to h as the operator's socket would, marked with who asked.
func ask(t *testing.T, h http.Handler, method, path, by string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(""))
	req.Header.Set(api.HeaderAskedBy, by)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

// The record API is a room of its own: over a record in memory, with no bus, agent or disk, an
// assignment is answered once committed, at the index the record applied it, with who asked in
// the log; status and the node's view show it; a module the catalogue lacks is the record's
// refusal, naming it, and changes nothing.
func TestRecordAPIOverARecordInMemory(t *testing.T) {
	s, rec := inmemRecordAPI(t)
	h := s.routes()

	w := ask(t, h, http.MethodPost, "/v1/nodes/hub/modules/webapp/assign", "operator ops")
	if w.Code != http.StatusOK {
		t.Fatalf("assign webapp: %d %s", w.Code, w.Body)
	}
	index, err := strconv.ParseUint(w.Header().Get(api.HeaderIndex), 10, 64)
	if err != nil || index != rec.Index() {
		t.Fatalf("the answer says index %q, the record is at %d", w.Header().Get(api.HeaderIndex), rec.Index())
	}
	if c, err := rec.Entry(index); err != nil || c.By != "operator ops" || c.Op != fsm.OpModuleAssign {
		t.Fatalf("log entry %d: %+v, %v; want the assignment by operator ops", index, c, err)
	}

	var node api.NodeView
	if w := ask(t, h, http.MethodGet, "/v1/nodes/hub", "root"); w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &node) != nil {
		t.Fatalf("node hub: %d %s", w.Code, w.Body)
	}
	if !strings.Contains(strings.Join(node.Node.Assigned, " "), "webapp") {
		t.Fatalf("node hub assigned %v after the assignment", node.Node.Assigned)
	}
	var st api.StatusView
	if w := ask(t, h, http.MethodGet, "/v1/status", "root"); w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &st) != nil {
		t.Fatalf("status: %d %s", w.Code, w.Body)
	}
	if st.Leader.Node != "hub" || st.Leader.Why != "it is alone" || len(st.Nodes) != 1 || st.Nodes[0].Assigned != len(node.Node.Assigned) {
		t.Fatalf("status: leader %+v, nodes %+v", st.Leader, st.Nodes)
	}

	assigned := func() (out []string) {
		rec.Read(func(r *fsm.Record, _ uint64) { out = append(out, r.Nodes["hub"].Assigned...) })
		return out
	}
	before := assigned()
	w = ask(t, h, http.MethodPost, "/v1/nodes/hub/modules/nosuch/assign", "operator ops")
	if w.Code != http.StatusUnprocessableEntity || !strings.Contains(w.Body.String(), "nosuch") {
		t.Fatalf("assign a module the catalogue lacks: %d %s; want 422 naming it", w.Code, w.Body)
	}
	if after := assigned(); strings.Join(after, " ") != strings.Join(before, " ") {
		t.Fatalf("a refused assignment changed hub's modules from %v to %v", before, after)
	}
}
