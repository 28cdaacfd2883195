package agent

import (
	"encoding/json"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"meshd/api"
	"meshd/fsm"
)

// Issue 37: a declaration watch (GET /v1/declaration/NODE?index=N) is woken by a command that
// touches its node's declaration, not by one about another node: the hub's watch waits through
// commands about web-1 and answers with the hub's own change once it comes.
func TestDeclarationWatchWaitsThroughOtherNodesCommands(t *testing.T) {
	ts := startTestServer(t)
	if _, err := propose(ts.s.rec, fsm.OpTokenCreate, fsm.TokenCreate{Hash: "h1", Mode: fsm.Adopted, Expires: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := propose(ts.s.rec, fsm.OpNodeEnrol, fsm.Enrol{Node: "web-1", ID: "id-web-1", TokenHash: "h1", PublicKey: "k1"}); err != nil {
		t.Fatal(err)
	}
	var from api.DeclarationView
	ts.onSocket(t, "GET", "/v1/declaration/hub", nil, &from)
	got, asking := make(chan api.DeclarationView, 1), make(chan struct{})
	watch := withSocketAsker("hub", ts.s.operatorAPI())
	go func() {
		rec := httptest.NewRecorder()
		path := "/v1/declaration/hub?wait=60s&index=" + strconv.FormatUint(from.Index, 10)
		req := httptest.NewRequest("GET", path, nil)
		close(asking)
		watch.ServeHTTP(rec, req)
		var v api.DeclarationView
		_ = json.Unmarshal(rec.Body.Bytes(), &v)
		got <- v
	}()
	<-asking
	// Commands about web-1 alone, each a round of Raft while the watch waits.
	var other uint64
	for _, port := range []string{"9001", "9003", "9005"} {
		var err error
		if _, other, err = ts.s.rec.Propose("", fsm.OpSettingsSet, fsm.SetSettings{Node: "web-1", Values: map[string]string{"notes.port": port}}); err != nil {
			t.Fatal(err)
		}
	}
	_, own, err := ts.s.rec.Propose("", fsm.OpSettingsSet, fsm.SetSettings{Node: "hub", Values: map[string]string{"notes.port": "9002"}})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case v := <-got:
		if v.Index < own || v.Declaration == nil {
			t.Fatalf("the hub's watch from index %d answered at %d, woken by a command about web-1 (the last at index %d), not by the hub's own (index %d)",
				from.Index, v.Index, other, own)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the hub's watch from index %d did not answer its own change at index %d", from.Index, own)
	}
	if at := ts.s.rec.Declared("web-1"); at != other {
		t.Fatalf("web-1's declaration last touched at %d, want %d (its settings)", at, other)
	}
}
