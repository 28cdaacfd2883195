package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"meshd/fsm"
	"meshd/host/hosttest"
	"meshd/host/pass"
)

// childEnv selects the child mode of the test binary: it names a JSON file with a childSpec.
const childEnv = "HS_HOST_TEST_CHILD"

type childSpec struct {
	DataDir string           `json:"data_dir"`
	Root    string           `json:"root"`
	Decl    *fsm.Declaration `json:"decl"`
}

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(childMain(spec))
	}
	os.Exit(m.Run())
}

// childMain is the agent in a child process: one pass, with whatever crash point is armed.
func childMain(specFile string) int {
	raw, err := os.ReadFile(specFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var s childSpec
	if err := json.Unmarshal(raw, &s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	h, err := Open(Config{DataDir: s.DataDir, Seal: hosttest.Seal, Root: s.Root, Logger: hosttest.Log()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	rep := h.Reconcile(context.Background(), s.Decl)
	h.Close()
	if len(rep.Errors) > 0 {
		fmt.Fprintln(os.Stderr, rep.Errors)
		return 1
	}
	return 0
}

// runChild runs one pass of d in a child process with crash point armed; it reports whether the
// child was killed by SIGKILL (the point was reached).
func runChild(t *testing.T, b *hosttest.Bed, d *fsm.Declaration, point string) bool {
	t.Helper()
	spec, _ := json.Marshal(childSpec{DataDir: b.Data, Root: b.Root, Decl: d})
	specFile := filepath.Join(filepath.Dir(b.Data), "child.json")
	if err := os.WriteFile(specFile, spec, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+specFile, pass.CrashEnv+"="+point)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return true
		}
		t.Fatalf("child failed without crashing at %s: %v\n%s", point, err, out)
	}
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	return false
}

// crashFile is one declared file of a crash scenario: its content before the take (empty: not
// there) and after.
type crashFile struct {
	path, old, new string
}

// Crash safety: the agent is killed at each step of a take (and of holding, creating and
// removing); restarted without the crash point, no original is missing and every file holds its
// old or its new content, never a mix or nothing.
func TestCrashSafety(t *testing.T) {
	hosttest.RequireChown(t)
	twoFiles := []crashFile{
		{"/etc/webapp/app.conf", "predecessor app\n", "mesh app\n"},
		{"/etc/webapp/db.conf", "predecessor db\n", "mesh db\n"},
	}
	writePoints := []string{"take.after-record-written", "take.after-temp-write", "take.after-rename", "take.after-dir-sync"}
	recordPoints := []string{"take.before-record-original", "take.after-record-original"}
	// A take records the latest bytes of every held file it replaces, then writes them all.
	latestPoints := []string{"take.before-record-latest#1", "take.after-record-latest#1",
		"take.before-record-latest#2", "take.after-record-latest#2", "take.before-write-files"}
	nth := func(points []string, n int) []string {
		var out []string
		for _, p := range points {
			out = append(out, fmt.Sprintf("%s#%d", p, n))
		}
		return out
	}
	scenarios := []struct {
		name string
		// setup prepares the node in-process before the crashing pass (held files, created files).
		setup func(t *testing.T, b *hosttest.Bed)
		// crashing is the declaration of the pass that is killed.
		crashing *fsm.Declaration
		files    []crashFile
		points   []string
	}{
		{
			name: "take of held files",
			setup: func(t *testing.T, b *hosttest.Bed) {
				for _, f := range twoFiles {
					b.Place(f.path, f.old)
				}
				h := openBed(b)
				rep := b.Pass(h, crashDecl(fsm.Adopted, twoFiles, false))
				if len(rep.Held) != 2 {
					t.Fatalf("setup: not held: %+v", rep)
				}
				h.Close()
			},
			crashing: crashDecl(fsm.Adopted, twoFiles, true),
			files:    twoFiles,
			points:   append(append(latestPoints, nth(writePoints, 1)...), nth(writePoints, 2)...),
		},
		{
			name: "found files replaced on a converged node",
			setup: func(t *testing.T, b *hosttest.Bed) {
				for _, f := range twoFiles {
					b.Place(f.path, f.old)
				}
			},
			crashing: crashDecl(fsm.Converged, twoFiles, true),
			files:    twoFiles,
			points:   append(nth(append(recordPoints, writePoints...), 1), nth(append(recordPoints, writePoints...), 2)...),
		},
		{
			name: "found files held on an adopted node",
			setup: func(t *testing.T, b *hosttest.Bed) {
				for _, f := range twoFiles {
					b.Place(f.path, f.old)
				}
			},
			crashing: crashDecl(fsm.Adopted, twoFiles, false),
			files: []crashFile{
				{twoFiles[0].path, twoFiles[0].old, twoFiles[0].old},
				{twoFiles[1].path, twoFiles[1].old, twoFiles[1].old},
			},
			points: []string{"hold.before-record-original#1", "hold.after-record-original#1", "hold.after-record-original#2"},
		},
		{
			name:     "missing files created on assign",
			setup:    func(t *testing.T, b *hosttest.Bed) {},
			crashing: crashDecl(fsm.Adopted, []crashFile{{"/etc/webapp/new.conf", "", "created\n"}}, false),
			files:    []crashFile{{"/etc/webapp/new.conf", "", "created\n"}},
			points:   writePoints,
		},
	}
	for _, sc := range scenarios {
		for _, point := range sc.points {
			t.Run(sc.name+"/"+point, func(t *testing.T) {
				b := hosttest.NewBed(t)
				sc.setup(t, b)
				if !runChild(t, b, sc.crashing, point) {
					t.Fatalf("crash point %s was not reached", point)
				}
				// After the crash, before the restart: old or new, and if not old, the original kept.
				h := openBed(b)
				for _, f := range sc.files {
					got, err := os.ReadFile(b.At(f.path))
					switch {
					case err != nil && f.old == "" && os.IsNotExist(err):
					case err != nil:
						t.Fatalf("%s after a crash at %s: %v", f.path, point, err)
					case string(got) != f.old && string(got) != f.new:
						t.Fatalf("%s after a crash at %s holds %q: neither old %q nor new %q", f.path, point, got, f.old, f.new)
					case f.old != "" && string(got) != f.old:
						hosttest.WantOriginal(t, h, f.path, f.old)
					}
				}
				// Restart without the crash point: the pass completes.
				rep := b.Pass(h, sc.crashing)
				hosttest.NoErrors(t, rep)
				for _, f := range sc.files {
					if got := b.Read(f.path); got != f.new {
						t.Errorf("%s after restart: %q, want %q", f.path, got, f.new)
					}
					if f.old != "" && f.old != f.new {
						if b, err := h.Latest(f.path); err != nil || string(b) != f.old {
							t.Errorf("%s: latest bytes before the take %q, %v; want %q", f.path, b, err, f.old)
						}
					}
					if f.old != "" {
						hosttest.WantOriginal(t, h, f.path, f.old)
					} else if _, err := h.Original(f.path); err == nil {
						t.Errorf("%s: a file the host created has an original", f.path)
					}
					if f.old != f.new {
						if hosttest.WrittenOf(rep, f.path) == nil {
							t.Errorf("%s not reported written after restart: %+v", f.path, rep)
						}
					} else if hf := hosttest.HeldOf(rep, f.path); hf == nil || hf.Changed {
						t.Errorf("%s not reported held, unchanged, after restart: %+v", f.path, hf)
					}
					leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(b.At(f.path)), ".*meshd-tmp-*"))
					if len(leftovers) > 0 {
						t.Errorf("temporary files left after restart: %v", leftovers)
					}
				}
				// And the next pass has nothing to do.
				if rep := b.Pass(h, sc.crashing); rep.Changes != 0 {
					t.Errorf("the pass after recovery changed %d things", rep.Changes)
				}
			})
		}
	}
}

