package main

import (
	"bytes"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"meshd/api"
	"meshd/fsm"
)

// A client's status names the node, its declaration, the servers and where the record is read.
func TestClientStatusText(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	cs := api.ClientStatus{Node: "web1", Mode: fsm.Adopted, Index: 42, Address: "10.99.0.2", Assigned: []string{"mesh"}, Taken: []string{},
		Servers: []string{"198.51.100.1:7947"}, Answered: "198.51.100.1:7947", AnsweredAt: now.Add(-3 * time.Second),
		Members: []api.MemberView{{Name: "hub", Address: "198.51.100.1:7946", State: "alive"}},
		Record:  "node web1 is a client: the whole record is read on a server (hub) or with an operator credential (meshd operator credential create)"}
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	writeClientStatus(tw, cs, now)
	tw.Flush()
	text := b.String()
	for _, want := range []string{"node: web1 (client)", "mode: ADOPTED", "record index 42", "10.99.0.2", "assigned: mesh", "taken: -",
		"servers: 198.51.100.1:7947 (answered last, 3s ago)\n", "hub  ", "alive", "read on a server (hub)"} {
		if !strings.Contains(text, want) {
			t.Errorf("client status lacks %q:\n%s", want, text)
		}
	}
	if n := strings.Count(text, "198.51.100.1:7947"); n != 1 { // a new user read it twice on one line
		t.Errorf("the server's address written %d times:\n%s", n, text)
	}
}
