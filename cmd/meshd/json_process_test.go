package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// jsonRun is how TestProcessEveryJSONParses runs one command with --json against its agent.
type jsonRun struct {
	path string   // the command's path after "meshd"
	args []string // its arguments, --json added
	// stream: one JSON object a line; the walk reads lines until one comes, then stops it.
	stream bool
	// refused: --json has no meaning here; exit non-zero, nothing on stdout, the reason on stderr.
	refused bool
	skip    string // why it is not run
}

// jsonWalk is every command, in the order the walk runs them on one agent (an adopted hub with
// a held file); a command added to the tree must be added here.
func jsonWalk(conf, extra, dir string) []jsonRun {
	return []jsonRun{
		{path: "version"},
		{path: "config validate", args: []string{"/dev/null"}},
		{path: "status"},
		{path: "members"},
		{path: "history"},
		{path: "history keep", args: []string{"--count", "3000"}},
		{path: "keyring list"},
		{path: "node show", args: []string{"hub"}},
		{path: "node original", args: []string{"hub", conf}},
		{path: "node original", args: []string{"hub", "file", conf}},
		{path: "declaration", args: []string{"hub"}},
		{path: "module add", args: []string{"--privileged", extra}},
		{path: "module list"},
		{path: "module show", args: []string{"walkextra"}},
		{path: "module assign", args: []string{"hub", "walkextra"}},
		{path: "module take", args: []string{"hub", "walkextra", "--preview"}},
		{path: "module unassign", args: []string{"hub", "walkextra"}},
		{path: "tunnel show"},
		{path: "converge", args: []string{"hub", "--preview"}},
		{path: "node set", args: []string{"hub", "legacy.port=9101"}},
		{path: "operator raft list-peers"},
		{path: "operator credential list"},
		{path: "token create", args: []string{"--adopted"}},
		{path: "snapshot save", args: []string{filepath.Join(dir, "walk.snap")}},
		{path: "join", args: []string{"--name", "walk", "--dry-run", "--adopted", "--data-dir", filepath.Join(dir, "joindata"), "--docker-host", noDocker}},
		{path: "monitor", args: []string{"--log-level", "debug"}, stream: true},
		{path: "check", refused: true},
		{path: "config", refused: true},
		{path: "docs", refused: true},
		{path: "keyring", refused: true},
		{path: "module", refused: true},
		{path: "node", refused: true},
		{path: "operator", refused: true},
		{path: "operator credential", refused: true},
		{path: "operator raft", refused: true},
		{path: "operator seal-key", refused: true},
		{path: "snapshot", refused: true},
		{path: "token", refused: true},
		{path: "tunnel", refused: true},
		{path: "config example", refused: true},
		{path: "completion", args: []string{"bash"}, refused: true},
		{path: "docs cli", refused: true},
		{path: "docs man", args: []string{"--out", dir}, refused: true},
		{path: "install-unit", args: []string{"--dry-run"}, refused: true},
		{path: "tunnel-device", args: []string{"wg9"}, refused: true},
		{path: "help", skip: "cobra's help: it prints help, --json or not"},
		{path: "genesis", skip: "begins a record in a data dir and network namespace of its own"},
		{path: "agent", skip: "runs an agent, which prints a log, not an answer; the walk's agent is one"},
		{path: "boot", skip: "loads the kernel's tables kept in a data dir; needs a node's network namespace"},
		{path: "check reach", skip: "needs a second node to probe (e2e runs it)"},
		{path: "tunnel take", skip: "needs a found WireGuard tunnel"},
		{path: "adopt", skip: "needs a converged node; the walk's is adopted"},
		{path: "leave", skip: "would take the walk's only node out of its mesh"},
		{path: "node remove", skip: "would remove the walk's only node"},
		{path: "keyring install", skip: "changes the gossip key every later command rides on"},
		{path: "keyring use", skip: "changes the gossip key every later command rides on"},
		{path: "keyring remove", skip: "needs a second key installed"},
		{path: "operator credential create", skip: "writes a credential file; TestProcessOperatorCredential runs it"},
		{path: "operator credential revoke", skip: "needs a credential made first"},
		{path: "operator raft remove-peer", skip: "would remove the walk's only voter"},
		{path: "operator raft transfer-leader", skip: "needs a second server"},
		{path: "operator raft recover", skip: "needs a stopped agent's data dir"},
		{path: "operator seal-key restore", skip: "needs a recovery code and a stopped agent"},
		{path: "snapshot restore", skip: "replaces the walk's record; TestCLISnapshot runs it"},
		{path: "module confirm", skip: "needs a module taken in before the allowlist; TestProcessUpgradeNamesUnconfirmedModules runs it"},
	}
}

