package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"meshd/api"
	"meshd/fsm"
	"meshd/internal/testenv"
	"meshd/report"
)

// dialFrom connects to addr from the network namespace ns, within a second.
func dialFrom(ns, addr string) error {
	return testenv.InNetns(ns, func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	})
}

// The raft port of an adopted server is guarded like the store's: a machine on the underlay that
// is not one of the record's servers cannot connect to it, a server can, and the guard follows the
// record as a server joins (s2 is refused before it enrols as a server, admitted once it has);
// converged, the derived filter admits the servers alone the same way.
func TestProcessRaftPortAdmitsOnlyServers(t *testing.T) {
	hub, s2 := newNode(t), newNode(t)
	outside := &node{t: t, netns: fmt.Sprintf("pto-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)}
	testenv.NewNetns(t, outside.netns)
	underlay(t, []*node{hub, s2, outside}, []string{"192.0.2.1", "192.0.2.2", "192.0.2.9"})
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range []*node{hub, s2} {
				if n.agentLg != nil {
					t.Logf("agent log of %s:\n%s", n.dir, n.agentLg)
				}
			}
		}
	})
	hub.genesis("--adopted", "--advertise", "192.0.2.1", "--port", "bus=17070")
	agentArgs := []string{"--docker-host", noDocker, "--reconcile-interval", "200ms"}
	hub.startAgent(agentArgs...)
	raftPort, err := strconv.Atoi(hub.settings()["mesh.raft"])
	if err != nil {
		t.Fatalf("the hub's mesh.raft setting: %v", err)
	}
	hubRaft := fmt.Sprintf("192.0.2.1:%d", raftPort)

	// The guard is in once the hub's agent has converged its openings; from then on neither
	// outside nor s2 (not yet a server) connects to the hub's raft port.
	guarded := func() error {
		out, err := hub.inNetns("nft", "list", "table", "inet", "meshd_guard").CombinedOutput()
		if err != nil || !strings.Contains(string(out), fmt.Sprintf("dport %d", raftPort)) {
			return fmt.Errorf("the hub's guard does not name the raft port %d: %v\n%s", raftPort, err, out)
		}
		return nil
	}
	if err := testenv.Poll(t, 30*time.Second, guarded); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*node{outside, s2} {
		if err := dialFrom(n.netns, hubRaft); err == nil {
			t.Fatalf("%s (not a server) connected to the hub's raft port %s", n.netns, hubRaft)
		}
	}
	// The bus stays open to everyone: that is where s2 enrols.
	if err := dialFrom(outside.netns, "192.0.2.1:17070"); err != nil {
		t.Fatalf("outside cannot reach the hub's bus: %v", err)
	}

	var tv api.TokenView
	hub.jsonOf(&tv, "token", "create", "--adopted", "--server")
	if out, errs, code := s2.joinIn(tv.Token, "--name", "s2", "--data-dir", s2.dir, "--advertise", "192.0.2.2"); code != 0 {
		t.Fatalf("join s2 as a server: exit %d\n%s%s", code, out, errs)
	}
	s2.startAgent(agentArgs...)
	poll(t, 60*time.Second, "s2 a voter", func() string {
		if v := voters(hub); v != "hub,s2" {
			return "voters " + v
		}
		return ""
	})
	// s2 is a server in the record now: the hub's guard admits it, and nobody else.
	if err := testenv.Poll(t, 30*time.Second, func() error { return dialFrom(s2.netns, hubRaft) }); err != nil {
		t.Fatalf("s2, a server, cannot connect to the hub's raft port %s: %v", hubRaft, err)
	}
	if err := dialFrom(outside.netns, hubRaft); err == nil {
		t.Fatalf("outside connected to the hub's raft port %s after s2 joined", hubRaft)
	}
	// s2 guards its own raft port the same way: the hub gets in, outside does not.
	var d2 fsm.Declaration
	hub.jsonOf(&d2, "declaration", "s2")
	s2Raft := fmt.Sprintf("192.0.2.2:%d", d2.Mesh.Raft)
	if err := testenv.Poll(t, 30*time.Second, func() error {
		if err := dialFrom(outside.netns, s2Raft); err == nil {
			return fmt.Errorf("outside connects to s2's raft port %s", s2Raft)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := dialFrom(hub.netns, s2Raft); err != nil {
		t.Fatalf("the hub cannot connect to s2's raft port %s: %v", s2Raft, err)
	}

	// Converged, the hub's derived filter (drop by default, the found firewall gone) admits the
	// raft port from the record's servers alone, as the guard did: s2 gets in, outside does not.
	out, errs, code := hub.run("converge", "hub", "--preview", "--json")
	var pv report.ConvergePreview
	if err := json.Unmarshal([]byte(out), &pv); err != nil || pv.Token == "" {
		t.Fatalf("converge --preview: exit %d, %v\n%s%s", code, err, out, errs)
	}
	if out, errs, code := hub.run("converge", "hub", "--plan", pv.Token, "--wait", "60s"); code != 0 || !strings.Contains(out, "inet meshd_filter loaded") {
		t.Fatalf("converge hub: exit %d\n%s%s", code, out, errs)
	}
	filtered := func() error {
		out, err := hub.inNetns("nft", "list", "table", "inet", "meshd_filter").CombinedOutput()
		if err != nil || !strings.Contains(string(out), fmt.Sprintf("ip saddr 192.0.2.2 tcp dport %d accept", raftPort)) {
			return fmt.Errorf("the hub's derived filter does not admit s2 alone to the raft port %d: %v\n%s", raftPort, err, out)
		}
		return nil
	}
	if err := testenv.Poll(t, 30*time.Second, filtered); err != nil {
		t.Fatal(err)
	}
	if err := dialFrom(outside.netns, hubRaft); err == nil {
		t.Fatalf("outside connected to the converged hub's raft port %s", hubRaft)
	}
	if err := testenv.Poll(t, 10*time.Second, func() error { return dialFrom(s2.netns, hubRaft) }); err != nil {
		t.Fatalf("s2, a server, cannot connect to the converged hub's raft port %s: %v", hubRaft, err)
	}
}