// A crash between removing a created file and dropping its record loses nothing and finishes.
func TestCrashSafetyUnassign(t *testing.T) {
	hosttest.RequireChown(t)
	b := hosttest.NewBed(t)
	b.Place(hosttest.AppConf, hosttest.PredecessorContent)
	files := []crashFile{{"/etc/webapp/new.conf", "", "created\n"}, {hosttest.AppConf, hosttest.PredecessorContent, hosttest.PredecessorContent}}
	h := openBed(b)
	hosttest.NoErrors(t, b.Pass(h, crashDecl(fsm.Adopted, files, false)))
	h.Close()
	if !runChild(t, b, crashDecl(fsm.Adopted, nil, false), "unassign.after-remove") {
		t.Fatal("crash point not reached")
	}
	h = openBed(b)
	rep := b.Pass(h, crashDecl(fsm.Adopted, nil, false))
	hosttest.NoErrors(t, rep)
	if !b.Missing("/etc/webapp/new.conf") || b.Read(hosttest.AppConf) != hosttest.PredecessorContent {
		t.Fatal("after the crash: created file back or held file touched")
	}
	if hf := hosttest.HeldOf(rep, hosttest.AppConf); hf == nil || !hf.Unassigned {
		t.Fatalf("held file not reported: %+v", rep.Held)
	}
	if len(rep.Written) != 0 || rep.Changes != 1 { // only the record dropped
		t.Fatalf("after recovery: written %+v, changes %d", rep.Written, rep.Changes)
	}
	hosttest.WantOriginal(t, h, hosttest.AppConf, hosttest.PredecessorContent)
	if !strings.Contains(fmt.Sprint(h.Original("/etc/webapp/new.conf")), "/etc/webapp/new.conf") {
		t.Fatal("Original of a created file does not name it")
	}
}

func crashDecl(mode fsm.Mode, files []crashFile, taken bool) *fsm.Declaration {
	var rs []fsm.Resource
	for _, f := range files {
		rs = append(rs, hosttest.File("webapp", f.path, f.new, taken))
	}
	return hosttest.Decl(mode, rs...)
}
