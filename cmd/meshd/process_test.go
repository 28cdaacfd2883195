package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"meshd/api"
	"meshd/fsm"
	"meshd/internal/testenv"
	"meshd/pki"
)

var meshdBin, labsvcBin string

// noDocker is the engine address process tests give meshd, so no test reaches this machine's
// Docker engine: meshd reports it unreachable and goes on.
const noDocker = "unix:///nonexistent/docker.sock"

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "meshd-bin-")
	if err != nil {
		panic(err)
	}
	meshdBin = filepath.Join(dir, "meshd")
	labsvcBin = filepath.Join(dir, "labsvc")
	for bin, pkg := range map[string]string{meshdBin: ".", labsvcBin: "../labsvc"} {
		cmd := exec.Command("go", "build", "-o", bin, pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", pkg, err, out)
			os.Exit(1)
		}
	}
	code := failUnchecked(m.Run())
	os.RemoveAll(dir)
	os.Exit(code)
}

// node is one meshd data dir and the agent running on it.
type node struct {
	t       testing.TB
	dir     string
	socket  string
	netns   string
	overlay string
	agent   *exec.Cmd
	agentLg *bytes.Buffer
	// sealKey is the node's seal key file (MESHD_SEAL_KEY), beside its data dir: the agent's /etc
	// is a fresh overlay each run, so the default /etc/meshd/seal.key would not last.
	sealKey string
}

