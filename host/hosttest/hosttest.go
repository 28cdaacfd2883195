// Package hosttest is the test setup the host's packages share: a machine on a temporary root
// (Bed), declarations of files and of nodes, and
// readers of a report. Tests only; it imports no host package, so the core's own tests use it
// too (drivertest opens a host over a bed for the drivers' tests).
package hosttest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"meshd/catalogue"
	"meshd/fsm"
	"meshd/host/pass"
	"meshd/internal/testenv"
	"meshd/pki"
	"meshd/report"
)

// Seal is the seal key the tests' record stores are sealed under: always the same, so a store
// reopened, also by a crash test's child process, opens.
var Seal = func() *pki.SealKey {
	k, err := pki.SealKeyFromRecoveryCode("MESHD-R4EOZW5S-5XCTH6WN-C3QBKI2A-6MWQLWST-RQCEKOQB-OEWBAQXL-LYGMSBZC", "")
	if err != nil {
		panic(err)
	}
	return k
}()

// Bed is one node's machine for a test: a root the declared paths live under and a data dir.
type Bed struct {
	T    testing.TB
	Root string
	Data string
}

// NewBed makes a bed under a new temporary directory, removed when the test ends.
func NewBed(t testing.TB) *Bed {
	t.Helper()
	dir, err := os.MkdirTemp("", "hs-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	b := &Bed{T: t, Root: filepath.Join(dir, "root"), Data: filepath.Join(dir, "data")}
	for _, d := range []string{b.Root, b.Data} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// Log is a logger that discards everything.
func Log() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// At is the machine's path of a declared path.
func (b *Bed) At(p string) string { return filepath.Join(b.Root, p) }

// Place puts a File at a declared path the way the predecessor left it, an hour old.
func (b *Bed) Place(p, content string) {
	b.T.Helper()
	full := b.At(p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		b.T.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
		b.T.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(full, old, old); err != nil {
		b.T.Fatal(err)
	}
}

// Read is the content at the declared path p.
func (b *Bed) Read(p string) string {
	b.T.Helper()
	c, err := os.ReadFile(b.At(p))
	if err != nil {
		b.T.Fatalf("reading %s: %v", p, err)
	}
	return string(c)
}

// Stat describes what is at the declared path p, without following a symlink.
func (b *Bed) Stat(p string) os.FileInfo {
	b.T.Helper()
	fi, err := os.Lstat(b.At(p))
	if err != nil {
		b.T.Fatalf("stat %s: %v", p, err)
	}
	return fi
}

// Missing says nothing is at the declared path p.
func (b *Bed) Missing(p string) bool {
	_, err := os.Lstat(b.At(p))
	return os.IsNotExist(err)
}

// File is a declared file resource (owned by root: the default owner).
func File(module, p, content string, taken bool) fsm.Resource {
	return fsm.Resource{Module: module, Kind: fsm.KindFile, Taken: taken,
		File: &catalogue.File{Path: p, Content: content, Mode: "0644"}}
}

// With is r with its file changed by f.
func With(r fsm.Resource, f func(*catalogue.File)) fsm.Resource {
	c := *r.File
	f(&c)
	r.File = &c
	return r
}

// Decl is a declaration for node "web1" with the given resources; assigned and taken are derived.
func Decl(mode fsm.Mode, rs ...fsm.Resource) *fsm.Declaration {
	d := &fsm.Declaration{Node: "web1", Mode: mode, Assigned: []string{}, Taken: []string{}, Settings: map[string]string{}, Resources: rs}
	seen := map[string]bool{}
	for _, r := range rs {
		if !seen[r.Module] {
			seen[r.Module] = true
			d.Assigned = append(d.Assigned, r.Module)
			if r.Taken || mode == fsm.Converged {
				d.Taken = append(d.Taken, r.Module)
			}
		}
	}
	return d
}

// Reconciler is what Pass needs of a host.
type Reconciler interface {
	Reconcile(ctx context.Context, d *fsm.Declaration) report.Report
}

// Pass runs one pass of h over d.
func (b *Bed) Pass(h Reconciler, d *fsm.Declaration) report.Report {
	b.T.Helper()
	return h.Reconcile(context.Background(), d)
}

// NoErrors fails the test (and goes on) for each resource rep says failed.
func NoErrors(t testing.TB, rep report.Report) {
	t.Helper()
	for _, e := range rep.Errors {
		t.Errorf("unexpected failure: %s", e)
	}
}

// HeldOf is the held file p in rep, nil if it is not held.
func HeldOf(rep report.Report, p string) *report.HeldFile {
	for i := range rep.Held {
		if rep.Held[i].Path == p {
			return &rep.Held[i]
		}
	}
	return nil
}

// WrittenOf is the written file p in rep, nil if it is not written.
func WrittenOf(rep report.Report, p string) *report.WrittenFile {
	for i := range rep.Written {
		if rep.Written[i].Path == p {
			return &rep.Written[i]
		}
	}
	return nil
}

// ErrorOf is the failure of the file p in rep, nil if it did not fail.
func ErrorOf(rep report.Report, p string) *report.ResourceError {
	for i := range rep.Errors {
		if rep.Errors[i].Resource == fsm.KindFile+":"+p {
			return &rep.Errors[i]
		}
	}
	return nil
}

// WantOriginal fails the test unless h recorded want as the original of p.
func WantOriginal(t testing.TB, h interface{ Original(string) ([]byte, error) }, p, want string) {
	t.Helper()
	got, err := h.Original(p)
	if err != nil {
		t.Fatalf("original of %s: %v", p, err)
	}
	if !bytes.Equal(got, []byte(want)) {
		t.Fatalf("original of %s = %q, want %q", p, got, want)
	}
}

// needMount says whether this process may mount; under CI=true a missing privilege fails.
func ROBind(t *testing.T, dir string) {
	t.Helper()
	if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
		testenv.Prereq(t, "bind-mounting %s (needs CAP_SYS_ADMIN): %v", dir, err)
		return
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	if err := syscall.Mount("", dir, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, ""); err != nil {
		testenv.Prereq(t, "remounting %s read-only: %v", dir, err)
	}
}

// Ctx is a context ended with the test.
func Ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx
}

// DeclUntaken is a declaration for node "n1" with the given resources: their modules
// assigned, none taken unless a resource says so.
func DeclUntaken(mode fsm.Mode, rs ...fsm.Resource) *fsm.Declaration {
	d := &fsm.Declaration{Node: "n1", Mode: mode, Settings: map[string]string{}, Resources: rs}
	for _, r := range rs {
		if !slices.Contains(d.Assigned, r.Module) {
			d.Assigned = append(d.Assigned, r.Module)
		}
	}
	return d
}

// NoErrorsFatal is NoErrors, then stops the test if anything failed.
func NoErrorsFatal(t *testing.T, rep report.Report) {
	t.Helper()
	for _, e := range rep.Errors {
		t.Errorf("unexpected failure: %s", e)
	}
	if t.Failed() {
		t.FailNow()
	}
}

// OwnFile declares a file owned by the user running the test, so no chown needs root.
func OwnFile(module, p, content string, taken bool) fsm.Resource {
	return fsm.Resource{Module: module, Kind: fsm.KindFile, Taken: taken, File: &catalogue.File{
		Path: p, Content: content, Mode: "0644", Owner: fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid())}}
}

// ReadAt is the content of root+p, "(missing)" when there is none.
func ReadAt(t *testing.T, root, p string) string {
	t.Helper()
	b, err := os.ReadFile(root + p)
	if err != nil {
		return "(missing)"
	}
	return string(b)
}

// PlaceAt writes content at root+p, making its directories.
func PlaceAt(t *testing.T, root, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(root+p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(root+p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// ReasonNames says rep has resource failed with a reason that names what.
func ReasonNames(rep report.Report, resource, what string) bool {
	for _, e := range rep.Errors {
		if e.Resource == resource && strings.Contains(e.Reason, what) {
			return true
		}
	}
	return false
}

// Crashed is what a unit test's crash point panics with.
type Crashed struct{ Point string }

// A held file and its two contents: the predecessor's, and the one meshd writes at a take.
const (
	AppConf            = "/etc/webapp/app.conf"
	PredecessorContent = "listen 8080\n# written by the predecessor\n"
	MeshContent        = "listen 8080\n# written by meshd\n"
)

// Armed is a crash seam armed at point whose kill panics with Crashed{point} in place of the
// SIGKILL, so a test recovers where the process would have died.
func Armed(point string) *pass.Crasher {
	c := pass.NewCrasher(Log())
	c.Arm(point, 1, func() { panic(Crashed{Point: point}) })
	return c
}

// RequireChown is for a test that declares files owned by root (File's default owner): the host
// chowns them to 0:0, which only root may. It skips the test otherwise (fails it under CI=true).
func RequireChown(t testing.TB) {
	t.Helper()
	testenv.RequireRoot(t, "files declared owned by root (the host chowns them to 0:0)")
}
