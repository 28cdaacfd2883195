package host

// Unit tests of the host acting on a hostile file system: a symlink swapped in between the check
// of a declared path and the act on it, and a symlink above a declared file's missing directory.
// Each would change or create something outside the declared root if followed.

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"meshd/fsm"
	"meshd/host/hosttest"
)

// unitOutside is a secret file beside the root (outside it), mode 0600.
func unitOutside(t *testing.T, root string) string {
	t.Helper()
	secret := filepath.Join(filepath.Dir(root), "outside", "secret")
	if err := os.MkdirAll(filepath.Dir(secret), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(secret, []byte("not the mesh's\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return secret
}

// The host's own file, its content as declared and its mode wrong, is swapped for a symlink to
// a file outside the root after the path was checked: the mode is not changed through it.
func TestUnitModeNotChangedThroughSwappedSymlink(t *testing.T) {
	h, root := openTemp(t)
	ctx := hosttest.Ctx(t)
	secret := unitOutside(t, root)
	const p = "/etc/app/app.conf"
	d := hosttest.DeclUntaken(fsm.Converged, hosttest.OwnFile("app", p, "declared\n", true))
	hosttest.NoErrorsFatal(t, h.Reconcile(ctx, d))
	if err := os.Chmod(root+p, 0o600); err != nil { // mode wrong: the next pass fixes it
		t.Fatal(err)
	}
	swapped := false
	h.seam = func(point, target string) {
		if point != "meta.before-change" || swapped {
			return
		}
		swapped = true
		if err := os.Remove(target); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(secret, target); err != nil {
			t.Fatal(err)
		}
	}
	rep := h.Reconcile(ctx, d)
	if !swapped {
		t.Fatal("the pass did not reach the point where it changes the mode")
	}
	fi, err := os.Stat(secret)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("a file outside the root went from 0600 to %#o through a swapped symlink", fi.Mode().Perm())
	}
	e := hosttest.ErrorOf(rep, p)
	if e == nil || !strings.Contains(e.Reason, p) || !strings.Contains(e.Reason, "symlink") {
		t.Fatalf("the swap is not reported on %s: %+v", p, rep.Errors)
	}
}

// A declared file whose directory does not exist yet, under a directory that is a symlink out of
// the root: nothing is created outside, and the failure names the path.
func TestUnitSymlinkedParentOfMissingDirectoryRefused(t *testing.T) {
	h, root := openTemp(t)
	ctx := hosttest.Ctx(t)
	outside := filepath.Join(filepath.Dir(root), "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, root+"/etc"); err != nil {
		t.Fatal(err)
	}
	const p = "/etc/newapp/conf.d/app.conf"
	rep := h.Reconcile(ctx, hosttest.DeclUntaken(fsm.Converged, hosttest.OwnFile("app", p, "declared\n", true)))
	if _, err := os.Lstat(filepath.Join(outside, "newapp")); err == nil {
		t.Fatal("a directory was created outside the root through a symlinked parent")
	}
	e := hosttest.ErrorOf(rep, p)
	if e == nil || !strings.Contains(e.Reason, p) || !strings.Contains(e.Reason, "outside") {
		t.Fatalf("the refusal does not name the path: %+v", rep.Errors)
	}
	if _, err := h.Original(p); err == nil {
		t.Error("a refused path was recorded")
	}
}

// A declared file's directory, checked when the pass looked, is swapped for a symlink out of the
// root before the write: the write is refused, nothing is written outside.
func TestUnitDirectorySwappedBeforeWriteRefused(t *testing.T) {
	h, root := openTemp(t)
	ctx := hosttest.Ctx(t)
	outside := filepath.Join(filepath.Dir(root), "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(root+"/etc/app", 0o755); err != nil {
		t.Fatal(err)
	}
	const p = "/etc/app/app.conf"
	h.seam = func(point, dir string) {
		if point != "write.before-dir" {
			return
		}
		if err := os.Remove(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(outside, dir); err != nil {
			t.Fatal(err)
		}
	}
	rep := h.Reconcile(ctx, hosttest.DeclUntaken(fsm.Converged, hosttest.OwnFile("app", p, "declared\n", true)))
	if names, _ := os.ReadDir(outside); len(names) != 0 {
		t.Fatalf("written outside the root through a swapped directory: %v", names)
	}
	e := hosttest.ErrorOf(rep, p)
	if e == nil || !strings.Contains(e.Reason, "/etc/app") || !strings.Contains(e.Reason, "symlink") {
		t.Fatalf("the refusal does not name the directory: %+v", rep.Errors)
	}
}

// A missing directory under a symlink that stays inside the root is created where it leads, as
// before: only a way out is refused.
func TestUnitSymlinkInsideRootStillFollowedForMissingDirectory(t *testing.T) {
	h, root := openTemp(t)
	ctx := hosttest.Ctx(t)
	if err := os.MkdirAll(root+"/run", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(root+"/var", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../run", root+"/var/run"); err != nil {
		t.Fatal(err)
	}
	const p = "/var/run/app/app.pid"
	hosttest.NoErrorsFatal(t, h.Reconcile(ctx, hosttest.DeclUntaken(fsm.Converged, hosttest.OwnFile("app", p, "1\n", true))))
	if got := hosttest.ReadAt(t, root, "/run/app/app.pid"); got != "1\n" {
		t.Fatalf("file under an inside symlink: %q", got)
	}
}

// An owner of -1 (in a record written before the catalogue refused it) is refused by the host
// too: chown would take it as "leave the owner as it is" and the file would keep whatever owner
// it has.
func TestUnitOwnerMinusOneRefused(t *testing.T) {
	for _, o := range []string{"-1", "0:-1", "4294967295", "root:4294967295"} {
		if _, err := lookupOwner(o); err == nil || !strings.Contains(err.Error(), o) {
			t.Errorf("owner %q: %v; want it refused, named", o, err)
		}
	}
	if got, err := lookupOwner("65534:4294967294"); err != nil || got != (ids{65534, 4294967294}) {
		t.Errorf("owner 65534:4294967294: %v %v", got, err)
	}
}

// A file the host created, its module unassigned, whose directory is swapped for a symlink out
// of the root after the look: the file of the same name outside is not removed.
func TestUnitRemoveThroughSwappedDirectoryRefused(t *testing.T) {
	h, root := openTemp(t)
	ctx := hosttest.Ctx(t)
	outside := filepath.Join(filepath.Dir(root), "outside")
	if err := os.MkdirAll(outside, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "app.conf"), []byte("not the mesh's\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const p = "/etc/app/app.conf"
	hosttest.NoErrorsFatal(t, h.Reconcile(ctx, hosttest.DeclUntaken(fsm.Converged, hosttest.OwnFile("app", p, "declared\n", true))))
	h.seam = func(point, dir string) {
		if point != "remove.before-dir" {
			return
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(outside, dir); err != nil {
			t.Fatal(err)
		}
	}
	rep := h.Reconcile(ctx, hosttest.DeclUntaken(fsm.Converged))
	if _, err := os.Stat(filepath.Join(outside, "app.conf")); err != nil {
		t.Fatalf("a file outside the root was removed through a swapped directory: %v", err)
	}
	if len(rep.Errors) != 1 || !strings.Contains(rep.Errors[0].Reason, p) || !strings.Contains(rep.Errors[0].Reason, "symlink") {
		t.Fatalf("the refusal is not reported on %s: %+v", p, rep.Errors)
	}
}

// Under the unit's UMask=0077 a declared file's missing directories are still made 0755, as
// under the usual 0022: a service reading the module's files as another user passes through.
func TestUnitDirectoriesMadeUnderAStrictUmaskAre0755(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	h, root := openTemp(t)
	const p = "/srv/app/html/index.html"
	d := hosttest.DeclUntaken(fsm.Converged, hosttest.OwnFile("app", p, "hello\n", true))
	hosttest.NoErrorsFatal(t, h.Reconcile(hosttest.Ctx(t), d))
	for _, dir := range []string{"/srv/app", "/srv/app/html"} {
		st, err := os.Stat(root + dir)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o755 {
			t.Errorf("%s made %v under umask 0077, want 0755", dir, st.Mode().Perm())
		}
	}
	if st, err := os.Stat(root + p); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("%s: %v, %v; want its declared 0644", p, st.Mode(), err)
	}
}

// Issue 34, finding 1, on the machine: a confined module's file outside its own places (as a
// declaration from a record judging by the deny list would carry it; /var/run/systemd is the
// other spelling of /run/systemd) is refused before anything is written, and so is one under
// its own /etc/app when /etc/app is a symlink to /etc/cron.d; its file in its own place is
// written. A module the operator said may be root (not confined) writes where it declares.
func TestUnitConfinedFileOutsideItsPlacesIsRefused(t *testing.T) {
	h, root := openTemp(t)
	ctx := hosttest.Ctx(t)
	for _, d := range []string{"/etc/cron.d", "/var/run/systemd/system"} {
		if err := os.MkdirAll(root+d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(root+"/etc/cron.d", root+"/etc/app"); err != nil {
		t.Fatal(err)
	}
	confined := func(r fsm.Resource) fsm.Resource { r.Confined = true; return r }
	d := hosttest.DeclUntaken(fsm.Converged,
		confined(hosttest.OwnFile("app", "/etc/cron.d/job", "* * * * * root id\n", true)),
		confined(hosttest.OwnFile("app", "/var/run/systemd/system/x.service", "[Service]\n", true)),
		confined(hosttest.OwnFile("app", "/etc/app/job", "* * * * * root id\n", true)),
		confined(hosttest.OwnFile("web", "/etc/web/web.conf", "ok\n", true)),
		hosttest.OwnFile("ops", "/etc/cron.d/ops", "said\n", true))
	rep := h.Reconcile(ctx, d)
	for _, p := range []string{"/etc/cron.d/job", "/var/run/systemd/system/x.service", "/etc/app/job"} {
		e := hosttest.ErrorOf(rep, p)
		if e == nil || !strings.Contains(e.Reason, "outside the module's own places") || !strings.Contains(e.Reason, "before anything is written") {
			t.Errorf("%s: %+v", p, e)
		}
	}
	if e := hosttest.ErrorOf(rep, "/etc/app/job"); e != nil && !strings.Contains(e.Reason, "leads to /etc/cron.d/job") {
		t.Errorf("the symlink is not named: %s", e.Reason)
	}
	for _, p := range []string{"/etc/cron.d/job", "/var/run/systemd/system/x.service"} {
		if got := hosttest.ReadAt(t, root, p); got != "(missing)" {
			t.Errorf("%s was written: %q", p, got)
		}
	}
	if got := hosttest.ReadAt(t, root, "/etc/web/web.conf"); got != "ok\n" {
		t.Errorf("the confined module's own file: %q", got)
	}
	if got := hosttest.ReadAt(t, root, "/etc/cron.d/ops"); got != "said\n" {
		t.Errorf("the privileged module's file: %q", got)
	}
}
