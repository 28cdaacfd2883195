package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"meshd/api"
	"meshd/internal/testenv"
)

// fakeSystemd listens where $NOTIFY_SOCKET will point and hands over each datagram.
func fakeSystemd(t *testing.T) (string, <-chan string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	got := make(chan string, 32)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			got <- string(buf[:n])
		}
	}()
	return path, got
}

// nextNotify waits for the next datagram that contains want.
func nextNotify(t *testing.T, got <-chan string, want string, within time.Duration) string {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case d := <-got:
			if strings.Contains(d, want) {
				return d
			}
		case <-deadline:
			t.Fatalf("systemd was not told %q within %s", want, within)
		}
	}
}

// Under systemd: a real agent tells its notify socket READY=1 once the record has replayed (its
// commands are answered from then on); SIGHUP reads the config file again and applies its log
// level at once, says which other keys wait for a restart, and a broken file changes nothing.
func TestProcessSystemdNotifyAndSIGHUP(t *testing.T) {
	n := newNode(t)
	// Genesis off a terminal says its steps as plain lines on stderr.
	_, steps, code := n.run("genesis", "--name", "hub", "--data-dir", n.dir, "--advertise", "127.0.0.1",
		"--port", fmt.Sprintf("raft=%d", testenv.FreePort(t)), "--docker-host", noDocker, "--adopted")
	if code != 0 || !strings.Contains(steps, "] preflight: ") || !strings.Contains(steps, "] waiting for Raft to elect this node") || strings.Contains(steps, "\r") {
		t.Fatalf("genesis: exit %d, stderr:\n%s", code, steps)
	}
	notify, got := fakeSystemd(t)
	conf := filepath.Join(t.TempDir(), "meshd.yaml")
	if err := os.WriteFile(conf, []byte("log_level: info\nreconcile_interval: 10m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n.launchAgent([]string{"NOTIFY_SOCKET=" + notify}, "--config", conf)
	ready := nextNotify(t, got, "READY=1", 30*time.Second)
	if !strings.Contains(ready, "STATUS=serving as hub (server: the record replayed)") {
		t.Errorf("READY datagram %q says no status", ready)
	}
	// Ready means served: the very next command is answered by the leader from the record, and
	// says why it leads (before the leader's first autopilot pass too).
	if out := n.ok("status"); !strings.Contains(out, "why: the control-node leads") {
		t.Errorf("the first status after READY does not say why the hub leads:\n%s", out)
	}

	if strings.Contains(n.agentLg.String(), "level=DEBUG") {
		t.Fatal("debug lines before the log level was raised")
	}
	if err := os.WriteFile(conf, []byte("log_level: debug\nreconcile_interval: 1m\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := n.agent.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	nextNotify(t, got, "RELOADING=1", 10*time.Second)
	nextNotify(t, got, "READY=1", 10*time.Second)
	poll(t, 10*time.Second, "debug lines and the restart-bound key named after SIGHUP", func() string {
		lg := n.agentLg.String()
		switch {
		case !strings.Contains(lg, "SIGHUP: log level changed"):
			return "no log level change logged"
		case !strings.Contains(lg, "keys=reconcile_interval"):
			return "reconcile_interval not named as waiting for the next start"
		}
		n.ok("module", "list") // some work to log at debug
		if !strings.Contains(lg, "level=DEBUG") {
			return "no debug line yet"
		}
		return ""
	})

	if err := os.WriteFile(conf, []byte("log_level: loud\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := n.agent.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	poll(t, 10*time.Second, "a broken config refused on SIGHUP, naming file, line and key", func() string {
		if !strings.Contains(n.agentLg.String(), conf+":1: log_level") {
			return "not yet"
		}
		return ""
	})
	n.ok("status") // still serving

	n.kill(syscall.SIGTERM)
	nextNotify(t, got, "STOPPING=1", 10*time.Second)
	if n.agent.ProcessState.ExitCode() != 0 {
		t.Errorf("SIGTERM: exit %d\n%s", n.agent.ProcessState.ExitCode(), n.agentLg)
	}
}

// install-unit writes a unit that runs this binary with the config it names, and a config file
// that validates; a config already there is kept, and a broken one is named.
func TestInstallUnit(t *testing.T) {
	dir := t.TempDir()
	unit, conf := filepath.Join(dir, "systemd", "meshd.service"), filepath.Join(dir, "etc", "meshd.yaml")
	out, err := exec.Command(meshdBin, "install-unit", "--unit", unit, "--config", conf).CombinedOutput()
	if err != nil {
		t.Fatalf("install-unit: %v\n%s", err, out)
	}
	b, err := os.ReadFile(unit)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Type=notify", "ExecStart=" + meshdBin + " agent --config " + conf, "ExecReload=/bin/kill -HUP $MAINPID", "KillMode=process"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the unit has no %q:\n%s", want, b)
		}
	}
	if out, err := exec.Command(meshdBin, "config", "validate", conf).CombinedOutput(); err != nil {
		t.Errorf("the config install-unit wrote does not validate: %v\n%s", err, out)
	}
	if err := os.WriteFile(conf, []byte("colour: blue\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = exec.Command(meshdBin, "install-unit", "--unit", unit, "--config", conf).CombinedOutput()
	if err == nil || !strings.Contains(string(out), conf+":1: colour: unknown key") {
		t.Errorf("install-unit over a broken config: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(conf); string(b) != "colour: blue\n" {
		t.Errorf("install-unit overwrote the operator's config: %q", b)
	}
}

// A server that stops on SIGTERM (what systemd sends on `systemctl stop` and at a restart) does
// not leave gossip: it is coming back, so the other server finds it failed, never left; a node
// that leaves is the operator's `meshd leave`.
func TestProcessServerSIGTERMDoesNotLeaveGossip(t *testing.T) {
	hub, s2 := newNode(t), newNode(t)
	underlay(t, []*node{hub, s2}, []string{"192.0.2.1", "192.0.2.2"})
	hub.genesis("--adopted", "--advertise", "192.0.2.1", "--port", "bus=17070")
	args := []string{"--docker-host", noDocker, "--reconcile-interval", "10m"}
	hub.startAgent(args...)
	var tv api.TokenView
	hub.jsonOf(&tv, "token", "create", "--adopted", "--server")
	if out, errs, code := s2.joinIn(tv.Token, "--name", "s2", "--data-dir", s2.dir, "--advertise", "192.0.2.2"); code != 0 {
		t.Fatalf("join s2 as a server: exit %d\n%s%s", code, out, errs)
	}
	s2.startAgent(args...)
	state := func() (string, api.MembersView) {
		var m api.MembersView
		hub.jsonOf(&m, "members")
		for _, x := range m.Members {
			if x.Name == "s2" {
				return x.State, m
			}
		}
		return "", m
	}
	poll(t, 30*time.Second, "s2 alive in the hub's gossip", func() string {
		if st, m := state(); st != "alive" {
			return fmt.Sprintf("s2 %q in %+v", st, m.Members)
		}
		return ""
	})
	s2.kill(syscall.SIGTERM)
	if s2.agent.ProcessState.ExitCode() != 0 {
		t.Fatalf("s2 on SIGTERM: exit %d\n%s", s2.agent.ProcessState.ExitCode(), s2.agentLg)
	}
	_, m := state()
	bound, err := time.ParseDuration(m.DetectionBound)
	if err != nil {
		t.Fatalf("the hub's detection bound %q: %v", m.DetectionBound, err)
	}
	poll(t, bound+5*time.Second, "s2 failed, not left, in the hub's gossip", func() string {
		switch st, _ := state(); st {
		case "failed":
			return ""
		case "left":
			t.Fatalf("a server stopped by SIGTERM left gossip")
		default:
			return "s2 " + st
		}
		return ""
	})
}
