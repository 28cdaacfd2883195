package labtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"meshd/internal/testenv"
	"meshd/lab"
)

// Require fails (CI=true) or skips the test when the host cannot run a lab: root, the tools the
// machines use, and the Docker engine's binaries.
func Require(t testing.TB) {
	t.Helper()
	testenv.Require(t, "lab", lab.Missing()...)
}

// Up starts scenario sc as a lab for a test and tears it down when the test ends (also when it
// fails). Under CI=true a missing prerequisite fails the test; otherwise it skips it.
func Up(t testing.TB, sc lab.Scenario, opts ...lab.Options) *lab.Lab {
	t.Helper()
	Require(t)
	var o lab.Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.Name == "" {
		b := make([]byte, 3)
		_, _ = rand.Read(b)
		o.Name = "t" + hex.EncodeToString(b)
	}
	if o.Dir == "" {
		o.Dir = filepath.Join(os.TempDir(), "meshlab-"+o.Name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	l, err := lab.Start(ctx, sc, o)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := lab.Down(ctx, o.Dir); err != nil {
			t.Errorf("lab %s teardown: %v", o.Name, err)
		}
	})
	if err != nil {
		t.Fatalf("lab %s (scenario %s) did not come up: %v", o.Name, sc.Name, err)
	}
	return l
}

// Meshd builds meshd (static, to run on any lab machine) once per test binary and returns its
// path. MESHD_LAB_MESHD=PATH runs that binary instead (a benchmark's before and after, each
// built once, measured back to back).
func Meshd(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("MESHD_LAB_MESHD"); p != "" {
		return p
	}
	return Command(t, "meshd")
}

var (
	buildMu sync.Mutex
	built   = map[string]*build{}
)

type build struct {
	once sync.Once
	path string
	err  error
}

// Command builds the module's command NAME (./cmd/NAME, static) once per test binary and
// returns its path: what a test puts on a lab machine.
func Command(t testing.TB, name string) string {
	t.Helper()
	buildMu.Lock()
	b := built[name]
	if b == nil {
		b = &build{}
		built[name] = b
	}
	buildMu.Unlock()
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", name+"-lab-bin-")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, name)
		root, err := lab.ModuleRoot()
		if err != nil {
			b.err = err
			return
		}
		cmd := exec.Command("go", "build", "-o", b.path, "./cmd/"+name)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("build %s: %v\n%s", name, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}
