package testenv

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Run runs a host command and fails the test with its output when it fails.
func Run(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// NewNetns creates the network namespace name (under /run/netns) with its loopback up, and
// deletes it when the test ends, first killing every process still in it: a process a test
// started there that detached from its parent (the agent's `meshd tunnel-device`, made to outlive
// the agent) would otherwise keep the namespace and its devices alive after the test.
func NewNetns(t testing.TB, name string) {
	t.Helper()
	Run(t, "ip", "netns", "add", name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "pids", name).Output(); err == nil {
			for _, f := range strings.Fields(string(out)) {
				var pid int
				if _, err := fmt.Sscan(f, &pid); err == nil && pid > 1 {
					_ = unix.Kill(pid, unix.SIGKILL)
				}
			}
		}
		_ = exec.Command("ip", "netns", "del", name).Run()
	})
	Run(t, "ip", "-n", name, "link", "set", "lo", "up")
}

// InNetns runs f on an OS thread switched into the network namespace ns (a name under
// /run/netns). Sockets f opens stay in ns after the thread switches back.
func InNetns(ns string, f func() error) error {
	runtime.LockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	target, err := os.Open("/run/netns/" + ns)
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("setns %s: %w", ns, err)
	}
	ferr := f()
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		return err // leave the thread locked: it dies with the goroutine
	}
	runtime.UnlockOSThread()
	return ferr
}

// HoldMountNS starts a process in a private mount namespace of its own that runs script (a
// shell script which sets the namespace up, prints "ready" and then sleeps), waits for "ready",
// and kills the holder when the test ends. It returns the holder's mount namespace
// (/proc/PID/ns/mnt), for nsenter --mount.
func HoldMountNS(t testing.TB, script string) string {
	t.Helper()
	holder := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script)
	out, _ := holder.StdoutPipe()
	holder.Stderr = os.Stderr
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); strings.TrimSpace(line) != "ready" {
		t.Fatalf("mount namespace holder did not start: %q", line)
	}
	return fmt.Sprintf("/proc/%d/ns/mnt", holder.Process.Pid)
}
