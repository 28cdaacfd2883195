package systemd

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"meshd/internal/testenv"
)

// bootTimeout bounds a boot to running (a few seconds here).
const bootTimeout = 90 * time.Second

// requireMachine skips (fails under CI) without root, the tools or the cached root.
func requireMachine(t testing.TB) {
	t.Helper()
	testenv.RequireRoot(t, "a systemd machine", Tools...)
	if _, err := CachedRoot(); err != nil {
		testenv.Prereq(t, "%v", err)
	}
}

// bootIn boots a machine named name in a fresh lab namespace of the same name with one underlay
// address, and stops it when the test ends.
func bootIn(t *testing.T, name, addr string) *Machine {
	t.Helper()
	ns := fmt.Sprintf("%s-%d", name, os.Getpid())
	testenv.NewNetns(t, ns)
	testenv.Run(t, "ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0-peer")
	testenv.Run(t, "ip", "-n", ns, "link", "set", "eth0-peer", "up")
	testenv.Run(t, "ip", "-n", ns, "addr", "add", addr, "dev", "eth0")
	testenv.Run(t, "ip", "-n", ns, "link", "set", "eth0", "up")
	m, err := Boot(name, ns, bootTimeout)
	if m != nil {
		t.Cleanup(func() {
			if err := m.Stop(); err != nil {
				t.Errorf("stop %s: %v", name, err)
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A machine boots to running in its namespace, runs a command with nothing of the caller's
// environment, outlives its handle (attached again by its directory), reboots for real (a new
// PID 1, the same files), and stops leaving the cache as it was.
func TestMachineBootsAndReboots(t *testing.T) {
	requireMachine(t)
	t.Setenv("MESHD_SEAL_KEY", "/leaked")
	m := bootIn(t, "sd-boot", "198.51.100.40/24")
	ctx := testenv.Context(t, time.Minute)

	out, err := m.Run(ctx, "ip", "-4", "-o", "addr", "show", "eth0")
	if err != nil || !strings.Contains(out, "198.51.100.40/24") {
		t.Fatalf("the machine's network is not its namespace's: %q, %v", out, err)
	}
	if env, _ := m.Run(ctx, "env"); strings.Contains(env, "MESHD_SEAL_KEY") {
		t.Errorf("the caller's environment leaked in:\n%s", env)
	}
	// A unit, run by the machine's systemd with the machine's capabilities (not nsenter's), makes
	// a TUN device, as wireguard-go does for wg-quick@ and for meshd's tunnel.
	if out, err := m.Run(ctx, "systemd-run", "--wait", "--pipe", "--quiet", "ip", "tuntap", "add", "dev", "tun9", "mode", "tun"); err != nil {
		t.Errorf("a unit cannot make a TUN device: %v\n%s", err, out)
	}
	if _, err := m.Run(ctx, "sh", "-c", "echo kept > /var/lib/marker"); err != nil {
		t.Fatal(err)
	}
	// The machine is not this process's: its supervisor is in a session of its own, so a lab
	// machine outlives `meshlab up`, and another process finds it again by its directory.
	if ppid := parentOf(t, m.pidIn(fileSupervisor)); ppid == os.Getpid() {
		t.Errorf("the machine's supervisor is this test's child (ppid %d): it would die with its booter", ppid)
	}
	again, err := Attach(m.Dir)
	if err != nil {
		t.Fatal(err)
	}
	pid1 := again.Leader()
	if pid1 == 0 || pid1 != m.Leader() {
		t.Fatalf("the attached machine's PID 1 is %d, the booted one's %d", pid1, m.Leader())
	}
	if err := again.Reboot(bootTimeout); err != nil {
		t.Fatal(err)
	}
	if m.Leader() == pid1 {
		t.Errorf("after the reboot PID 1 is still %d", pid1)
	}
	if marker, err := m.Run(ctx, "cat", "/var/lib/marker"); err != nil || strings.TrimSpace(marker) != "kept" {
		t.Errorf("a file written before the reboot reads %q, %v after it", marker, err)
	}
	root, _ := CachedRoot()
	if _, err := os.Stat(root + "/var/lib/marker"); err == nil {
		t.Errorf("the machine wrote into the cached root %s", root)
	}
}

// parentOf is pid's parent pid, from /proc.
func parentOf(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatalf("the supervisor (pid %d): %v", pid, err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	ppid := 0
	if len(f) > 1 {
		fmt.Sscan(f[1], &ppid)
	}
	return ppid
}