// Issue 36: every command's --json prints one JSON document on stdout (a stream: one a line), or
// refuses --json with exit 1 and nothing on stdout. The walk covers the whole command tree on one
// agent; a command it neither runs nor names a reason to skip fails it.
func TestProcessEveryJSONParses(t *testing.T) {
	n := newNode(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "legacy.conf")
	if err := os.WriteFile(conf, []byte("port = 9000\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	manifest := func(name, body string) string {
		p := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	legacy := manifest("legacy", fmt.Sprintf("name: legacy\nprivileged: true\nsettings: {port: 9100}\nfiles:\n  - path: %s\n    content: |\n      port = ${port}\n    mode: \"0644\"\n", conf))
	extra := manifest("walkextra", fmt.Sprintf("name: walkextra\nprivileged: true\nfiles:\n  - path: %s\n    content: \"x\\n\"\n", filepath.Join(dir, "extra.conf")))
	n.genesis("--adopted")
	n.startAgent("--reconcile-interval", "200ms")
	n.ok("module", "add", "--privileged", legacy)
	n.ok("module", "assign", "hub", "legacy")
	poll(t, 20*time.Second, "the held file's original recorded", func() string {
		if _, errs, code := n.run("node", "original", "hub", conf); code != 0 {
			return errs
		}
		return ""
	})

	runs := map[string]bool{}
	for _, r := range jsonWalk(conf, extra, dir) {
		runs[r.path] = true
		args := append(append(strings.Fields(r.path), r.args...), "--json")
		switch {
		case r.skip != "":
			t.Logf("meshd %s: skipped: %s", r.path, r.skip)
		case r.stream:
			jsonStream(t, n, args)
		case r.refused:
			out, errs, code := n.run(args...)
			if code == 0 || out != "" || !strings.Contains(errs, "--json") {
				t.Errorf("meshd %s: exit %d, stdout %q, stderr %q; want --json refused on stderr", strings.Join(args, " "), code, clip(out), errs)
			}
		default:
			out, errs, _ := n.run(args...)
			var v any
			if err := json.Unmarshal([]byte(out), &v); err != nil {
				t.Errorf("meshd %s: stdout is not one JSON document: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, clip(out), errs)
			}
		}
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			p := strings.TrimPrefix(sub.CommandPath(), "meshd ")
			if sub.Flag("json") != nil && !runs[p] {
				t.Errorf("meshd %s takes --json but the walk neither runs it nor says why not: add it to jsonWalk", p)
			}
			walk(sub)
		}
	}
	root := newRoot(&globals{})
	root.InitDefaultHelpCmd()
	walk(root)
}

// jsonStream runs a streaming command and reads its stdout until a line comes after a module
// assign made the agent log; every line up to it must be a JSON object.
func jsonStream(t *testing.T, n *node, args []string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, meshdBin, args...)
	cmd.Env = append(os.Environ(), "MESHD_SOCKET="+n.socket)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); _ = cmd.Wait() }()
	lines := make(chan string, 1000)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	time.Sleep(300 * time.Millisecond) // attached before the agent logs
	n.ok("module", "assign", "hub", "webapp")
	deadline := time.After(20 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Errorf("meshd %s ended before a log line", strings.Join(args, " "))
				return
			}
			var v map[string]any
			if err := json.Unmarshal([]byte(l), &v); err != nil {
				t.Errorf("meshd %s: a line is not a JSON object: %v\n%s", strings.Join(args, " "), err, clip(l))
				return
			}
			if v["msg"] == "declaration" {
				return
			}
		case <-deadline:
			t.Errorf("meshd %s: no declaration line within 20s of an assign", strings.Join(args, " "))
			return
		}
	}
}

// clip shortens what a failure quotes.
func clip(s string) string {
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}
