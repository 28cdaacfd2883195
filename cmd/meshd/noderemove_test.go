package main

import (
	"net/http"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"meshd/api"
	"meshd/pki"
)

// `meshd node remove` on a hub and a client joined over an underlay: the client's own certificate,
// let in before, is refused by the bus once it is removed; its gossip member, its agent still
// running, reads removed in the hub's gossip at once (not failed once the agent stops); its
// address goes to no enrolment within the quarantine; the leader's own node is refused naming
// why, and the record keeps it.
func TestProcessNodeRemove(t *testing.T) {
	hub, edge := newNode(t), newNode(t)
	link(t, hub, edge, "192.0.2.1", "192.0.2.2")
	const bus = "192.0.2.1:17070"
	hub.genesis("--adopted", "--advertise", "192.0.2.1", "--port", "bus=17070")
	hub.startAgent("--docker-host", noDocker, "--reconcile-interval", "200ms")
	join := func(name string) api.NodeView {
		t.Helper()
		var tv api.TokenView
		hub.jsonOf(&tv, "token", "create", "--adopted")
		edge.dir = t.TempDir() + "/data"
		if out, errs, code := edge.joinIn(tv.Token, "--name", name, "--data-dir", edge.dir); code != 0 {
			t.Fatalf("join %s: exit %d\n%s%s", name, code, out, errs)
		}
		var v api.NodeView
		hub.jsonOf(&v, "node", "show", name)
		return v
	}
	before := join("edge")
	sec, err := pki.OpenNodeSecrets(edge.dir, edge.sealKey)
	if err != nil {
		t.Fatal(err)
	}
	id, err := pki.Identity(sec.NodeCertPEM, sec.CACertPEM, sec.NodeKey)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := busGet(t, edge.netns, bus, "/v1/declaration/edge", &id); code != http.StatusOK {
		t.Fatalf("edge reading its own declaration before removal: %d %s", code, body)
	}

	edge.startAgent("--reconcile-interval", "200ms")
	memberState := func(name string) string {
		var mv api.MembersView
		hub.jsonOf(&mv, "members")
		for _, m := range mv.Members {
			if m.Name == name {
				return m.State
			}
		}
		return "unknown"
	}
	poll(t, 30*time.Second, "edge alive in the hub's gossip", func() string {
		if st := memberState("edge"); st != "alive" {
			return "edge is " + st
		}
		return ""
	})

	// The leader's own node (here also the control-node) is refused, and stays.
	if _, errs, code := hub.run("node", "remove", "hub"); code != 1 || !strings.Contains(errs, "node hub leads the Raft group") {
		t.Fatalf("node remove hub: exit %d, %s", code, errs)
	}

	var rv api.NodeRemoveView
	hub.jsonOf(&rv, "node", "remove", "edge", "--quarantine", "1h")
	if rv.Node != "edge" || rv.Address != before.Node.Address || rv.RevokedKey != before.Node.PublicKey || rv.Index == 0 {
		t.Fatalf("node remove --json: %+v; the node was %+v", rv, before.Node)
	}
	if _, errs, code := hub.run("node", "show", "edge"); code == 0 || !strings.Contains(errs, "no such node") {
		t.Fatalf("node show of the removed node: exit %d, %s", code, errs)
	}
	// Out of the hub's gossip at once, though its agent runs on: memberlist would never find it
	// failed while it answers.
	if st := memberState("edge"); st != "removed" {
		t.Fatalf("right after its removal the hub's gossip reads edge %q, want removed", st)
	}
	if edge.agent.ProcessState != nil {
		t.Fatalf("edge's agent stopped: %v\n%s", edge.agent.ProcessState, edge.agentLg)
	}
	edge.kill(syscall.SIGKILL)
	// The tunnel its agent raised stays (a kernel device outlives the process): gone before the
	// machine joins again in this network namespace.
	if out, err := exec.Command("ip", "-n", edge.netns, "-d", "link", "show", "meshd0").CombinedOutput(); err == nil {
		t.Logf("edge's tunnel after its agent stopped: %s", out)
		_ = exec.Command("ip", "-n", edge.netns, "link", "del", "meshd0").Run()
	}
	if st := memberState("edge"); st != "removed" {
		t.Fatalf("once its agent stopped the hub's gossip reads the removed edge %q, want removed", st)
	}
	// The removed node's real certificate: refused, naming the revocation.
	if code, body := busGet(t, edge.netns, bus, "/v1/declaration/edge", &id); code != http.StatusForbidden || !strings.Contains(body, "revoked") {
		t.Fatalf("the removed node's certificate on the bus: %d %s", code, body)
	}
	if code, body := busGet(t, edge.netns, bus, "/v1/gossip", &id); code != http.StatusForbidden {
		t.Fatalf("the removed node's certificate asking the gossip view: %d %s", code, body)
	}
	// A new enrolment within the quarantine gets another address; the name is free again.
	again := join("edge")
	if again.Node.Address == "" || again.Node.Address == before.Node.Address {
		t.Fatalf("a new enrolment within the quarantine got address %q (the removed node had %s)", again.Node.Address, before.Node.Address)
	}
	if code, body := busGet(t, edge.netns, bus, "/v1/declaration/edge", &id); code != http.StatusForbidden {
		t.Fatalf("the removed node's old certificate after its name was enrolled again: %d %s", code, body)
	}
}
