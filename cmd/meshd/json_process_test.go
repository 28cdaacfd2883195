package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"meshd/api"
	"meshd/catalogue"
)

// jsonRun is how TestProcessEveryJSONParses runs one command with --json against its agent.
type jsonRun struct {
	path string   // the command's path after "meshd"
	args []string // its arguments, --json added
	// stream: one JSON object a line; the walk reads lines until one comes, then stops it.
	stream bool
	// refused: --json has no meaning here; exit non-zero, nothing on stdout, the reason on stderr.
	refused bool
}

// jsonWalk is what the walk runs on one agent (an adopted hub with a held file), in order; the
// commands that need more (a group of three, a credential, a stopped node) are run with --json by
// the tests that build it (jsonOf), and those that change the agent's keys or stop it come after
// the walk. TestMain fails the package when a command with --json went unchecked.
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
		{path: "module status", args: []string{"walkextra"}},
		{path: "module take", args: []string{"hub", "walkextra", "--preview"}},
		{path: "module unassign", args: []string{"hub", "walkextra"}},
		{path: "module draft", args: []string{"hub", "--no-containers", "--file", "walkdraft=" + conf, "--out", filepath.Join(dir, "drafts")}},
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
	}
}

// Issue 36: every command's --json prints one JSON document on stdout (a stream: one a line), or
// refuses --json with exit 1 and nothing on stdout. The walk runs what one agent can; TestMain
// fails the package when a command with --json was run that way by no test (jsoncheck_test.go).
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

	for _, r := range jsonWalk(conf, extra, dir) {
		args := append(append(strings.Fields(r.path), r.args...), "--json")
		switch {
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
			noNull(t, args, out)
		}
		markJSON(strings.Fields(r.path))
	}
	checkDrafted(t, n, filepath.Join(dir, "drafts", "walkdraft.yaml"), conf)

	// The gossip key turned over on the walk's one-member mesh: a key made and used, a second
	// made and removed.
	var made, second, res api.KeyringResult
	n.jsonOf(&made, "keyring", "install")
	n.jsonOf(&res, "keyring", "use", made.Key)
	n.jsonOf(&second, "keyring", "install")
	n.jsonOf(&res, "keyring", "remove", second.Key)
	if made.Key == "" || len(res.Members) != 1 || !slices.Contains(res.Members[0].Keys, api.KeyView{ID: made.KeyID, Primary: true}) ||
		slices.ContainsFunc(res.Members[0].Keys, func(k api.KeyView) bool { return k.ID == second.KeyID }) {
		t.Errorf("the keyring after install, use, install, remove: %+v; want %s primary and %s gone", res.Members, made.KeyID, second.KeyID)
	}
	// The node leaves, its agent stops; what the meshd-boot unit runs then loads its table again.
	var left map[string]any
	n.jsonOf(&left, "leave")
	stopped := make(chan error, 1)
	go func() { stopped <- n.agent.Wait() }()
	select {
	case <-stopped:
	case <-time.After(20 * time.Second):
		t.Fatal("the agent did not stop within 20s of meshd leave")
	}
	boot := n.inNetns(meshdBin, "boot", "--data-dir", n.dir, "--json")
	var bout, berr bytes.Buffer
	boot.Stdout, boot.Stderr = &bout, &berr
	var booted struct{ Loaded string }
	if err := boot.Run(); err != nil || json.Unmarshal(bout.Bytes(), &booted) != nil || booted.Loaded == "" {
		t.Errorf("meshd boot --json: %v, stdout %q, stderr %q; want what it loaded, as JSON", err, clip(bout.String()), berr.String())
	}
	noNull(t, []string{"boot"}, bout.String())
	markJSON([]string{"boot"})
	jsonWalkDone.Store(true)
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
	notes, err := cmd.StderrPipe()
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
	// The stream's first notice, on stderr, says it is attached: the assign's lines come after it.
	attached := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(notes)
		if sc.Scan() {
			attached <- sc.Text()
		}
		close(attached)
		_, _ = io.Copy(io.Discard, notes)
	}()
	deadline := time.After(20 * time.Second)
	select {
	case l := <-attached:
		if !strings.HasPrefix(l, "# monitoring") {
			t.Errorf("meshd %s: its first line on stderr is %q, not the stream's notice", strings.Join(args, " "), l)
			return
		}
	case <-deadline:
		t.Errorf("meshd %s: not attached within 20s", strings.Join(args, " "))
		return
	}
	n.ok("module", "assign", "hub", "webapp")
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
			noNull(t, args, l)
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

// checkDrafted holds what the walk's `module draft` wrote: a 0600 manifest the catalogue reads,
// holding the file as it is on the machine; and that a draft for another node is refused.
func checkDrafted(t *testing.T, n *node, manifest, conf string) {
	t.Helper()
	fi, err := os.Stat(manifest)
	if err != nil {
		t.Fatalf("module draft wrote no manifest: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want 0600 (env values are kept in it)", manifest, fi.Mode().Perm())
	}
	b, _ := os.ReadFile(manifest)
	m, err := catalogue.Parse(manifest, b)
	if err != nil {
		t.Fatalf("the catalogue refuses the draft: %v\n%s", err, b)
	}
	if len(m.Files) != 1 || m.Files[0].Path != conf || m.Files[0].Content != "port = 9000\n" || m.Files[0].Mode != "0640" || !m.Privileged {
		t.Errorf("drafted %+v, want %s as found (0640), privileged (outside the module's places)", m.Files, conf)
	}
	if _, errs, code := n.run("module", "draft", "edge", "--no-containers", "--preview"); code == 0 || !strings.Contains(errs, "which is node hub, not edge") {
		t.Errorf("module draft edge on hub: exit %d, stderr %q; want refused, naming both", code, errs)
	}
}
