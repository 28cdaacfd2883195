package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"meshd/agent/raftnode"
	"meshd/api"
	"meshd/internal/testenv"
	"meshd/setup"
)

// underlay joins the nodes' namespaces on one bridge, in a namespace of its own, each node at its
// address on TEST-NET-1: the machines of a lab, able to reach each other and nothing else.
func underlay(t *testing.T, nodes []*node, addrs []string) {
	t.Helper()
	ul := fmt.Sprintf("ul-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)
	testenv.NewNetns(t, ul)
	testenv.Run(t, "ip", "-n", ul, "link", "add", "br0", "type", "bridge")
	testenv.Run(t, "ip", "-n", ul, "link", "set", "br0", "up")
	suffix := time.Now().UnixNano() % 1e5
	for i, n := range nodes {
		outer, inner := fmt.Sprintf("ulb%d-%d", suffix, i), fmt.Sprintf("uln%d-%d", suffix, i)
		testenv.Run(t, "ip", "link", "add", outer, "netns", ul, "type", "veth", "peer", "name", inner, "netns", n.netns)
		testenv.Run(t, "ip", "-n", ul, "link", "set", outer, "master", "br0", "up")
		testenv.Run(t, "ip", "-n", n.netns, "addr", "add", addrs[i]+"/24", "dev", inner)
		testenv.Run(t, "ip", "-n", n.netns, "link", "set", inner, "up")
	}
}

// status is `meshd status --json` on n (stale: answered from n's own record).
func statusOf(n *node, stale bool) (api.StatusView, error) {
	args := []string{"status", "--json"}
	if stale {
		args = append(args, "--stale")
	}
	var st api.StatusView
	out, errs, code := n.run(args...)
	if code != 0 {
		return st, fmt.Errorf("exit %d: %s", code, errs)
	}
	return st, jsonUnmarshal(out, &st)
}

var indexRe = regexp.MustCompile(`committed and applied at record index (\d+) \(answered by ([a-z0-9-]+) \(leader\)\)`)

// write runs a write on n and returns the record index it says it was committed at, and the
// leader that answered it.
func write(t *testing.T, n *node, args ...string) (index, leader string) {
	t.Helper()
	run := n.run
	if len(args) > 0 && args[0] == "--credential" {
		run = n.runIn // over the bus, from the node's machine
	}
	out, errs, code := run(args...)
	if code != 0 {
		t.Fatalf("meshd %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errs)
	}
	m := indexRe.FindStringSubmatch(errs)
	if m == nil {
		t.Fatalf("meshd %s did not say the index it was committed at:\n%s%s", strings.Join(args, " "), out, errs)
	}
	return m[1], m[2]
}

// voters is the voters of the group as `status` says them, answered by the leader.
func voters(n *node) string {
	st, err := statusOf(n, false)
	if err != nil {
		return err.Error()
	}
	return strings.Join(st.Voters, ",")
}

// The Raft group, on four machines (three servers and a client) on one underlay: servers
// join with a server token as non-voters and become voters; a write to a follower and to a client
// is committed once, answered with its index; kill -9 the leader: a new leader within the election
// timeout's order, nothing acknowledged lost, writes through every node, the client's declaration
// watch carries on; the old leader back, the control-node leads again; two of three gone, writes
// refuse naming the missing quorum, and `recover` on the survivor brings writes back with every
// acknowledged command; remove-peer stops a server voting and the group keeps its quorum.
// It stays one body because each step starts from the group the one before left (a new leader,
// the old one back, the quorum lost and recovered): the order is the test.
func TestProcessRaftGroup(t *testing.T) {
	hub, s2, s3, cl := newNode(t), newNode(t), newNode(t), newNode(t)
	underlay(t, []*node{hub, s2, s3, cl}, []string{"192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4"})
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range []*node{hub, s2, s3, cl} {
				if n.agentLg != nil {
					t.Logf("agent log of %s:\n%s", n.dir, n.agentLg)
				}
			}
		}
	})
	hub.genesis("--adopted", "--advertise", "192.0.2.1", "--port", "bus=17070")
	agentArgs := []string{"--docker-host", noDocker, "--reconcile-interval", "200ms"}
	hub.startAgent(agentArgs...)

	// Two servers join with server tokens; the second token warns of an even count.
	var tv api.TokenView
	hub.jsonOf(&tv, "token", "create", "--adopted", "--server")
	if !tv.Server || !strings.Contains(tv.Warning, "even") {
		t.Fatalf("the first server token: server %v warning %q, want an even-count warning", tv.Server, tv.Warning)
	}
	if out, errs, code := s2.joinIn(tv.Token, "--name", "s2", "--data-dir", s2.dir, "--advertise", "192.0.2.2"); code != 0 || !strings.Contains(out, "a server") {
		t.Fatalf("join s2 as a server: exit %d\n%s%s", code, out, errs)
	}
	s2.startAgent(agentArgs...)
	// The second server token is made on the follower s2: tokens work on every server.
	tv = api.TokenView{}
	s2.jsonOf(&tv, "token", "create", "--adopted", "--server")
	if tv.Warning != "" {
		t.Fatalf("a token for the third server warns: %q", tv.Warning)
	}
	if out, errs, code := s3.joinIn(tv.Token, "--name", "s3", "--data-dir", s3.dir, "--advertise", "192.0.2.3"); code != 0 {
		t.Fatalf("join s3 as a server: exit %d\n%s%s", code, out, errs)
	}
	s3.startAgent(agentArgs...)
	start := time.Now()
	poll(t, 30*time.Second, "three voters", func() string {
		if v := voters(hub); v != "hub,s2,s3" {
			return "voters " + v
		}
		return ""
	})
	t.Logf("s3 a voter %s after its agent started", time.Since(start).Round(time.Millisecond))

	// A client, enrolled with a token made on the follower s3, at the follower s3's bus only.
	tv = api.TokenView{}
	s3.jsonOf(&tv, "token", "create", "--adopted")
	if out, errs, code := cl.joinIn(tv.Token, "--name", "cl", "--data-dir", cl.dir, "--advertise", "192.0.2.4"); code != 0 {
		t.Fatalf("join cl: exit %d\n%s%s", code, out, errs)
	}
	cl.startAgent(agentArgs...)
	poll(t, 30*time.Second, "the client learns every server from the record", func() string {
		n, err := agentReadNode(cl.dir)
		if err != nil {
			return err.Error()
		}
		if len(n.Servers) != 3 {
			return fmt.Sprintf("servers %v", n.Servers)
		}
		return ""
	})

	// Writes sent to a follower and from the client's machine with an operator credential:
	// answered by the leader with the index, which is the record's index right after (committed
	// once).
	dir := t.TempDir()
	manifest := filepath.Join(dir, "clapp.yaml")
	conf := filepath.Join(dir, "cl-app.conf")
	os.WriteFile(manifest, []byte(fmt.Sprintf("name: clapp\nprivileged: true\nfiles:\n  - path: %s\n    content: |\n      v = 1\n    mode: \"0644\"\n", conf)), 0o644)
	// The leader's record holds each write at once; it may be past it (a host event recorded).
	idx, leader := write(t, s2, "module", "add", "--privileged", manifest)
	if st, _ := statusOf(hub, false); leader != "hub" || int(st.Index) < atoi(idx) {
		t.Fatalf("module add on follower s2: index %s by %s; the leader's record is at %d", idx, leader, st.Index)
	}
	t.Logf("module add on follower s2: committed at %s by %s", idx, leader)
	cred := filepath.Join(dir, "cl-op.credential")
	var made any
	hub.jsonOf(&made, "operator", "credential", "create", "--name", "cl-op", "--out", cred)
	idx, leader = write(t, cl, "--credential", cred, "module", "assign", "cl", "clapp")
	if st, _ := statusOf(hub, false); leader != "hub" || int(st.Index) < atoi(idx) {
		t.Fatalf("module assign with a credential on cl: index %s by %s; the leader's record is at %d", idx, leader, st.Index)
	}
	t.Logf("module assign with a credential on cl: committed at %s by %s", idx, leader)
	waitDeclared(t, cl, idx)
	// A client's socket, without a credential, writes nothing: not even a token.
	if _, errs, code := cl.run("token", "create", "--adopted", "--server"); code != 1 || !strings.Contains(errs, "node cl is a client") {
		t.Fatalf("a server token asked on a client: exit %d %s", code, errs)
	}
	if _, errs, code := cl.runIn("--credential", cred, "module", "assign", "cl", "clapp"); code != 1 || !strings.Contains(errs, "already assigned") {
		t.Fatalf("the same assign again: exit %d %s", code, errs)
	}
	// A read on a follower is the leader's; with --stale the follower's own, saying how far behind.
	if st, err := statusOf(s3, false); err != nil || st.ServedBy != "hub" || st.Stale != "" {
		t.Fatalf("status on follower s3: %+v %v", st, err)
	}
	if st, err := statusOf(s3, true); err != nil || st.ServedBy != "s3" || !strings.Contains(st.Stale, "behind") {
		t.Fatalf("status --stale on follower s3: served by %q stale %q %v", st.ServedBy, st.Stale, err)
	}
	if _, errs, _ := s3.run("status", "--stale"); !strings.Contains(errs, "stale read: answered by s3") {
		t.Fatalf("status --stale on s3 does not say it is stale: %s", errs)
	}
	acked := []string{"clapp"}

	// kill -9 the leader: a new leader, measured from the kill.
	hub.kill(syscall.SIGKILL)
	killed := time.Now()
	var newLeader string
	poll(t, 20*time.Second, "a new leader", func() string {
		for _, n := range []*node{s2, s3} {
			if st, err := statusOf(n, true); err == nil && st.Leader.Node != "" && st.Leader.Node != "hub" {
				newLeader = st.Leader.Node
				return ""
			}
		}
		return "no new leader"
	})
	elected := time.Since(killed)
	t.Logf("new leader %s %s after kill -9 of hub (election timeout %s)", newLeader, elected.Round(time.Millisecond), raftnode.ElectionTimeout)
	if elected > 10*raftnode.ElectionTimeout {
		t.Errorf("a new leader took %s, more than 10 election timeouts", elected)
	}
	// On the client's machine the record is read and written with the operator credential.
	opArgs := func(n *node, args ...string) []string {
		if n == cl {
			return append([]string{"--credential", cred}, args...)
		}
		return args
	}
	for _, n := range []*node{s2, s3, cl} {
		var mods []api.ModuleView
		out, errs, code := n.runIn(opArgs(n, "module", "list", "--json")...)
		if code != 0 || json.Unmarshal([]byte(out), &mods) != nil {
			t.Fatalf("module list on %s: exit %d\n%s%s", n.dir, code, out, errs)
		}
		for _, want := range acked {
			if !slices.ContainsFunc(mods, func(m api.ModuleView) bool { return m.Name == want }) {
				t.Fatalf("module %s, acknowledged before the kill, is not in the record on %s", want, n.dir)
			}
		}
	}
	// Writes through every node; the client's watch gets each declaration.
	for i, n := range []*node{s2, s3, cl} {
		name := fmt.Sprintf("app%d", i)
		m := filepath.Join(dir, name+".yaml")
		os.WriteFile(m, []byte(fmt.Sprintf("name: %s\nprivileged: true\nfiles:\n  - path: %s\n    content: |\n      v = %d\n    mode: \"0644\"\n", name, filepath.Join(dir, name+".conf"), i)), 0o644)
		write(t, n, opArgs(n, "module", "add", "--privileged", m)...)
		idx, leader := write(t, n, opArgs(n, "module", "assign", "cl", name)...)
		if leader != newLeader {
			t.Fatalf("a write on %s was answered by %s, not the new leader %s", n.dir, leader, newLeader)
		}
		waitDeclared(t, cl, idx)
		acked = append(acked, name)
	}

	// The old leader back: it rejoins, and the control-node leads again.
	back := time.Now()
	hub.launchAgent(nil, agentArgs...)
	poll(t, 30*time.Second, "the control-node leads again", func() string {
		st, err := statusOf(s2, false)
		if err != nil {
			return err.Error()
		}
		if st.Leader.Node != "hub" {
			return "leader " + st.Leader.Node + ": " + st.Leader.Why
		}
		return ""
	})
	t.Logf("hub leads again %s after its agent restarted", time.Since(back).Round(time.Millisecond))
	poll(t, 10*time.Second, "status says why hub leads", func() string {
		if text := s3.ok("status"); !strings.Contains(text, "why: the control-node leads") {
			return text
		}
		return ""
	})
	// transfer-leader hands leadership to s2 now; the control-node takes it back once current.
	var moved api.TransferView
	s3.jsonOf(&moved, "operator", "raft", "transfer-leader", "s2")
	if moved.From != "hub" || moved.To != "s2" {
		t.Fatalf("transfer-leader s2: %+v, want hub -> s2", moved)
	}
	poll(t, 30*time.Second, "the control-node leads again after the transfer", func() string {
		if st, err := statusOf(s2, false); err != nil || st.Leader.Node != "hub" {
			return fmt.Sprintf("leader %q %v", st.Leader.Node, err)
		}
		return ""
	})

	// Two of three gone: hub refuses writes, naming the quorum and both missing servers.
	last, _ := write(t, s2, "token", "create", "--adopted")
	s2.kill(syscall.SIGKILL)
	s3.kill(syscall.SIGKILL)
	poll(t, 10*time.Second, "hub to step down", func() string {
		if st, err := statusOf(hub, true); err == nil && st.Leader.Node == "" {
			return ""
		}
		return "hub still leads"
	})
	_, errs, code := hub.run("token", "create", "--adopted")
	if code != 1 || !strings.Contains(errs, "quorum of 2 of its 3 voters") || !strings.Contains(errs, "s2 (raft") || !strings.Contains(errs, "s3 (raft") {
		t.Fatalf("a write without a quorum: exit %d %s", code, errs)
	}
	t.Logf("a write without a quorum: %s", strings.TrimSpace(errs))
	// recover on the survivor, its agent stopped (a running one holds the log, and is named):
	// writes come back, nothing acknowledged lost.
	if _, errs, code := hub.run("operator", "raft", "recover", "--data-dir", hub.dir); code != 1 || !strings.Contains(errs, "is running; stop it first") {
		t.Fatalf("recover with the agent running: exit %d %s", code, errs)
	}
	hub.kill(syscall.SIGTERM)
	var recovered any
	hub.jsonOf(&recovered, "operator", "raft", "recover", "--data-dir", hub.dir)
	t.Logf("recover: %v", recovered)
	hub.startAgent(agentArgs...)
	if v := voters(hub); v != "hub" {
		t.Fatalf("voters after recover: %s", v)
	}
	if idx, _ := write(t, hub, "token", "create", "--adopted"); atoi(idx) <= atoi(last) {
		t.Fatalf("the first write after recover is at index %s, not after the last acknowledged %s", idx, last)
	}
	var mods []api.ModuleView
	hub.jsonOf(&mods, "module", "list")
	for _, want := range acked {
		if !slices.ContainsFunc(mods, func(m api.ModuleView) bool { return m.Name == want }) {
			t.Fatalf("module %s, acknowledged, is not in the recovered record", want)
		}
	}

	// The lost servers come back: the leader adds them again and they vote once current.
	s2.launchAgent(nil, agentArgs...)
	s3.launchAgent(nil, agentArgs...)
	poll(t, 30*time.Second, "s2 and s3 voters again", func() string {
		if v := voters(hub); v != "hub,s2,s3" {
			return "voters " + v
		}
		return ""
	})

	// remove-peer s3: it stops voting; s3 gone, the two left keep their quorum.
	if _, errs, code := s2.run("operator", "raft", "remove-peer", "hub"); code != 1 || !strings.Contains(errs, "control-node") {
		t.Fatalf("remove-peer of the control-node: exit %d %s", code, errs)
	}
	var removed any
	s2.jsonOf(&removed, "operator", "raft", "remove-peer", "s3")
	t.Logf("remove-peer s3 (on s2): %v", removed)
	if v := voters(hub); v != "hub,s2" {
		t.Fatalf("voters after remove-peer s3: %s", v)
	}
	s3.kill(syscall.SIGKILL)
	write(t, s2, "token", "create", "--adopted")
	write(t, cl, "--credential", cred, "token", "create", "--adopted")
}

// waitDeclared waits until the client's agent passed its host the declaration at index (or a
// later one): its declaration watch missed nothing.
func waitDeclared(t *testing.T, cl *node, index string) {
	t.Helper()
	re := regexp.MustCompile(`msg=declaration node=cl index=(\d+)`)
	poll(t, 20*time.Second, "the client's declaration at index "+index, func() string {
		var seen []string
		for _, m := range re.FindAllStringSubmatch(cl.agentLg.String(), -1) {
			seen = append(seen, m[1])
			if atoi(m[1]) >= atoi(index) {
				return ""
			}
		}
		return "declarations seen at " + strings.Join(seen, ",")
	})
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

func agentReadNode(dir string) (*setup.NodeFile, error) { return setup.ReadNodeFile(dir) }

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
