package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"meshd/api"
)

// `meshd status` on a client's socket, on a real hub and client: --json says the client's own
// gossip runs (a new user read "running": false beside its members), and the text names the
// server it follows once.
func TestProcessClientStatus(t *testing.T) {
	hub, edge := newNode(t), newNode(t)
	hubAndClient(t, hub, edge, noDocker)
	var st api.StatusView
	poll(t, 30*time.Second, "the client's status with its gossip and a server's answer", func() string {
		out, errs, code := edge.run("status", "--json")
		if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.Client == nil {
			return out + errs
		}
		if !st.Gossip.Running || st.Gossip.Node != "edge" || len(st.Client.Members) < 2 || st.Client.Answered == "" {
			return out
		}
		return ""
	})
	text := edge.ok("status")
	if n := strings.Count(text, "192.0.2.1:17070"); n != 1 || !strings.Contains(text, "192.0.2.1:17070 (answered last") {
		t.Errorf("the server named %d times:\n%s", n, text)
	}
}
