package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// serve starts labsvc listening on addr inside the node's network namespace and waits until it
// does.
func (n *node) serve(t *testing.T, addr string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("ip", "netns", "exec", n.netns, labsvcBin, "serve", "--listen", addr)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	port := addr[strings.LastIndex(addr, ":")+1:]
	poll(t, 10*time.Second, "labsvc listening on "+addr, func() string {
		out, _ := exec.Command("ip", "netns", "exec", n.netns, "ss", "-Hltn", "sport = :"+port).Output()
		if len(strings.TrimSpace(string(out))) == 0 {
			return "not yet"
		}
		return ""
	})
	return cmd
}

type findings struct {
	OK       bool `json:"ok"`
	Findings []struct {
		Check, Level, Message, Holder string
	} `json:"findings"`
}

func (n *node) genesisJSON(t *testing.T, args ...string) (findings, string, int) {
	t.Helper()
	base := []string{"genesis", "--name", "hub", "--data-dir", n.dir, "--advertise", "127.0.0.1", "--docker-host", noDocker, "--json"}
	out, errs, code := n.run(append(base, args...)...)
	var f findings
	if err := json.Unmarshal([]byte(out), &f); err != nil {
		t.Fatalf("genesis --json printed no JSON (exit %d): %v\n%s%s", code, err, out, errs)
	}
	noNull(t, base, out)
	markJSON(base)
	return f, errs, code
}

func (f findings) has(check, level, says string) bool {
	for _, x := range f.Findings {
		if x.Check == check && x.Level == level && strings.Contains(x.Message, says) {
			return true
		}
	}
	return false
}

// Genesis's preflight: every foundation port checked free before anything is raised, a held port
// named with its holder, everything found reported at once, nothing created when it refuses.
func TestGenesisPreflightNamesHolders(t *testing.T) {
	n := newNode(t)
	holder := n.serve(t, "0.0.0.0:5000")
	// A tunnel beside the mesh on an overlapping range.
	for _, c := range [][]string{
		{"link", "add", "wgold", "type", "veth", "peer", "name", "wgold-p"}, {"addr", "add", "10.99.0.5/24", "dev", "wgold"}, {"link", "set", "wgold", "up"},
	} {
		if out, err := exec.Command("ip", append([]string{"-n", n.netns}, c...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v %s", c, err, out)
		}
	}
	f, errs, code := n.genesisJSON(t, "--adopted")
	if code != 1 || f.OK {
		t.Fatalf("genesis with the registry's port held: exit %d, ok %v", code, f.OK)
	}
	want := fmt.Sprintf("labsvc (pid %d)", holder.Process.Pid)
	if !f.has("port.registry.port", "error", want) || !f.has("port.registry.port", "error", "--port registry=N") {
		t.Errorf("the held registry port is not named with its holder %q: %+v", want, f.Findings)
	}
	if !f.has("tunnel.range", "error", "wgold") {
		t.Errorf("the overlapping tunnel is not named: %+v", f.Findings)
	}
	if !f.has("docker.engine", "warning", "not reachable") {
		t.Errorf("an unreachable engine is not a warning: %+v", f.Findings)
	}
	if !strings.Contains(errs, "refused") {
		t.Errorf("stderr does not say genesis was refused: %q", errs)
	}
	if _, err := os.Stat(n.dir); !os.IsNotExist(err) {
		t.Fatalf("a refused genesis created %s", n.dir)
	}
	// Given other values, it goes ahead, and the port is the node's setting.
	out := n.ok("genesis", "--name", "hub", "--adopted", "--data-dir", n.dir, "--advertise", "127.0.0.1", "--docker-host", noDocker,
		"--port", "registry=5001", "--set", "mesh.range=10.98.0.0/24")
	if !strings.Contains(out, "registry.port=5001") {
		t.Fatalf("genesis output lacks the port setting:\n%s", out)
	}
}

// A converged genesis on a machine in use refuses, naming the firewall and every listener.
func TestGenesisConvergedRefusesAMachineInUse(t *testing.T) {
	n := newNode(t)
	n.serve(t, "0.0.0.0:8088")
	ruleset := "table inet found {\n chain input {\n type filter hook input priority 0; policy drop;\n tcp dport 8088 accept\n }\n}\n"
	nft := exec.Command("ip", "netns", "exec", n.netns, "nft", "-f", "-")
	nft.Stdin = strings.NewReader(ruleset)
	if out, err := nft.CombinedOutput(); err != nil {
		t.Fatalf("nft: %v %s", err, out)
	}
	f, _, code := n.genesisJSON(t)
	if code != 1 {
		t.Fatalf("converged genesis on a machine in use: exit %d", code)
	}
	if !f.has("machine.firewall", "error", "nftables") || !f.has("machine.firewall", "error", "--adopted") {
		t.Errorf("the firewall is not named: %+v", f.Findings)
	}
	if !f.has("machine.listeners", "error", ":8088 (labsvc") {
		t.Errorf("the listener is not named: %+v", f.Findings)
	}
	// Adopted is the override.
	if f, _, code := n.genesisJSON(t, "--adopted", "--dry-run"); code != 0 || !f.OK {
		t.Fatalf("adopted dry run on the same machine: exit %d %+v", code, f)
	}
	if _, err := os.Stat(n.dir); !os.IsNotExist(err) {
		t.Fatalf("a dry run created %s", n.dir)
	}
}

// "Permission denied" is told apart from "in use".
func TestGenesisPreflightPermissionDenied(t *testing.T) {
	n := newNode(t)
	cmd := n.inNetns("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", meshdBin, "genesis", "--name", "hub",
		"--adopted", "--dry-run", "--json", "--data-dir", n.dir, "--advertise", "127.0.0.1", "--docker-host", noDocker, "--port", "bus=80")
	out, _ := cmd.Output()
	var f findings
	if err := json.Unmarshal(out, &f); err != nil {
		t.Fatalf("no JSON: %v %s", err, out)
	}
	if !f.has("port.mesh.bus", "error", "permission denied") || f.has("port.mesh.bus", "error", "is in use") {
		t.Fatalf("port 80 as an unprivileged user is not told as permission denied: %+v", f.Findings)
	}
}
