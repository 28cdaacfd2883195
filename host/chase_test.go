package host

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"meshd/fsm"
	"meshd/host/hosttest"
	"meshd/internal/testenv"
)

// asNobody runs a command as the unprivileged user nobody, as an attacker on the machine would.
func asNobody(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("setpriv", append([]string{"--reuid=65534", "--regid=65534", "--clear-groups"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("as nobody: %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// Issue 26, finding 5, played by an unprivileged user: nobody owns /srv/app, on a declared path,
// and swaps its conf.d for a symlink to a root-owned directory. meshd, as root, once wrote the
// declared file there, recorded the root-owned file's bytes as the "original" (which the status
// page then served) and made the declared path's missing directories there. Now the symlink is
// refused, naming it, and nothing is read, recorded, written or created through it. The
// administrator's own root-owned symlink (/srv/data -> /mnt/disk/data) is still followed.
func TestSymlinkPlantedByAnUnprivilegedUserIsNotFollowed(t *testing.T) {
	testenv.RequireRoot(t, "files owned by another user than the one meshd runs as", "setpriv")
	h, root := openTemp(t)
	ctx := hosttest.Ctx(t)
	secretDir := filepath.Join(root, "etc", "secret")
	if err := os.MkdirAll(secretDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(secretDir, "app.conf"), []byte("root's secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	app := filepath.Join(root, "srv", "app")
	if err := os.MkdirAll(app, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(app, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	// The bed's directories above are the test's; nobody must be able to reach srv/app.
	for d := app; d != filepath.Dir(filepath.Dir(root)); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	asNobody(t, "ln", "-s", secretDir, filepath.Join(app, "conf.d"))

	for _, taken := range []bool{false, true} {
		rep := h.Reconcile(ctx, hosttest.DeclUntaken(fsm.Adopted,
			hosttest.OwnFile("app", "/srv/app/conf.d/app.conf", "meshd's\n", taken),
			hosttest.OwnFile("app", "/srv/app/conf.d/sub/new.conf", "new\n", taken)))
		for _, p := range []string{"/srv/app/conf.d/app.conf", "/srv/app/conf.d/sub/new.conf"} {
			e := hosttest.ErrorOf(rep, p)
			if e == nil || !strings.Contains(e.Reason, "unsafe symlink") || !strings.Contains(e.Reason, "/srv/app/conf.d") {
				t.Fatalf("taken %v: %s: want a refusal naming the planted symlink, got %+v", taken, p, rep.Errors)
			}
		}
		if b, err := os.ReadFile(filepath.Join(secretDir, "app.conf")); err != nil || string(b) != "root's secret\n" {
			t.Fatalf("taken %v: the root-owned file behind the symlink reads %q %v", taken, b, err)
		}
		if _, err := os.Lstat(filepath.Join(secretDir, "sub")); err == nil {
			t.Fatalf("taken %v: a directory was made through the planted symlink", taken)
		}
		if b, err := h.Original("/srv/app/conf.d/app.conf"); err == nil {
			t.Fatalf("taken %v: the root-owned file was recorded as the original: %q", taken, b)
		}
	}

	// The administrator's own layout: a root-owned symlink in a root-owned directory.
	disk := filepath.Join(root, "mnt", "disk", "data")
	if err := os.MkdirAll(disk, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(disk, filepath.Join(root, "srv", "data")); err != nil {
		t.Fatal(err)
	}
	rep := h.Reconcile(ctx, hosttest.DeclUntaken(fsm.Adopted, hosttest.OwnFile("data", "/srv/data/x.conf", "x\n", true)))
	if e := hosttest.ErrorOf(rep, "/srv/data/x.conf"); e != nil {
		t.Fatalf("the administrator's root-owned symlink was refused: %+v", e)
	}
	if b, err := os.ReadFile(filepath.Join(disk, "x.conf")); err != nil || string(b) != "x\n" {
		t.Fatalf("through the administrator's symlink: %q %v", b, err)
	}
}
