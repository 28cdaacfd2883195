package agent

import (
	"context"
	"encoding/json"
	"meshd/api"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// The operator's CLI reads the agent's own message on an error answer, the status and body when
// there is none, and a decoded answer otherwise; with no agent on the socket it says so.
func TestClientAnswersOverTheSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "meshd.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/refused", func(w http.ResponseWriter, _ *http.Request) {
		writeErr(w, notFound("module web: not in the catalogue"))
	})
	mux.HandleFunc("GET /v1/bare", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "plain words", http.StatusTeapot)
	})
	mux.HandleFunc("POST /v1/echo", func(w http.ResponseWriter, req *http.Request) {
		var in ModuleAddRequest
		_ = json.NewDecoder(req.Body).Decode(&in)
		writeJSON(w, http.StatusOK, in)
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	defer srv.Close()

	c := NewClient(sock)
	ctx := context.Background()
	if err := c.Get(ctx, "/v1/refused", nil); err == nil || err.Error() != "module web: not in the catalogue" {
		t.Fatalf("error answer: got %v, want the agent's message as it is", err)
	}
	if err := c.Get(ctx, "/v1/bare", nil); err == nil || err.Error() != "agent answered 418 I'm a teapot: plain words" {
		t.Fatalf("answer without a message: got %v", err)
	}
	var out ModuleAddRequest
	in := ModuleAddRequest{}
	in.Source.File = "web.yaml"
	if err := c.Post(ctx, "/v1/echo", in, &out); err != nil || out.Source.File != "web.yaml" {
		t.Fatalf("decoded answer: got %+v, %v", out, err)
	}
	srv.Close()
	gone := NewClient(filepath.Join(t.TempDir(), "none.sock"))
	if err := gone.Get(ctx, "/v1/status", nil); err == nil || !strings.Contains(err.Error(), "no agent is listening on") {
		t.Fatalf("no agent: got %v", err)
	}
}

// A bus answer without a message names who answered; with one, the message is all.
func TestAnswerErrorText(t *testing.T) {
	bare := &api.AnswerError{Status: "502 Bad Gateway", Body: []byte("upstream")}
	if got := bare.Text(""); got != "answered 502 Bad Gateway: upstream" {
		t.Fatalf("got %q", got)
	}
	if got := bare.Text("the bus"); got != "the bus answered 502 Bad Gateway: upstream" {
		t.Fatalf("got %q", got)
	}
	said := &api.AnswerError{Status: "403 Forbidden", Message: "node x may read only its own declaration"}
	if got := said.Text("the bus"); got != said.Message {
		t.Fatalf("got %q", got)
	}
}
