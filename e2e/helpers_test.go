package e2e

// The set-up steps the acceptance tests share: putting the meshd binary on lab machines, raising
// the hub with genesis and its agent, keeping the agents' logs of a failed test, and the checks
// that the adoption tests make the same way (the found firewall only gained marked rules, outside
// is refused the guarded ports).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"meshd/internal/testenv"
	"meshd/lab"
	"meshd/packaging/deb"
)

// meshd runs the meshd CLI on a lab machine (its own socket, /run/meshd/meshd.sock). A client's
// socket reads and writes no record (issue 26): once a machine joined, the hub issues it an
// operator credential, and the record's commands run there with it (--credential), over the bus.
func meshd(ctx context.Context, m *lab.Machine, args ...string) (string, error) {
	args = withCredential(m, args)
	out, err := m.Exec(ctx, meshdPath(m), args...)
	return afterMeshd(ctx, m, args, out, err)
}

// withCredential puts the machine's operator credential before a record's command, once it has one.
func withCredential(m *lab.Machine, args []string) []string {
	credMu.Lock()
	path := credOf[m]
	credMu.Unlock()
	if path != "" && len(args) > 0 && !machineLocal(args) {
		return append([]string{"--credential", path}, args...)
	}
	return args
}

// meshdJSON runs a command with --json and decodes its stdout, which must be one JSON document
// and nothing else (issue 36: messages go to stderr). A failed command's error carries stderr;
// its stdout is still decoded into v when it is JSON.
func meshdJSON(ctx context.Context, m *lab.Machine, v any, args ...string) error {
	args = append(withCredential(m, args), "--json")
	cmd := m.Command(ctx, meshdPath(m), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	runErr := cmd.Run()
	if err := json.Unmarshal(out.Bytes(), v); err != nil {
		return fmt.Errorf("%s: meshd %s: stdout is not one JSON document (%v): %q; stderr: %s", m.Name, strings.Join(args, " "), err, out.String(), errb.String())
	}
	if runErr != nil {
		return fmt.Errorf("%s: meshd %s: %w: %s", m.Name, strings.Join(args, " "), runErr, strings.TrimSpace(errb.String()))
	}
	return nil
}

// meshdPath is where the meshd program is on m: the package's /usr/bin/meshd on a systemd
// machine (installPackage), the lab's copy in /usr/local/bin elsewhere (installMeshd).
func meshdPath(m *lab.Machine) string {
	if m.Systemd() {
		return "/usr/bin/meshd"
	}
	return "/usr/local/bin/meshd"
}

// afterMeshd follows a command run on m: the hub is where genesis ran, and a machine that joined
// gets its operator credential from it.
func afterMeshd(ctx context.Context, m *lab.Machine, args []string, out string, err error) (string, error) {
	if err != nil || len(args) == 0 || slices.Contains(args, "--dry-run") {
		return out, err
	}
	switch args[0] {
	case "genesis":
		credMu.Lock()
		genesisOn[labOf(m)] = m
		credMu.Unlock()
	case "join":
		credMu.Lock()
		hub := genesisOn[labOf(m)]
		credMu.Unlock()
		if hub != nil && hub != m {
			if cerr := giveCredential(ctx, hub, m); cerr != nil {
				return out, fmt.Errorf("%s joined, but its operator credential: %w", m.Name, cerr)
			}
		}
	}
	return out, nil
}

var (
	credMu sync.Mutex
	// genesisOn is, per lab (its directory), the machine the last genesis ran on: the lab's hub,
	// which issues credentials. Per lab, since the tests run in parallel, each on its own lab.
	genesisOn = map[string]*lab.Machine{}
	// credOf is each joined machine's operator credential file.
	credOf = map[*lab.Machine]string{}
)

// labOf names m's lab by its directory: a machine's directory is LAB/machines/NAME.
func labOf(m *lab.Machine) string { return filepath.Dir(filepath.Dir(m.Dir())) }

// machineLocal says a command is about the machine itself, asked on its own socket.
func machineLocal(args []string) bool {
	switch args[0] {
	case "join", "agent", "genesis", "members", "leave", "check", "tunnel-device", "boot", "version", "install-unit", "config":
		return true
	}
	return args[0] == "node" && len(args) > 1 && args[1] == "original"
}

// giveCredential has hub issue an operator credential for machine m and puts it there, 0600.
func giveCredential(ctx context.Context, hub, m *lab.Machine) error {
	name := fmt.Sprintf("e2e-%s-%d", m.Name, time.Now().UnixNano()%1e9)
	tmp := "/root/" + name + ".credential"
	if out, err := hub.Exec(ctx, meshdPath(hub), "operator", "credential", "create", "--name", name, "--out", tmp); err != nil {
		return fmt.Errorf("%w\n%s", err, out)
	}
	b, err := hub.ReadFile(ctx, tmp)
	if err != nil {
		return err
	}
	if _, err := hub.Exec(ctx, "rm", "-f", tmp); err != nil {
		return err
	}
	path := "/etc/meshd/operator.credential"
	if err := m.WriteFile(ctx, path, b, 0o600); err != nil {
		return err
	}
	credMu.Lock()
	credOf[m] = path
	credMu.Unlock()
	return nil
}

// meshdJoin runs `meshd join --token-file - ARGS` on a lab machine with token on its standard
// input, the way the runbook joins (a token on the command line is readable by every user).
func meshdJoin(ctx context.Context, m *lab.Machine, token string, args ...string) (string, error) {
	full := append([]string{"join", "--token-file", "-"}, args...)
	out, err := m.ExecStdin(ctx, []byte(token+"\n"), meshdPath(m), full...)
	return afterMeshd(ctx, m, full, out, err)
}

// labDocker is the engine address an agent on a lab machine uses: the machine's own dockerd.
const labDocker = "unix:///run/docker.sock"

// installMeshd puts the meshd binary at bin on each machine as /usr/local/bin/meshd.
func installMeshd(ctx context.Context, t testing.TB, bin string, machines ...*lab.Machine) {
	t.Helper()
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range machines {
		if err := m.WriteFile(ctx, "/usr/local/bin/meshd", b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// hubGenesis is `meshd genesis` for the lab's hub (named hub, its data dir, its own dockerd, its
// address advertised), followed by extra.
func hubGenesis(extra ...string) []string {
	return append([]string{"genesis", "--name", "hub", "--data-dir", "/var/lib/meshd", "--docker-host", labDocker,
		"--advertise", lab.HubAddr}, extra...)
}

// agentArgs runs the agent on a lab machine: its data dir, its own dockerd, a pass every second.
func agentArgs() []string {
	return []string{"agent", "--data-dir", "/var/lib/meshd", "--docker-host", labDocker, "--reconcile-interval", "1s"}
}

// installPackage builds the Debian package from this tree and installs it on m with apt, as an
// operator does on a real machine: the binary at /usr/bin/meshd, the unit enabled but not
// started, the config at /etc/meshd/meshd.yaml.
func installPackage(ctx context.Context, t testing.TB, m *lab.Machine) {
	t.Helper()
	root, err := lab.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	pkg, _, err := deb.BuildIn(root, t.TempDir())
	if err != nil {
		t.Fatalf("building the package: %v", err)
	}
	b, err := os.ReadFile(pkg)
	if err != nil {
		t.Fatal(err)
	}
	in := "/root/" + filepath.Base(pkg)
	if err := m.WriteFile(ctx, in, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := m.Exec(ctx, "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", in); err != nil {
		t.Fatalf("apt install %s on %s: %v\n%s", in, m.Name, err, out)
	}
}

// installAgent installs and starts the agent (agentArgs) from bin on m.
func installAgent(ctx context.Context, t testing.TB, m *lab.Machine, bin string) {
	t.Helper()
	if err := m.InstallAgent(ctx, bin, agentArgs()...); err != nil {
		t.Fatal(err)
	}
}

// stopPredecessorControl stops the predecessor's control on hub, as the operator does before
// adopting (ADR 0100).
func stopPredecessorControl(ctx context.Context, t testing.TB, hub *lab.Machine) {
	t.Helper()
	if err := hub.StopService(ctx, lab.PredecessorControl); err != nil {
		t.Fatal(err)
	}
}

// agentLogsOnFailure logs the last n bytes of each machine's agent log when the test failed.
func agentLogsOnFailure(t testing.TB, n int, machines ...*lab.Machine) {
	t.Cleanup(func() {
		if t.Failed() {
			for _, m := range machines {
				if log := m.UnitLog("meshd", n); log != "" {
					t.Logf("%s agent log (tail):\n%s", m.Name, log)
				}
			}
		}
	})
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// adoptedToken creates an adopted join token on hub.
func adoptedToken(ctx context.Context, t testing.TB, hub *lab.Machine) string {
	t.Helper()
	out, err := meshd(ctx, hub, "token", "create", "--adopted", "--json")
	var tv struct{ Token string }
	if err != nil || json.Unmarshal([]byte(out), &tv) != nil || tv.Token == "" {
		t.Fatalf("token create: %v\n%s", err, out)
	}
	return tv.Token
}

// assignWebapp assigns the webapp module to the hub.
func assignWebapp(ctx context.Context, t *testing.T, hub *lab.Machine) {
	t.Helper()
	if out, err := meshd(ctx, hub, "module", "assign", "hub", "webapp"); err != nil {
		t.Fatalf("assign webapp: %v\n%s", err, out)
	}
}

// webappHeldUnchanged is a poll step: the hub's report holds webapp's file, unchanged.
func webappHeldUnchanged(ctx context.Context, hub *lab.Machine) func() error {
	return func() error {
		rep, err := nodeReport(ctx, hub, "hub")
		if err != nil {
			return err
		}
		if h := heldFile(rep, lab.WebappFile); h == nil || h["changed"] == true {
			return fmt.Errorf("webapp's file not held unchanged: %v", rep["held"])
		}
		return nil
	}
}

// foundationUp waits until the foundation answers on the hub itself at every target and the
// guard table is loaded.
func foundationUp(ctx context.Context, t *testing.T, hub *lab.Machine, targets ...string) {
	t.Helper()
	if err := testenv.Poll(t, 90*time.Second, func() error {
		for _, target := range targets {
			if out, err := hub.Reach(ctx, target); err != nil {
				return fmt.Errorf("the foundation does not answer on the machine at %s: %v %s", target, err, out)
			}
		}
		_, err := hub.Exec(ctx, "nft", "list", "table", "inet", "meshd_guard")
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// outsideRefused checks that outside reaches none of the hub's ports over IPv4 (lab.HubAddr) and
// IPv6 (hub6, bracketed).
func outsideRefused(ctx context.Context, t *testing.T, outside *lab.Machine, hub6 string, ports ...int) {
	t.Helper()
	for _, p := range ports {
		for _, target := range []string{fmt.Sprintf("tcp://%s:%d", lab.HubAddr, p), fmt.Sprintf("tcp://%s:%d", hub6, p)} {
			if out, err := outside.Reach(ctx, target); err == nil {
				t.Errorf("outside reached %s: %s", target, out)
			}
		}
	}
}

// firewallMarkedOnly waits (ufw applies a change in several steps) until the hub's found firewall
// differs from dumpBefore only by rules marked as meshd's.
func firewallMarkedOnly(ctx context.Context, t *testing.T, hub *lab.Machine, dumpBefore string) {
	t.Helper()
	var dump string
	if err := testenv.Poll(t, 15*time.Second, func() error {
		d, err := hub.FirewallDump(ctx)
		if err != nil {
			return err
		}
		dump = d
		return markedOnly(dumpBefore, dump)
	}); err != nil {
		t.Fatalf("found firewall: %v\nbefore:\n%s\nafter:\n%s", err, dumpBefore, dump)
	}
}
