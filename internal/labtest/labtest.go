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

var (
	meshdOnce sync.Once
	meshdPath string
	meshdErr  error
)

// Meshd builds meshd (static, to run on any lab machine) once per test binary and returns its
// path. MESHD_LAB_MESHD=PATH runs that binary instead (a benchmark's before and after, each
// built once, measured back to back).
func Meshd(t testing.TB) string {
	t.Helper()
	meshdOnce.Do(func() {
		if p := os.Getenv("MESHD_LAB_MESHD"); p != "" {
			meshdPath = p
			return
		}
		dir, err := os.MkdirTemp("", "meshd-lab-bin-")
		if err != nil {
			meshdErr = err
			return
		}
		meshdPath = filepath.Join(dir, "meshd")
		root, err := lab.ModuleRoot()
		if err != nil {
			meshdErr = err
			return
		}
		cmd := exec.Command("go", "build", "-o", meshdPath, "./cmd/meshd")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			meshdErr = fmt.Errorf("build meshd: %v\n%s", err, out)
		}
	})
	if meshdErr != nil {
		t.Fatal(meshdErr)
	}
	return meshdPath
}
