package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"meshd/api"
	"meshd/internal/testenv"
)

// poll runs check until it returns "" or the deadline passes, then fails with its last word.
func poll(t testing.TB, d time.Duration, what string, check func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	last := ""
	for time.Now().Before(deadline) {
		if last = check(); last == "" {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not after %s: %s", what, d, last)
}

// ADR 0100 through the CLI: a file pre-placed at a module's path on an adopted node is held on
// assign, reported changed (not reverted) when another process edits it, converged on take, and
// its original is retrievable with `meshd node original`.
func TestProcessHeldFileThroughCLI(t *testing.T) {
	n := newNode(t)
	etc := filepath.Join(t.TempDir(), "etc", "legacy")
	if err := os.MkdirAll(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(etc, "legacy.conf")
	original := []byte("# written by the predecessor\nport = 9000\npassword = predecessorSecret0b7a\n")
	if err := os.WriteFile(conf, original, 0o640); err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(t.TempDir(), "legacy.yaml")
	os.WriteFile(manifest, []byte(fmt.Sprintf("name: legacy\nprivileged: true\nsettings: {port: 9100}\nfiles:\n  - path: %s\n    content: |\n      port = ${port}\n      token = moduleSecret6e1f\n    mode: \"0644\"\n", conf)), 0o644)

	n.genesis("--adopted")
	n.startAgent("--reconcile-interval", "200ms")
	n.ok("module", "add", "--privileged", manifest)
	n.ok("module", "assign", "hub", "legacy")

	held := func(want func(api.NodeView) string) func() string {
		return func() string {
			var v api.NodeView
			n.jsonOf(&v, "node", "show", "hub")
			if v.Report == nil {
				return "no host report yet"
			}
			return want(v)
		}
	}
	poll(t, 10*time.Second, "assigned file reported held", held(func(v api.NodeView) string {
		for _, h := range v.Report.Held {
			if h.Path == conf && h.Module == "legacy" && !h.Changed {
				return ""
			}
		}
		return fmt.Sprintf("held = %+v", v.Report.Held)
	}))
	if b, _ := os.ReadFile(conf); string(b) != string(original) {
		t.Fatalf("a held file changed on assign: %q", b)
	}
	if out := n.ok("node", "show", "hub"); !strings.Contains(out, conf) || !strings.Contains(out, "held, unchanged") {
		t.Fatalf("node show does not show the held file:\n%s", out)
	}

	// The predecessor, still writing: reported, never reverted.
	edited := []byte("# written by the predecessor, again\nport = 9001\npassword = editedSecret2c5d\n")
	if err := os.WriteFile(conf, edited, 0o640); err != nil {
		t.Fatal(err)
	}
	poll(t, 10*time.Second, "edited held file reported changed", held(func(v api.NodeView) string {
		for _, h := range v.Report.Held {
			if h.Path == conf && h.Changed && h.Reason == "changed by something else" && h.RecordedHash != h.CurrentHash {
				return ""
			}
		}
		return fmt.Sprintf("held = %+v", v.Report.Held)
	}))
	if b, _ := os.ReadFile(conf); string(b) != string(edited) {
		t.Fatalf("a held file that changed was reverted: %q", b)
	}
	if out := n.ok("node", "show", "hub"); !strings.Contains(out, "CHANGED BY SOMETHING ELSE") {
		t.Fatalf("node show does not say the held file changed:\n%s", out)
	}

	// Taking the module converges the file; the original stays retrievable.
	n.ok("module", "take", "hub", "legacy")
	poll(t, 10*time.Second, "taken file converged", func() string {
		b, _ := os.ReadFile(conf)
		if string(b) != "port = 9100\ntoken = moduleSecret6e1f\n" {
			return fmt.Sprintf("content %q", b)
		}
		return ""
	})
	if st, _ := os.Stat(conf); st.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v, want 0644", st.Mode().Perm())
	}
	if got := n.ok("node", "original", "hub", conf); got != string(original) {
		t.Fatalf("node original printed %q, want the bytes found: %q", got, original)
	}
	saved := filepath.Join(t.TempDir(), "orig")
	n.ok("node", "original", "hub", conf, "--output", saved)
	if b, _ := os.ReadFile(saved); string(b) != string(original) {
		t.Fatalf("--output wrote %q", b)
	}
	if _, errs, code := n.run("node", "original", "hub", "/etc/never-declared"); code != 1 || !strings.Contains(errs, "/etc/never-declared") {
		t.Fatalf("original of an unknown path: exit %d %q", code, errs)
	}

	// A copy of the data dir opens none of it (issue 34): the module's content in the Raft log,
	// the original and the bytes the take replaced in the host's record store are all sealed.
	for _, secret := range []string{"moduleSecret6e1f", "predecessorSecret0b7a", "editedSecret2c5d"} {
		if held := testenv.FilesHolding(t, n.dir, secret); len(held) > 0 {
			t.Errorf("%s is in clear in the data dir: %v", secret, held)
		}
	}
}

// Crash safety through the real agent: SIGKILLed (by the host's crash hook) at each step of
// holding a found file and of taking it, restarted, and every original is there and every file
// holds its old or its new content, never a mix or nothing.
func TestProcessSurvivesSIGKILLAtEveryStep(t *testing.T) {
	points := []struct{ point, during string }{
		{"hold.before-record-original", "assign"},
		{"hold.after-record-original", "assign"},
		{"take.after-record-written", "take"},
		{"take.after-temp-write", "take"},
		{"take.after-rename", "take"},
		{"take.after-dir-sync", "take"},
	}
	type file struct{ path, old, new string }
	for _, p := range points {
		t.Run(p.point, func(t *testing.T) {
			n := newNode(t)
			dir := filepath.Join(t.TempDir(), "srv")
			os.MkdirAll(dir, 0o755)
			files := []file{{filepath.Join(dir, "a.conf"), "old a\n", "new a\n"}, {filepath.Join(dir, "b.conf"), "old b\n", "new b\n"}}
			for _, f := range files {
				os.WriteFile(f.path, []byte(f.old), 0o644)
			}
			manifest := filepath.Join(t.TempDir(), "two.yaml")
			os.WriteFile(manifest, []byte(fmt.Sprintf("name: two\nprivileged: true\nfiles:\n  - {path: %s, content: \"new a\\n\"}\n  - {path: %s, content: \"new b\\n\"}\n", files[0].path, files[1].path)), 0o644)
			n.genesis("--adopted")
			n.startAgent("--reconcile-interval", "100ms")
			n.ok("module", "add", "--privileged", manifest)
			heldBoth := func() string {
				var v api.NodeView
				n.jsonOf(&v, "node", "show", "hub")
				if v.Report == nil || len(v.Report.Held) != 2 {
					return "not yet"
				}
				return ""
			}
			// The crash hook fires on the second file, so the first has passed the point already.
			crash := []string{"MESHD_TEST_CRASH_AT=" + p.point + "#2"}
			if p.during == "assign" {
				n.kill(syscall.SIGTERM)
				n.startAgentEnv(crash, "--reconcile-interval", "100ms")
				_, _, _ = n.run("module", "assign", "hub", "two")
			} else {
				n.ok("module", "assign", "hub", "two")
				poll(t, 10*time.Second, "both files held", heldBoth)
				n.kill(syscall.SIGTERM)
				n.startAgentEnv(crash, "--reconcile-interval", "100ms")
				_, _, _ = n.run("module", "take", "hub", "two", "--no-wait")
			}
			if err := waitExit(n, 15*time.Second); err != nil {
				t.Fatalf("agent did not die at %s: %v", p.point, err)
			}
			for _, f := range files {
				got, err := os.ReadFile(f.path)
				if err != nil || (string(got) != f.old && string(got) != f.new) {
					t.Fatalf("after SIGKILL at %s, %s holds %q (%v): neither old nor new", p.point, f.path, got, err)
				}
			}
			n.startAgent("--reconcile-interval", "100ms")
			if p.during == "assign" {
				poll(t, 10*time.Second, "both files held after restart", heldBoth)
				for _, f := range files {
					if got, _ := os.ReadFile(f.path); string(got) != f.old {
						t.Fatalf("a held file changed across the crash: %s holds %q", f.path, got)
					}
				}
				n.ok("module", "take", "hub", "two")
			}
			for _, f := range files {
				poll(t, 10*time.Second, "converged after restart", func() string {
					if got, _ := os.ReadFile(f.path); string(got) != f.new {
						return fmt.Sprintf("%s holds %q", f.path, got)
					}
					return ""
				})
				if got := n.ok("node", "original", "hub", f.path); got != f.old {
					t.Fatalf("original of %s after a crash at %s: %q, want %q", f.path, p.point, got, f.old)
				}
			}
			if entries, _ := os.ReadDir(dir); len(entries) != len(files) {
				t.Fatalf("leftovers in %s: %v", dir, entries)
			}
		})
	}
}

func waitExit(n *node, d time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- n.agent.Wait() }()
	select {
	case <-done:
		return nil
	case <-time.After(d):
		return fmt.Errorf("still running after %s", d)
	}
}

// A restored snapshot is acted on by the server's own host: restoring a record saved before a
// module was assigned removes the file the host created for it, and the declaration the host acts
// on is the restored one. A file that is not a snapshot is refused saying what is wrong with it.
func TestProcessSnapshotRestoreActedOnByHost(t *testing.T) {
	n := newNode(t)
	conf := filepath.Join(t.TempDir(), "restored", "app.conf")
	manifest := filepath.Join(t.TempDir(), "restored.yaml")
	os.WriteFile(manifest, []byte(fmt.Sprintf("name: restored\nprivileged: true\nfiles:\n  - path: %s\n    content: |\n      created\n", conf)), 0o644)

	n.genesis("--adopted")
	n.startAgent()
	n.ok("module", "add", "--privileged", manifest)
	saved := filepath.Join(t.TempDir(), "before-assign.snap")
	n.ok("snapshot", "save", saved)
	n.ok("module", "assign", "hub", "restored")
	poll(t, 10*time.Second, "assigned file created", func() string {
		if b, err := os.ReadFile(conf); err != nil || string(b) != "created\n" {
			return fmt.Sprintf("content %q, %v", b, err)
		}
		return ""
	})

	n.ok("snapshot", "restore", saved)
	if out := n.ok("declaration", "hub"); strings.Contains(out, conf) {
		t.Fatalf("the restored declaration still declares %s:\n%s", conf, out)
	}
	poll(t, 10*time.Second, "the host acts on the restored record (removes the file it created)", func() string {
		if _, err := os.Stat(conf); err == nil {
			return conf + " is still there"
		}
		return ""
	})

	bad := filepath.Join(t.TempDir(), "bad.snap")
	os.WriteFile(bad, []byte("hello\n"), 0o600)
	_, errs, code := n.run("snapshot", "restore", bad)
	if code != 1 || !strings.Contains(errs, bad) || !strings.Contains(errs, "is not a meshd record snapshot") || !strings.Contains(errs, "not valid JSON at byte 1") {
		t.Fatalf("restore of a file that is not JSON: exit %d %q", code, errs)
	}
}
