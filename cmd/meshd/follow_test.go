package main

import (
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"meshd/api"
	"meshd/fsm"
	"meshd/internal/testenv"
	"meshd/report"
)

// On a terminal (a pty from util-linux's script), `meshd module take` follows the node on one
// line redrawn in place: each step ticked once done, what the node's report waits for shown while
// it waits, the answer once the report says the take is carried out. The agent here answers as a
// node that holds the module's file for three reads, then reports it written.
func TestProcessTakeProgressOnATerminal(t *testing.T) {
	scriptBin, err := exec.LookPath("script")
	if err != nil {
		testenv.Prereq(t, "script (util-linux) to run meshd on a terminal: %v", err)
	}
	node := &fsm.Node{Name: "hub", Mode: fsm.Adopted, Assigned: []string{"web"}, Taken: []string{"web"}}
	var reads atomic.Int32
	answer := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/nodes/{node}/modules/{module}/take", func(w http.ResponseWriter, _ *http.Request) { answer(w, node) })
	mux.HandleFunc("GET /v1/nodes/{node}", func(w http.ResponseWriter, _ *http.Request) {
		rep := report.Report{Node: "hub", Mode: fsm.Adopted, When: time.Now().UTC(), Taken: []string{"web"},
			Written: []report.WrittenFile{{Path: "/etc/web.conf", Module: "web"}}}
		if reads.Add(1) <= 3 {
			rep.Written, rep.Held = nil, []report.HeldFile{{Path: "/etc/web.conf", Module: "web"}}
		}
		answer(w, api.NodeView{Node: node, Report: &rep})
	})
	sock := fakeAgentServing(t, mux)

	cmd := exec.Command(scriptBin, "-q", "-e", "-c", meshdBin+" --socket "+sock+" module take hub web", "/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("module take on a terminal: %v\n%q", err, out)
	}
	screen := string(out)
	t.Logf("module take on a terminal wrote:\n%q", screen)
	for _, want := range []string{
		"\r\033[K✓ recording the take of web on hub",
		"\r\033[K⠋ node hub carrying out the take of module web: file /etc/web.conf still held",
		"\r\033[K✓ node hub carrying out the take of module web: file /etc/web.conf still held",
		"\r\033[K✓ node hub carried out the take of module web",
		"module web taken on node hub (adopted)",
		"carried out",
	} {
		if !strings.Contains(screen, want) {
			t.Errorf("the terminal does not show %q", want)
		}
	}
	if strings.Contains(screen, "[0s]") {
		t.Errorf("a terminal got the plain lines meant for a pipe:\n%q", screen)
	}
}
