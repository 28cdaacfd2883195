package agent

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// monitorLines GETs path from the agent's operator routes and returns the lines as they come.
func monitorLines(t *testing.T, a *Agent, path string) (<-chan string, *http.Response) {
	t.Helper()
	srv := httptest.NewServer(a.withMetrics(http.NotFoundHandler()))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	return lines, resp
}

// waitLine waits (at most 5 s) for a line containing want, failing on a line containing bad.
func waitLine(t *testing.T, lines <-chan string, want, bad string) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the monitor ended before a line with %q", want)
			}
			if bad != "" && strings.Contains(l, bad) {
				t.Fatalf("the monitor showed %q: %s", bad, l)
			}
			if strings.Contains(l, want) {
				return
			}
		case <-deadline:
			t.Fatalf("no line with %q within 5s", want)
		}
	}
}

// meshd monitor streams the agent's lines as they are logged, with the node's attributes, at the
// level asked (debug lines too, which the agent's own info-level log leaves out).
func TestMonitorStreamsTheAgentsLog(t *testing.T) {
	ts := startTestServer(t, teeLog)
	a := ts.a

	lines, resp := monitorLines(t, a, "/v1/monitor?level=debug")
	if resp.StatusCode != 200 {
		t.Fatalf("GET /v1/monitor: %d", resp.StatusCode)
	}
	waitLine(t, lines, "monitoring node hub's log at level DEBUG", "")
	a.log.Debug("a debug line", "resource", "file:/etc/x")
	waitLine(t, lines, `level=DEBUG msg="a debug line" node=hub resource=file:/etc/x`, "")
	if strings.Contains(ts.log.String(), "a debug line") {
		t.Errorf("the agent's own info-level log took the debug line:\n%s", ts.log.String())
	}

	warn, _ := monitorLines(t, a, "/v1/monitor?level=warn")
	waitLine(t, warn, "monitoring node hub's log at level WARN", "")
	for i := 0; i < 3; i++ {
		a.log.Info(fmt.Sprintf("info %d", i))
	}
	a.log.Warn("a warning")
	waitLine(t, warn, `msg="a warning"`, "info ")

	_, bad := monitorLines(t, a, "/v1/monitor?level=loud")
	if bad.StatusCode != http.StatusBadRequest {
		t.Errorf("level=loud: %d, want 400", bad.StatusCode)
	}
}

// A monitor that reads nothing loses lines, is told how many, and never holds the agent up.
func TestMonitorSlowReaderDropsLines(t *testing.T) {
	hub := newLogHub()
	log := slog.New(newTeeHandler(slog.NewTextHandler(&strings.Builder{}, nil), hub))
	sub := hub.subscribe(slog.LevelInfo)
	for i := 0; i < monitorBuffer+10; i++ {
		log.Info("line", "i", i)
	}
	if got := hub.takeDropped(sub); got != 10 {
		t.Errorf("dropped %d lines, want 10", got)
	}
	if len(sub.lines) != monitorBuffer {
		t.Errorf("%d lines waiting, want %d", len(sub.lines), monitorBuffer)
	}
}

// From a server, meshd monitor NODE streams NODE's lines from NODE's bus over mTLS (here the
// server asks its own bus, as it asks any node's).
func TestMonitorThroughTheBus(t *testing.T) {
	ts := startTestServer(t, teeLog)
	a := ts.a
	ts.startBus(t)

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		a.streamPeerLog(w, req, "hub", slog.LevelInfo)
	}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 {
		t.Fatalf("monitor through the bus: %d", resp.StatusCode)
	}
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	waitLine(t, lines, "monitoring node hub's log at level INFO", "")
	a.log.Info("reached through the bus")
	waitLine(t, lines, `msg="reached through the bus" node=hub`, "")
}

// teeLog sets up an agent's log as Start does: the tee under the agent's own handler (into
// its log output, the test server's log), the node's attributes over both; and its metrics.
func teeLog(a *Agent) {
	a.mx = newMetrics(a, &a.views)
	a.logs = newLogHub()
	own := slog.NewTextHandler(a.cfg.LogOutput, &slog.HandlerOptions{Level: slog.LevelInfo})
	a.log = slog.New(newTeeHandler(own, a.logs)).With("node", a.node.Name)
}
