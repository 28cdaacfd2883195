package main

import (
	"fmt"
	"meshd/api"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Five servers, the shape the docs give for a fleet that must lose two at once: each joins with
// a server token and votes once current (the tokens that make an even count say so); kill -9 two
// of them, the control-node among them, and the three left elect a leader and take writes through
// any of them, nothing acknowledged lost; a third gone, writes refuse naming the quorum of 3 of 5
// and the three missing; one back, writes come back with everything acknowledged still there.
// It stays one body because each step starts from the group the one before left.
func TestProcessRaftFiveServers(t *testing.T) {
	names := []string{"hub", "s2", "s3", "s4", "s5"}
	nodes := map[string]*node{}
	var all []*node
	for _, name := range names {
		n := newNode(t)
		nodes[name] = n
		all = append(all, n)
	}
	underlay(t, all, []string{"192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4", "192.0.2.5"})
	t.Cleanup(func() {
		if t.Failed() {
			for _, name := range names {
				if lg := nodes[name].agentLg; lg != nil {
					t.Logf("agent log of %s:\n%s", name, lg)
				}
			}
		}
	})
	hub := nodes["hub"]
	hub.genesis("--adopted", "--advertise", "192.0.2.1", "--port", "bus=17070")
	agentArgs := []string{"--docker-host", noDocker, "--reconcile-interval", "500ms"}
	hub.startAgent(agentArgs...)

	for i, name := range names[1:] {
		var tv api.TokenView
		// Each token is made on the server that joined last: tokens work on every server.
		all[i].jsonOf(&tv, "token", "create", "--adopted", "--server")
		if even := (i+2)%2 == 0; even != strings.Contains(tv.Warning, "even") {
			t.Fatalf("the server token for %s (making %d servers): warning %q", name, i+2, tv.Warning)
		}
		n := nodes[name]
		if out, errs, code := n.joinIn(tv.Token, "--name", name, "--data-dir", n.dir, "--advertise", fmt.Sprintf("192.0.2.%d", i+2)); code != 0 {
			t.Fatalf("join %s as a server: exit %d\n%s%s", name, code, out, errs)
		}
		n.startAgent(agentArgs...)
		want := strings.Join(names[:i+2], ",")
		poll(t, 30*time.Second, want+" voters", func() string {
			if v := voters(hub); v != want {
				return "voters " + v
			}
			return ""
		})
	}
	if st, err := statusOf(nodes["s5"], false); err != nil || st.Warning != "" || len(st.Voters) != 5 {
		t.Fatalf("status with five voters: voters %v warning %q %v", st.Voters, st.Warning, err)
	}

	dir := t.TempDir()
	addModule := func(on *node, name string) (string, string) {
		t.Helper()
		m := filepath.Join(dir, name+".yaml")
		os.WriteFile(m, []byte(fmt.Sprintf("name: %s\nprivileged: true\nfiles:\n  - path: %s\n    content: |\n      v = 1\n    mode: \"0644\"\n", name, filepath.Join(dir, name+".conf"))), 0o644)
		return write(t, on, "module", "add", "--privileged", m)
	}
	acked := []string{}
	if _, leader := addModule(nodes["s5"], "before"); leader != "hub" {
		t.Fatalf("a write on s5 was answered by %s, not the control-node", leader)
	}
	acked = append(acked, "before")
	inRecord := func(on *node) {
		t.Helper()
		var mods []api.ModuleView
		on.jsonOf(&mods, "module", "list")
		for _, want := range acked {
			if !slices.ContainsFunc(mods, func(m api.ModuleView) bool { return m.Name == want }) {
				t.Fatalf("module %s, acknowledged, is not in the record read on %s", want, on.dir)
			}
		}
	}

	// Two of five gone at once, the leader one of them.
	hub.kill(syscall.SIGKILL)
	nodes["s2"].kill(syscall.SIGKILL)
	killed := time.Now()
	left := []*node{nodes["s3"], nodes["s4"], nodes["s5"]}
	var leader string
	poll(t, 20*time.Second, "a leader among s3, s4 and s5", func() string {
		for _, n := range left {
			if st, err := statusOf(n, true); err == nil && st.Leader.Node != "" && st.Leader.Node != "hub" && st.Leader.Node != "s2" {
				leader = st.Leader.Node
				return ""
			}
		}
		return "no leader"
	})
	t.Logf("new leader %s %s after kill -9 of hub and s2", leader, time.Since(killed).Round(time.Millisecond))
	for i, n := range left {
		name := fmt.Sprintf("three%d", i)
		if _, by := addModule(n, name); by != leader {
			t.Fatalf("a write on %s was answered by %s, not the leader %s", n.dir, by, leader)
		}
		acked = append(acked, name)
	}
	for _, n := range left {
		inRecord(n)
	}

	// A third gone (the leader): two of five cannot commit, and say which three are missing.
	var rest []*node
	for _, name := range []string{"s3", "s4", "s5"} {
		if name == leader {
			nodes[name].kill(syscall.SIGKILL)
			continue
		}
		rest = append(rest, nodes[name])
	}
	poll(t, 10*time.Second, "no leader among the two left", func() string {
		for _, n := range rest {
			if st, err := statusOf(n, true); err != nil || st.Leader.Node != "" {
				return fmt.Sprintf("%s: leader %q %v", n.dir, st.Leader.Node, err)
			}
		}
		return ""
	})
	_, errs, code := rest[0].run("token", "create", "--adopted")
	if code != 1 || !strings.Contains(errs, "quorum of 3 of its 5 voters") {
		t.Fatalf("a write with two of five: exit %d %s", code, errs)
	}
	for _, gone := range []string{"hub", "s2", leader} {
		if !strings.Contains(errs, gone+" (raft") {
			t.Fatalf("a write with two of five does not name %s as missing: %s", gone, errs)
		}
	}
	t.Logf("a write with two of five: %s", strings.TrimSpace(errs))

	// The control-node back: three of five, writes again, nothing acknowledged lost.
	hub.launchAgent(nil, agentArgs...)
	poll(t, 30*time.Second, "a leader with three of five", func() string {
		st, err := statusOf(rest[0], false)
		if err != nil {
			return err.Error()
		}
		if st.Leader.Node == "" {
			return "no leader"
		}
		return ""
	})
	addModule(rest[1], "after")
	acked = append(acked, "after")
	for _, n := range append(rest, hub) {
		inRecord(n)
	}
}
