package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// socketGet GETs path from the node's agent over its operator socket.
func (n *node) socketGet(path string) (string, error) {
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", n.socket)
	}}}
	resp, err := c.Get("http://meshd" + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// A real agent serves /metrics on its socket and at --metrics on loopback, refuses an underlay
// address, and meshd monitor follows its log as it is written.
func TestProcessMetricsAndMonitor(t *testing.T) {
	n := newNode(t)
	n.genesis("--adopted", "--port", "registry=5001")
	n.startAgent("--metrics", "127.0.0.1:9470", "--metrics", "198.51.100.7:9470")

	poll(t, 20*time.Second, "a reconcile pass and the leader in the socket's metrics", func() string {
		text, err := n.socketGet("/metrics")
		if err != nil {
			return err.Error()
		}
		for _, want := range []string{"meshd_raft_leader 1", `meshd_reconcile_passes_total{kind="file"}`, "meshd_raft_commit_index"} {
			if !strings.Contains(text, want) {
				return "no " + want
			}
		}
		return ""
	})
	poll(t, 20*time.Second, "metrics at 127.0.0.1:9470 in the node's namespace", func() string {
		out, err := exec.Command("ip", "netns", "exec", n.netns, "curl", "-sf", "http://127.0.0.1:9470/metrics").Output()
		if err != nil {
			return err.Error()
		}
		if !strings.Contains(string(out), `meshd_held_resources{kind="file",node="hub"}`) {
			return "no meshd_held_resources for hub"
		}
		return ""
	})
	if out, err := exec.Command("ip", "netns", "exec", n.netns, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1:9470/v1/status").Output(); err != nil || string(out) != "404" {
		t.Errorf("the metrics listener answered /v1/status with %s (%v); want 404", out, err)
	}
	poll(t, 20*time.Second, "the underlay metrics address refused in the agent's log", func() string {
		if !strings.Contains(n.agentLg.String(), "198.51.100.7:9470") || !strings.Contains(n.agentLg.String(), "neither loopback nor in the private network") {
			return "not yet"
		}
		return ""
	})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mon := exec.CommandContext(ctx, meshdBin, "monitor", "--log-level", "debug")
	mon.Env = append(os.Environ(), "MESHD_SOCKET="+n.socket)
	out, err := mon.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := mon.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = mon.Wait() }()
	lines := make(chan string, 1000)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	if first := <-lines; !strings.Contains(first, "monitoring node hub's log at level DEBUG") {
		t.Fatalf("meshd monitor began with %q", first)
	}
	n.ok("module", "assign", "hub", "webapp")
	deadline := time.After(20 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("meshd monitor ended before the declaration's line")
			}
			if strings.Contains(l, "msg=declaration") && strings.Contains(l, "node=hub") && strings.Contains(l, "webapp") {
				return
			}
		case <-deadline:
			t.Fatal("meshd monitor showed no declaration line within 20s of the assign")
		}
	}
}
