package testenv

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	dcontainer "github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
)

// Dockerd is a Docker engine of the test's own, which it may stop and start at will. It runs in a
// network namespace of its own (a dockerd in the host's namespace would rework docker0 and the
// host's firewall), with its own config file (the host's /etc/docker/daemon.json does not
// apply), data root, exec root and socket under one temporary directory, and vfs storage.
type Dockerd struct {
	// Sock is the engine's unix socket (a file, reachable from the host's namespace).
	Sock string
	// Dir holds everything the engine keeps.
	Dir string

	t    testing.TB
	bin  string
	args []string
	cmd  *exec.Cmd
	done chan error
}

// NewDockerd prepares a private engine that runs dockerd with args added to its own (network
// flags such as --bridge=none or --bip); Start starts it. It skips (fails under CI) without
// dockerd or root, and stops the engine and removes its directory when the test ends.
func NewDockerd(t testing.TB, args ...string) *Dockerd {
	t.Helper()
	bin, err := exec.LookPath("dockerd")
	if err != nil {
		Prereq(t, "no dockerd binary: %v", err)
	}
	if os.Geteuid() != 0 {
		Prereq(t, "a private dockerd needs root (euid %d)", os.Geteuid())
	}
	dir, err := os.MkdirTemp("", "testenv-dockerd-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "daemon.json"), []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := &Dockerd{Sock: filepath.Join(dir, "docker.sock"), Dir: dir, t: t, bin: bin, args: args}
	t.Cleanup(func() {
		d.Stop()
		if err := os.RemoveAll(dir); err != nil {
			t.Logf("cleanup %s: %v", dir, err)
		}
	})
	return d
}

// Start starts the engine; WaitUp waits until it answers.
func (d *Dockerd) Start() {
	d.t.Helper()
	logf, err := os.OpenFile(filepath.Join(d.Dir, "dockerd.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		d.t.Fatal(err)
	}
	defer logf.Close()
	args := append([]string{
		"--config-file", filepath.Join(d.Dir, "daemon.json"),
		"--data-root", filepath.Join(d.Dir, "data"),
		"--exec-root", filepath.Join(d.Dir, "exec"),
		"--pidfile", filepath.Join(d.Dir, "docker.pid"),
		"-H", "unix://" + d.Sock,
		"--iptables=false", "--ip6tables=false", "--ip-masq=false",
		"--storage-driver", "vfs",
	}, d.args...)
	d.cmd = exec.Command(d.bin, args...)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	// Its own network namespace; its own process group (so its containerd can be ended with it),
	// and terminated if the test binary dies first.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := d.cmd.Start(); err != nil {
		d.t.Fatalf("start dockerd: %v", err)
	}
	done := make(chan error, 1)
	go func(c *exec.Cmd) { done <- c.Wait() }(d.cmd)
	d.done = done
}

// Stop ends the engine (and only it: its process group, by id) and waits for it to exit.
func (d *Dockerd) Stop() {
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

// LogTail is the end of the engine's log.
func (d *Dockerd) LogTail() string {
	b, _ := os.ReadFile(filepath.Join(d.Dir, "dockerd.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// WaitUp calls ping until the engine answers, and fails the test with the log's tail after a
// minute.
func (d *Dockerd) WaitUp(ping func(context.Context) error) {
	d.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var err error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err = ping(ctx)
		cancel()
		if err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	d.t.Fatalf("private dockerd never answered: %v\n%s", err, d.LogTail())
}

// RemoveContainers force-removes, on the engine at host (a DOCKER_HOST value), the container
// named name and those a replace moved aside (name-replaced-…; a take's name.meshd-new and
// name.meshd-replaced-…). An engine that cannot be reached is logged (a test may have stopped it
// on purpose); a container that cannot be removed fails the test.
func RemoveContainers(t testing.TB, host, name string) {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.WithHost(host), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Logf("cleanup %s: %v", name, err)
		return
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := cli.ContainerList(ctx, dcontainer.ListOptions{All: true})
	if err != nil {
		t.Logf("cleanup %s: %v", name, err)
		return
	}
	for _, c := range cs {
		for _, n := range c.Names {
			if n = strings.TrimPrefix(n, "/"); n == name || strings.HasPrefix(n, name+"-replaced-") || strings.HasPrefix(n, name+".meshd-") {
				if err := cli.ContainerRemove(ctx, c.ID, dcontainer.RemoveOptions{Force: true}); err != nil {
					t.Errorf("cleanup %s: %v", n, err)
				}
			}
		}
	}
}