// newNode gives a test its own data dir and socket, and its own network namespace for the agent,
// so an agent under test never touches this machine's firewall or listens on its addresses.
func newNode(t testing.TB) *node {
	dir := t.TempDir()
	n := &node{t: t, dir: filepath.Join(dir, "data"), socket: filepath.Join(dir, "meshd.sock"), sealKey: filepath.Join(dir, "seal.key")}
	testenv.RequireRoot(t, "process tests (each agent in a network namespace of its own)", "ip", "unshare")
	n.netns = fmt.Sprintf("pt-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)
	testenv.NewNetns(t, n.netns)
	return n
}

// inNetns wraps a command so it runs in the node's network namespace, with its own mount namespace
// in which /etc, /srv and /var/lib are private overlays: an agent under test may write what its
// modules declare there (/etc/webapp/app.conf) without touching this machine's files. Its
// /run/wireguard is its own too: the UAPI socket of the WireGuard device an enrolled node raises
// (meshd0) is then not seen by, or confused with, another node's or this machine's.
func (n *node) inNetns(args ...string) *exec.Cmd {
	if n.overlay == "" {
		n.overlay = n.t.TempDir()
	}
	script := `set -e
mount -t tmpfs meshd-test "$OVL"
for d in /etc /srv /var/lib; do
  mkdir -p "$OVL/upper$d" "$OVL/work$d"
  [ -d "$d" ] || continue
  mount -t overlay overlay -o "lowerdir=$d,upperdir=$OVL/upper$d,workdir=$OVL/work$d" "$d"
done
mkdir -p /run/wireguard
mount -t tmpfs meshd-test-wg /run/wireguard
exec "$@"`
	full := append([]string{"netns", "exec", n.netns, "unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh"}, args...)
	cmd := exec.Command("ip", full...)
	cmd.Env = append(os.Environ(), "OVL="+n.overlay, "MESHD_SEAL_KEY="+n.sealKey)
	return cmd
}

// runTimeout bounds one command a process test runs (the longest waits 60s for a flip).
const runTimeout = 2 * time.Minute

// run runs meshd with the node's socket and returns stdout, stderr and the exit code.
func (n *node) run(args ...string) (string, string, int) {
	n.t.Helper()
	cmd := exec.Command(meshdBin, args...)
	cmd.Env = os.Environ()
	if len(args) > 0 && args[0] == "genesis" {
		cmd = n.inNetns(append([]string{meshdBin}, args...)...)
	}
	cmd.Env = append(cmd.Env, "MESHD_SOCKET="+n.socket, "MESHD_SEAL_KEY="+n.sealKey)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		n.t.Fatalf("run meshd %v: %v", args, err)
	}
	// A command that hangs fails its test, named, rather than the package at its timeout.
	timer := time.AfterFunc(runTimeout, func() { _ = cmd.Process.Kill() })
	err := cmd.Wait()
	if !timer.Stop() {
		n.t.Fatalf("meshd %s did not finish within %s\n%s%s", strings.Join(args, " "), runTimeout, out.String(), errb.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		n.t.Fatalf("run meshd %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// ok runs meshd and fails the test unless it exits 0.
func (n *node) ok(args ...string) string {
	n.t.Helper()
	out, errs, code := n.run(args...)
	if code != 0 {
		n.t.Fatalf("meshd %s: exit %d\n%s%s", strings.Join(args, " "), code, out, errs)
	}
	return out
}

// jsonOf runs a read command with --json and decodes it.
func (n *node) jsonOf(v any, args ...string) {
	n.t.Helper()
	out := n.ok(append(args, "--json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		n.t.Fatalf("meshd %v --json printed no JSON: %v\n%s", args, err, out)
	}
	noNull(n.t, args, out)
	markJSON(args)
}

func (n *node) startAgent(extra ...string) {
	n.t.Helper()
	n.startAgentEnv(nil, extra...)
}

// startAgentEnv starts the agent with extra environment (test hooks such as crash points).
func (n *node) startAgentEnv(env []string, extra ...string) {
	n.t.Helper()
	n.launchAgent(env, extra...)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		var st struct {
			Leader struct{ ID string } `json:"leader"`
			Client *struct{}           `json:"client"`
		}
		out, _, code := n.run("status", "--json")
		// A client's socket answers its own status (issue 36): it is ready once it serves it.
		if code == 0 && json.Unmarshal([]byte(out), &st) == nil && (st.Leader.ID != "" || st.Client != nil) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	n.t.Fatalf("agent did not become ready:\n%s", n.agentLg)
}

// launchAgent starts the agent and returns at once.
func (n *node) launchAgent(env []string, extra ...string) {
	n.t.Helper()
	n.agentLg = &bytes.Buffer{}
	n.agent = n.inNetns(append([]string{meshdBin, "agent", "--data-dir", n.dir, "--socket", n.socket, "--docker-host", noDocker}, extra...)...)
	n.agent.Env = append(n.agent.Env, env...)
	n.agent.Stdout, n.agent.Stderr = n.agentLg, n.agentLg
	if err := n.agent.Start(); err != nil {
		n.t.Fatal(err)
	}
	cmd := n.agent
	n.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
}

func (n *node) kill(sig syscall.Signal) {
	n.t.Helper()
	if err := n.agent.Process.Signal(sig); err != nil {
		n.t.Fatal(err)
	}
	_ = n.agent.Wait()
}

func (n *node) genesis(args ...string) string {
	n.t.Helper()
	base := []string{"genesis", "--name", "hub", "--data-dir", n.dir, "--advertise", "127.0.0.1",
		"--port", fmt.Sprintf("raft=%d", testenv.FreePort(n.t)), "--docker-host", noDocker}
	return n.ok(append(base, args...)...)
}

// The process test: genesis on disk, a real agent, assign and take through the CLI, SIGKILL,
// restart; the record and the declaration are intact.
func TestProcessGenesisAssignTakeKillRestart(t *testing.T) {
	n := newNode(t)
	n.genesis("--adopted", "--port", "registry=5001")
	n.startAgent()

	n.ok("module", "assign", "hub", "webapp")
	n.ok("module", "take", "hub", "webapp", "--no-wait") // no Docker engine: the record's side only
	n.ok("module", "assign", "hub", "notes")

	var before fsm.Declaration
	n.jsonOf(&before, "declaration", "hub")
	if before.Mode != fsm.Adopted || fmt.Sprint(before.Taken) != "[webapp]" {
		t.Fatalf("declaration before the kill: mode %s taken %v", before.Mode, before.Taken)
	}
	beforeStatus := n.ok("status", "--json")

	n.kill(syscall.SIGKILL)
	if _, errs, code := n.run("status"); code != 1 || !strings.Contains(errs, n.socket) {
		t.Fatalf("status with the agent dead: exit %d, %q; want exit 1 naming the socket", code, errs)
	}
	n.startAgent()

	var after fsm.Declaration
	n.jsonOf(&after, "declaration", "hub")
	b1, _ := json.Marshal(before)
	b2, _ := json.Marshal(after)
	if !bytes.Equal(b1, b2) {
		t.Fatalf("declaration changed across SIGKILL and restart:\n%s\n%s", b1, b2)
	}
	afterStatus := n.ok("status", "--json")
	if stripIndex(beforeStatus) != stripIndex(afterStatus) {
		t.Fatalf("status changed across restart:\n%s\n%s", beforeStatus, afterStatus)
	}
	// The declaration has the fields scripts rely on, and the registry on the port genesis gave.
	var raw map[string]any
	n.jsonOf(&raw, "declaration", "hub")
	for _, k := range []string{"node", "mode", "assigned", "taken", "resources"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("declaration --json lacks %q", k)
		}
	}
	if !strings.Contains(n.ok("declaration", "hub"), "5001:5000/tcp") {
		t.Error("declaration does not carry the registry on port 5001")
	}

	// A graceful stop, then a start: still intact, and the record moves on.
	n.kill(syscall.SIGTERM)
	n.startAgent()
	n.ok("module", "take", "hub", "notes", "--no-wait")
	var last fsm.Declaration
	n.jsonOf(&last, "declaration", "hub")
	if fmt.Sprint(last.Taken) != "[notes webapp]" {
		t.Fatalf("after restart, taken = %v", last.Taken)
	}
}

// A restarted server's record begins at its last snapshot and replays the rest of its log once it
// leads again: nothing it answers, and nothing its host acts on, may come from before that.
func TestRestartNeverServesAStaleRecord(t *testing.T) {
	n := newNode(t)
	n.genesis("--adopted")
	n.startAgent()
	n.ok("module", "assign", "hub", "webapp")
	n.ok("module", "take", "hub", "webapp", "--no-wait") // no Docker engine: the record's side only
	want := n.ok("declaration", "hub", "--json")
	for round := 0; round < 3; round++ {
		n.kill(syscall.SIGKILL)
		n.launchAgent(nil)
		deadline := time.Now().Add(20 * time.Second)
		for {
			out, _, code := n.run("declaration", "hub", "--json")
			if code == 0 {
				if out != want {
					t.Fatalf("round %d: the first declaration served after a restart is stale:\n%s\nwant:\n%s", round, out, want)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("round %d: no declaration after restart:\n%s", round, n.agentLg)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if strings.Contains(n.agentLg.String(), "assigned=\"[broker mesh registry store]\"") {
			t.Fatalf("round %d: the host was handed a declaration from before the restart's replay:\n%s", round, n.agentLg)
		}
	}
}

// stripIndex keeps what the record says of each node in a status: what a restart must not change.
// The record's index, the leader's election and the gossip liveness (when it last changed) are
// the running agent's, not the record's.
func stripIndex(s string) string {
	var v struct {
		Nodes []map[string]any `json:"nodes"`
	}
	_ = json.Unmarshal([]byte(s), &v)
	for _, n := range v.Nodes {
		for k := range n {
			switch k {
			case "name", "mode", "mode_since", "control_node", "server", "address", "assigned", "taken":
			default:
				delete(n, k)
			}
		}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// Refusals exit 1 with a message naming the node and module, and change nothing.
func TestCLIRefusals(t *testing.T) {
	n := newNode(t)
	n.genesis()
	n.startAgent()
	before := n.ok("declaration", "hub", "--json")
	cases := []struct {
		args []string
		says []string
	}{
		{[]string{"module", "take", "hub", "webapp"}, []string{"node hub", "module webapp", "not assigned"}},
		{[]string{"module", "assign", "hub", "webap"}, []string{"module webap", "did you mean webapp"}},
		{[]string{"module", "assign", "nosuch", "webapp"}, []string{"node nosuch", "no such node"}},
		{[]string{"node", "show", "nosuch"}, []string{"node nosuch"}},
		{[]string{"module", "show", "nosuch"}, []string{"module nosuch"}},
		{[]string{"declaration", "nosuch"}, []string{"node nosuch"}},
		{[]string{"module", "take", "hub"}, []string{"NODE MODULE"}},
	}
	for _, c := range cases {
		out, errs, code := n.run(c.args...)
		if code != 1 {
			t.Errorf("meshd %v: exit %d, want 1 (%s%s)", c.args, code, out, errs)
		}
		for _, s := range c.says {
			if !strings.Contains(errs, s) {
				t.Errorf("meshd %v: stderr %q does not say %q", c.args, errs, s)
			}
		}
	}
	// A converged node: an assigned module counts as taken; take is refused.
	n.ok("module", "assign", "hub", "webapp")
	if _, errs, code := n.run("module", "take", "hub", "webapp"); code != 1 || !strings.Contains(errs, "converged") {
		t.Errorf("take on a converged node: exit %d %q", code, errs)
	}
	n.ok("module", "unassign", "hub", "webapp")
	if after := n.ok("declaration", "hub", "--json"); after != before {
		t.Errorf("declaration changed by refusals:\n%s\n%s", before, after)
	}
	// Genesis twice on the same data dir is refused, naming the node.
	n.kill(syscall.SIGTERM)
	if _, errs, code := n.run("genesis", "--name", "other", "--data-dir", n.dir); code != 1 || !strings.Contains(errs, "already holds node hub") {
		t.Errorf("second genesis: exit %d %q", code, errs)
	}
}

// module add: a good manifest is recorded and assignable; a bad one is refused with file, line
// and field, and nothing is stored.
func TestCLIModuleAdd(t *testing.T) {
	n := newNode(t)
	n.genesis("--adopted")
	n.startAgent()
	dir := t.TempDir()
	good := filepath.Join(dir, "cache.yaml")
	os.WriteFile(good, []byte("name: cache\nsettings: {port: 11211}\ncontainers:\n  - {name: cache, image: lab/echo:1, ports: [\"${port}:8080/tcp\"]}\nopenings:\n  - {port: \"${port}\", from: private, path: forwarded}\n"), 0o644)
	bad := filepath.Join(dir, "broken.yaml")
	os.WriteFile(bad, []byte("name: broken\nfiles:\n  - path: etc/broken.conf\n    contents: x\n"), 0o644)

	n.ok("module", "add", good)
	var mods []struct{ Name string }
	n.jsonOf(&mods, "module", "list")
	if !strings.Contains(fmt.Sprint(mods), "cache") {
		t.Fatalf("cache not listed: %v", mods)
	}
	_, errs, code := n.run("module", "add", bad)
	if code != 1 || !strings.Contains(errs, "broken.yaml:4: files[0].contents: unknown field") {
		t.Fatalf("bad manifest: exit %d, %q", code, errs)
	}
	if _, _, code := n.run("module", "show", "broken"); code != 1 {
		t.Fatal("a refused manifest was stored")
	}
	n.ok("module", "assign", "hub", "cache")
	if !strings.Contains(n.ok("declaration", "hub"), "11211:8080/tcp") {
		t.Fatal("assigned module's resources not in the declaration")
	}

	// Issue 34, finding 1: a module writing outside its own places is refused unless it says
	// privileged: true and the operator says so too (--privileged); then show and the history
	// name who did, and each privileged path with why.
	outside := filepath.Join(dir, "sysctl.yaml")
	os.WriteFile(outside, []byte("name: tune\nfiles:\n  - {path: /etc/sysctl.d/99-x.conf, content: x}\n"), 0o644)
	if _, errs, code := n.run("module", "add", outside); code != 1 || !strings.Contains(errs, "outside the module's own places") || !strings.Contains(errs, "--privileged") {
		t.Fatalf("a sysctl drop-in from an unprivileged module: exit %d, %q", code, errs)
	}
	said := filepath.Join(dir, "tune.yaml")
	os.WriteFile(said, []byte("name: tune\nprivileged: true\nfiles:\n  - {path: /etc/sysctl.d/99-x.conf, content: x}\n"), 0o644)
	if _, errs, code := n.run("module", "add", said); code != 1 || !strings.Contains(errs, "add it with --privileged") {
		t.Fatalf("a privileged module without --privileged: exit %d, %q", code, errs)
	}
	if _, errs, code := n.run("module", "add", "--privileged", good); code != 1 || !strings.Contains(errs, "does not say privileged: true") {
		t.Fatalf("--privileged for a module that does not say it: exit %d, %q", code, errs)
	}
	if out := n.ok("module", "add", "--privileged", said); !strings.Contains(out, "PRIVILEGED: file /etc/sysctl.d/99-x.conf (it sets the kernel's parameters") {
		t.Fatalf("module add --privileged: %q", out)
	}
	if out := n.ok("module", "show", "tune"); !strings.Contains(out, "said so by root on hub's socket") || !strings.Contains(out, "/etc/sysctl.d/99-x.conf") {
		t.Fatalf("module show of a privileged module: %q", out)
	}
	if out := n.ok("history"); !strings.Contains(out, "module tune added to the catalogue, privileged") {
		t.Fatalf("the history does not say who made tune privileged: %q", out)
	}
	if _, errs, code := n.run("module", "confirm", "cache"); code != 1 || !strings.Contains(errs, "needs no privilege") {
		t.Fatalf("confirming a module in its own places: exit %d, %q", code, errs)
	}
}

// snapshot save and restore: the record comes back exactly as saved.
func TestCLISnapshot(t *testing.T) {
	n := newNode(t)
	n.genesis("--adopted")
	n.startAgent()
	n.ok("module", "assign", "hub", "webapp")
	saved := n.ok("declaration", "hub", "--json")
	file := filepath.Join(t.TempDir(), "record.snap")
	n.ok("snapshot", "save", file)
	if st, err := os.Stat(file); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("snapshot file: %v %v", st, err)
	}
	n.ok("module", "take", "hub", "webapp", "--no-wait") // no Docker engine: the record's side only
	n.ok("module", "assign", "hub", "notes")
	var restored any
	n.jsonOf(&restored, "snapshot", "restore", file)
	if got := n.ok("declaration", "hub", "--json"); got != saved {
		t.Fatalf("restored declaration differs:\n%s\n%s", saved, got)
	}
	// And it survives a restart.
	n.kill(syscall.SIGKILL)
	n.startAgent()
	if got := n.ok("declaration", "hub", "--json"); got != saved {
		t.Fatalf("restored declaration lost across restart:\n%s\n%s", saved, got)
	}
	bad := filepath.Join(t.TempDir(), "bad.snap")
	os.WriteFile(bad, []byte("{}"), 0o600)
	if _, errs, code := n.run("snapshot", "restore", bad); code != 1 || !strings.Contains(errs, "bad.snap") {
		t.Fatalf("bad snapshot: exit %d %q", code, errs)
	}
}

// The watch: a blocking declaration query returns as soon as the node's declaration changes, and
// a write that leaves it alone (history's settings here) does not wake it.
func TestDeclarationWatch(t *testing.T) {
	n := newNode(t)
	n.genesis("--adopted")
	n.startAgent()
	// The agent's first report lands in the history a moment after start; wait for it so the
	// index taken below is the record's quiet one.
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(n.ok("history", "--json"), `"history.host"`) {
		if time.Now().After(deadline) {
			t.Fatal("the agent's first host report never reached the history")
		}
		time.Sleep(100 * time.Millisecond)
	}
	var v struct{ Index uint64 }
	out := n.ok("status", "--json")
	_ = json.Unmarshal([]byte(out), &v)
	done := make(chan string, 1)
	go func() {
		o, _, _ := n.run("declaration", "hub", "--wait-index", fmt.Sprint(v.Index), "--json")
		done <- o
	}()
	time.Sleep(300 * time.Millisecond) // let the watch reach the server before the next write
	n.ok("history", "keep", "--count", "1000")
	select {
	case o := <-done:
		t.Fatalf("watch returned on a write that left the declaration alone: %s", o)
	case <-time.After(500 * time.Millisecond):
	}
	n.ok("module", "assign", "hub", "webapp")
	select {
	case o := <-done:
		if !strings.Contains(o, "webapp") {
			t.Fatalf("watch returned without the change: %s", o)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("watch did not return after the record changed")
	}
}

// A seal key genesis makes is written before anything is sealed with it: when its file cannot be
// written, genesis fails naming it and leaves no sealed secret and no record behind (a secret
// sealed under a key that never reached its file could never be opened).
func TestGenesisWritesTheSealKeyFirst(t *testing.T) {
	n := newNode(t)
	notADir := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(notADir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	n.sealKey = filepath.Join(notADir, "seal.key")
	base := []string{"genesis", "--name", "hub", "--data-dir", n.dir, "--advertise", "127.0.0.1",
		"--port", fmt.Sprintf("raft=%d", testenv.FreePort(t)), "--docker-host", noDocker, "--adopted"}
	_, errs, code := n.run(base...)
	if code != 1 || !strings.Contains(errs, n.sealKey) {
		t.Fatalf("genesis with a seal key that cannot be written: exit %d %q; want exit 1 naming %s", code, errs, n.sealKey)
	}
	for _, p := range []string{filepath.Join(n.dir, pki.Subdir), filepath.Join(n.dir, "raft")} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s was written although its seal key never was", p)
		}
	}
}

// hubAndClient links hub (192.0.2.1) and edge (192.0.2.2), raises hub by an adopted genesis with
// its agent, and enrols edge as a client named edge, its agent on dockerHost.
func hubAndClient(t *testing.T, hub, edge *node, dockerHost string) {
	t.Helper()
	link(t, hub, edge, "192.0.2.1", "192.0.2.2")
	hub.genesis("--adopted", "--advertise", "192.0.2.1", "--port", "bus=17070")
	hub.startAgent("--docker-host", noDocker, "--reconcile-interval", "10m")
	var tv api.TokenView
	hub.jsonOf(&tv, "token", "create", "--adopted")
	if out, errs, code := edge.joinIn(tv.Token, "--name", "edge", "--data-dir", edge.dir); code != 0 {
		t.Fatalf("join: exit %d\n%s%s", code, out, errs)
	}
	edge.startAgent("--docker-host", dockerHost, "--reconcile-interval", "10m")
}
