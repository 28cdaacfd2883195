package systemd

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"meshd/internal/testenv"
	"meshd/packaging/deb"
)

// The package the tree builds, on a machine run by systemd, as an operator meets it: apt installs
// it from the file (offline: the root has its dependencies) and leaves the unit enabled, not
// started; genesis, then systemctl enable --now, and meshd status answers; the unit restarts a
// killed agent; after a real reboot the agent is back by its unit; apt remove stops the agent and
// keeps the data dir; apt purge removes the config and keeps the data dir and seal key, saying so,
// and says the containers meshd raised keep running.
func TestPackageOnSystemdMachine(t *testing.T) {
	requireMachine(t)
	testenv.Require(t, "the package", testenv.Missing(false, "git", "go")...)
	_, file, _, _ := runtime.Caller(0)
	pkg, version, err := deb.BuildIn(filepath.Join(filepath.Dir(file), "..", ".."), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m := bootIn(t, "sd-pkg", "198.51.100.10/24")
	ctx := testenv.Context(t, 4*time.Minute)
	run := func(args ...string) string {
		t.Helper()
		out, err := m.Run(ctx, args...)
		if err != nil {
			t.Fatalf("%v\n%s", err, m.journal(ctx))
		}
		return out
	}
	// what is `systemctl is-X meshd`, which exits non-zero for a no.
	what := func(is string) string {
		out, _ := m.Run(ctx, "systemctl", is, "meshd")
		return strings.TrimSpace(out)
	}
	status := func(within time.Duration) {
		t.Helper()
		var out string
		if err := testenv.Poll(t, within, func() error {
			var err error
			out, err = m.Run(ctx, "meshd", "status")
			if err == nil && !strings.Contains(out, "hub") {
				err = fmt.Errorf("status names no hub")
			}
			return err
		}); err != nil {
			t.Fatalf("meshd status: %v\n%s\n%s", err, out, m.journal(ctx))
		}
	}

	in := "/root/" + filepath.Base(pkg)
	if err := m.CopyIn(pkg, in); err != nil {
		t.Fatal(err)
	}
	out := run("env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", in)
	if !strings.Contains(out, "enabled but not started") {
		t.Errorf("apt install did not say the unit is enabled but not started:\n%s", out)
	}
	if e, a := what("is-enabled"), what("is-active"); e != "enabled" || a != "inactive" {
		t.Errorf("after install meshd.service is %s and %s; want enabled and inactive", e, a)
	}
	if v := run("meshd", "version"); !strings.HasPrefix(v, "meshd "+version+" ") {
		t.Errorf("meshd version says %q; the package is %s", v, version)
	}

	t.Logf("apt install:\n%s", out)
	t.Logf("genesis:\n%s", run("meshd", "genesis", "--name", "hub", "--adopted", "--advertise", "198.51.100.10"))
	run("systemctl", "enable", "--now", "meshd")
	status(30 * time.Second)
	// The socket's directory is root's alone (the unit's RuntimeDirectoryMode=, the agent).
	if mode := strings.TrimSpace(run("stat", "-c", "%a %U", "/run/meshd")); mode != "700 root" {
		t.Errorf("/run/meshd is %s, want 700 root", mode)
	}

	pid := strings.TrimSpace(run("systemctl", "show", "-p", "MainPID", "--value", "meshd"))
	sandboxed(t, run("cat", "/proc/"+pid+"/status"),
		run("readlink", "/proc/1/ns/uts", "/proc/1/ns/mnt", "/proc/"+pid+"/ns/uts", "/proc/"+pid+"/ns/mnt"))
	run("systemctl", "kill", "--kill-whom=main", "-s", "KILL", "meshd")
	if err := testenv.Poll(t, 30*time.Second, func() error {
		now := strings.TrimSpace(run("systemctl", "show", "-p", "MainPID", "--value", "meshd"))
		if a := what("is-active"); a != "active" || now == pid || now == "0" {
			return fmt.Errorf("meshd.service %s, MainPID %s (was %s)", a, now, pid)
		}
		return nil
	}); err != nil {
		t.Fatalf("the unit did not restart the killed agent: %v\n%s", err, m.journal(ctx))
	}
	status(30 * time.Second)

	if err := m.Reboot(bootTimeout); err != nil {
		t.Fatal(err)
	}
	// The unit is ordered after the engine and is Type=notify: it is active once the agent said
	// READY=1, which may come after the system says running.
	if err := testenv.Poll(t, 60*time.Second, func() error {
		if a := what("is-active"); a != "active" {
			return fmt.Errorf("meshd.service is %s", a)
		}
		return nil
	}); err != nil {
		t.Fatalf("after the reboot: %v\n%s", err, m.journal(ctx))
	}
	status(30 * time.Second)

	// The agent, run by systemd, wrote and enabled its boot unit; remove disables it (it would fail
	// at every boot without the program).
	bootWants := "/etc/systemd/system/sysinit.target.wants/meshd-boot.service"
	if _, err := m.Run(ctx, "test", "-e", bootWants); err != nil {
		t.Errorf("the agent did not enable meshd-boot.service (%s)", bootWants)
	}
	run("env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "remove", "-y", "meshd")
	if _, err := m.Run(ctx, "test", "-e", bootWants); err == nil {
		t.Errorf("apt remove left %s enabled", bootWants)
	}
	if a := what("is-active"); a == "active" {
		t.Errorf("after apt remove meshd.service is %s", a)
	}
	left, _ := m.Run(ctx, "pgrep", "-a", "meshd")
	t.Logf("after apt remove, meshd's processes: %q", left)
	if out, err := m.Run(ctx, "pgrep", "-a", "-f", "meshd agent"); err == nil {
		t.Errorf("an agent runs after apt remove: %s", out)
	}
	for _, kept := range []string{"/var/lib/meshd", "/etc/meshd/seal.key", "/etc/meshd/meshd.yaml"} {
		if _, err := m.Run(ctx, "test", "-e", kept); err != nil {
			t.Errorf("apt remove did not keep %s", kept)
		}
	}
	if _, err := m.Run(ctx, "test", "-e", "/usr/bin/meshd"); err == nil {
		t.Errorf("apt remove left /usr/bin/meshd")
	}

	out = run("env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "purge", "-y", "meshd")
	if !strings.Contains(out, "Kept, on purpose") || !strings.Contains(out, "/etc/meshd/seal.key") {
		t.Errorf("apt purge did not say what it keeps:\n%s", out)
	}
	if !strings.Contains(out, "Left running, on purpose: the containers meshd raised") {
		t.Errorf("apt purge did not say the containers meshd raised keep running:\n%s", out)
	}
	t.Logf("apt purge:\n%s", out)
	for _, kept := range []string{"/var/lib/meshd", "/etc/meshd/seal.key"} {
		if _, err := m.Run(ctx, "test", "-e", kept); err != nil {
			t.Errorf("apt purge removed %s", kept)
		}
	}
	for _, gone := range []string{"/etc/meshd/meshd.yaml", "/lib/systemd/system/meshd.service",
		"/etc/systemd/system/multi-user.target.wants/meshd.service", "/etc/systemd/system/meshd-boot.service"} {
		if _, err := m.Run(ctx, "test", "-e", gone); err == nil {
			t.Errorf("apt purge left %s", gone)
		}
	}
	if st := m.State(); st != "running" {
		t.Errorf("after purge the machine is %s", st)
	}
	// Installed again, the kept node is named, not made again, and its agent comes back.
	out = run("env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", in)
	if !strings.Contains(out, "This machine is already a node") || strings.Contains(out, "meshd genesis --name") {
		t.Errorf("apt install after a purge does not say the machine is already a node:\n%s", out)
	}
	run("systemctl", "start", "meshd")
	status(30 * time.Second)
}

// sandboxed checks that the agent runs inside the unit's sandbox (docs/security.md), from its
// /proc/PID/status and the UTS and mount namespaces of PID 1 then of the agent: a bounding set
// with NET_ADMIN and without SYS_ADMIN, no new privileges, a seccomp filter, umask 0077, and
// namespaces of its own (ProtectHostname, the Protect* mounts).
func sandboxed(t *testing.T, status, namespaces string) {
	t.Helper()
	field := func(name string) string {
		for _, l := range strings.Split(status, "\n") {
			if v, ok := strings.CutPrefix(l, name+":"); ok {
				return strings.TrimSpace(v)
			}
		}
		return ""
	}
	bnd, err := strconv.ParseUint(field("CapBnd"), 16, 64)
	if err != nil {
		t.Fatalf("the agent's CapBnd: %v\n%s", err, status)
	}
	if bnd&(1<<unix.CAP_NET_ADMIN) == 0 || bnd&(1<<unix.CAP_SYS_ADMIN) != 0 || bnd&(1<<unix.CAP_SYS_MODULE) != 0 {
		t.Errorf("the agent's bounding set is %x: want NET_ADMIN and neither SYS_ADMIN nor SYS_MODULE", bnd)
	}
	for name, want := range map[string]string{"NoNewPrivs": "1", "Seccomp": "2", "Umask": "0077"} {
		if got := field(name); got != want {
			t.Errorf("the agent's %s is %q, want %q", name, got, want)
		}
	}
	ns := strings.Fields(namespaces)
	if len(ns) != 4 || ns[0] == ns[2] || ns[1] == ns[3] {
		t.Errorf("the agent shares PID 1's UTS or mount namespace (PID 1's, then the agent's): %q", ns)
	}
}

// journal is the end of meshd's journal in the machine, for a failure's message.
func (m *Machine) journal(ctx context.Context) string {
	return m.unitJournal(ctx, "meshd", "meshd-boot")
}

// unitJournal is the end of units' journal in the machine.
func (m *Machine) unitJournal(ctx context.Context, units ...string) string {
	args := []string{"journalctl", "--no-pager", "-n", "40"}
	for _, u := range units {
		args = append(args, "-u", u)
	}
	out, _ := m.Run(ctx, args...)
	return out
}
