package container

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// privateDockerd is a Docker engine of the test's own, which it may stop and start at will. It
// never touches the host's firewall or network: it runs in a network namespace of its own, with
// no iptables, no masquerading, no bridge; its storage is vfs under its own directory.
type privateDockerd struct {
	t    *testing.T
	bin  string
	dir  string
	sock string
	cmd  *exec.Cmd
	done chan error
}

func newPrivateDockerd(t *testing.T) *privateDockerd {
	t.Helper()
	bin, err := exec.LookPath("dockerd")
	if err != nil {
		fatalOrSkip(t, "no dockerd binary: %v", err)
	}
	if os.Geteuid() != 0 {
		fatalOrSkip(t, "a private dockerd needs root (euid %d)", os.Geteuid())
	}
	dir, err := os.MkdirTemp("", "ct-dockerd-")
	if err != nil {
		t.Fatal(err)
	}
	// An empty config file, so the host's /etc/docker/daemon.json (data-root, storage driver)
	// does not apply.
	if err := os.WriteFile(filepath.Join(dir, "daemon.json"), []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := &privateDockerd{t: t, bin: bin, dir: dir, sock: filepath.Join(dir, "docker.sock")}
	t.Cleanup(func() {
		d.stop()
		if err := os.RemoveAll(dir); err != nil {
			t.Logf("cleanup %s: %v", dir, err)
		}
	})
	return d
}

func (d *privateDockerd) start() {
	d.t.Helper()
	logf, err := os.OpenFile(filepath.Join(d.dir, "dockerd.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		d.t.Fatal(err)
	}
	defer logf.Close()
	d.cmd = exec.Command(d.bin,
		"--config-file", filepath.Join(d.dir, "daemon.json"),
		"--data-root", filepath.Join(d.dir, "data"),
		"--exec-root", filepath.Join(d.dir, "exec"),
		"--pidfile", filepath.Join(d.dir, "docker.pid"),
		"-H", "unix://"+d.sock,
		"--iptables=false", "--ip6tables=false", "--ip-masq=false", "--bridge=none",
		"--storage-driver", "vfs",
	)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	// Its own network namespace: a dockerd started with --bridge=none deletes the docker0 link
	// of the namespace it runs in, which on the host's would cut the host engine's containers
	// off. Its socket is a file, reachable from here all the same. Its own process group (so its
	// containerd can be ended with it), and terminated if the test binary dies first.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNET,
		Setpgid:    true,
		Pdeathsig:  syscall.SIGTERM,
	}
	if err := d.cmd.Start(); err != nil {
		d.t.Fatalf("start dockerd: %v", err)
	}
	done := make(chan error, 1)
	go func(c *exec.Cmd) { done <- c.Wait() }(d.cmd)
	d.done = done
}

// stop ends the private dockerd (and only it: its process group, by id) and waits for it to exit.
func (d *privateDockerd) stop() {
	if d.cmd == nil {
		return
	}
	pid := d.cmd.Process.Pid
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		d.t.Logf("dockerd %d did not stop on SIGTERM; killing its process group", pid)
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		<-d.done
	}
	// Its containerd exits with it; end whatever of the group is left.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	d.cmd = nil
}

func (d *privateDockerd) logTail() string {
	b, _ := os.ReadFile(filepath.Join(d.dir, "dockerd.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// waitUp polls the engine until it answers.
func waitUp(t *testing.T, e *Engine, d *privateDockerd) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = e.Ping(ctx)
		cancel()
		if err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("private dockerd never answered: %v\n%s", err, d.logTail())
}

// TestEngineUnreachableAndBack: the engine stopped makes every call fail with
// ErrEngineUnreachable naming the socket; started again, the same Engine works without being
// made anew.
func TestEngineUnreachableAndBack(t *testing.T) {
	d := newPrivateDockerd(t)
	d.start()
	e, err := New(d.sock)
	if err != nil {
		t.Fatal(err)
	}
	waitUp(t, e, d)
	ctx := testCtx(t)

	works := func(when string) {
		t.Helper()
		if _, found, err := e.Inspect(ctx, "ct-nothing-here"); err != nil || found {
			t.Fatalf("%s: Inspect = found %v, %v", when, found, err)
		}
		if ps, err := e.Published(ctx); err != nil || len(ps) != 0 {
			t.Fatalf("%s: Published = %v, %v", when, ps, err)
		}
		// A missing image on a live engine is a missing image, not an unreachable engine.
		_, err := e.Create(ctx, Spec{Name: "ct-nothing-here", Image: "ct-test/absent:" + runID})
		if !errors.Is(err, ErrImageMissing) || errors.Is(err, ErrEngineUnreachable) {
			t.Fatalf("%s: Create with a missing image = %v", when, err)
		}
	}
	works("engine up")

	d.stop()
	calls := map[string]func() error{
		"Ping": func() error { return e.Ping(ctx) },
		"Inspect": func() error {
			_, _, err := e.Inspect(ctx, "ct-nothing-here")
			return err
		},
		"Published": func() error {
			_, err := e.Published(ctx)
			return err
		},
		"Create": func() error {
			_, err := e.Create(ctx, Spec{Name: "ct-nothing-here", Image: "ct-test/echo:1"})
			return err
		},
		"Remove": func() error { return e.Remove(ctx, "ct-nothing-here") },
		"Replace": func() error {
			_, _, err := e.Replace(ctx, Observed{Name: "ct-nothing-here"}, Spec{Name: "ct-nothing-here", Image: "ct-test/echo:1"})
			return err
		},
	}
	for name, call := range calls {
		err := call()
		t.Logf("%s with the engine stopped: %v", name, err)
		var ue *UnreachableError
		if !errors.Is(err, ErrEngineUnreachable) || !errors.As(err, &ue) || ue.Host != "unix://"+d.sock ||
			!strings.Contains(err.Error(), d.sock) {
			t.Errorf("%s with the engine stopped: %v; want ErrEngineUnreachable naming %s", name, err, d.sock)
		}
	}

	d.start()
	waitUp(t, e, d)
	works("engine back")
}
