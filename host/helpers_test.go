package host

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"meshd/catalogue"
	"meshd/fsm"
	"meshd/internal/testenv"
)

// bed is one node's machine for a test: a root the declared paths live under and a data dir.
type bed struct {
	t    testing.TB
	root string
	data string
}

func newBed(t testing.TB) *bed {
	t.Helper()
	dir, err := os.MkdirTemp("", "hs-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	b := &bed{t: t, root: filepath.Join(dir, "root"), data: filepath.Join(dir, "data")}
	for _, d := range []string{b.root, b.data} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func (b *bed) open() *Host {
	b.t.Helper()
	h, err := Open(Config{DataDir: b.data, Root: b.root, Logger: quietLogger()})
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { h.Close() })
	return h
}

// at is the machine's path of a declared path.
func (b *bed) at(p string) string { return filepath.Join(b.root, p) }

// place puts a file at a declared path the way the predecessor left it, an hour old.
func (b *bed) place(p, content string) {
	b.t.Helper()
	full := b.at(p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		b.t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
		b.t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(full, old, old); err != nil {
		b.t.Fatal(err)
	}
}

func (b *bed) read(p string) string {
	b.t.Helper()
	c, err := os.ReadFile(b.at(p))
	if err != nil {
		b.t.Fatalf("reading %s: %v", p, err)
	}
	return string(c)
}

func (b *bed) stat(p string) os.FileInfo {
	b.t.Helper()
	fi, err := os.Lstat(b.at(p))
	if err != nil {
		b.t.Fatalf("stat %s: %v", p, err)
	}
	return fi
}

func (b *bed) missing(p string) bool {
	_, err := os.Lstat(b.at(p))
	return os.IsNotExist(err)
}

// file is a declared file resource.
func file(module, p, content string, taken bool) fsm.Resource {
	return fsm.Resource{Module: module, Kind: fsm.KindFile, Taken: taken,
		File: &catalogue.File{Path: p, Content: content, Mode: "0644"}}
}

func with(r fsm.Resource, f func(*catalogue.File)) fsm.Resource {
	c := *r.File
	f(&c)
	r.File = &c
	return r
}

// decl is a declaration for node "web1" with the given resources; assigned and taken are derived.
func decl(mode fsm.Mode, rs ...fsm.Resource) *fsm.Declaration {
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

func (b *bed) pass(h *Host, d *fsm.Declaration) Report {
	b.t.Helper()
	return h.Reconcile(context.Background(), d)
}

func noErrors(t testing.TB, rep Report) {
	t.Helper()
	for _, e := range rep.Errors {
		t.Errorf("unexpected failure: %s", e)
	}
}

func heldOf(rep Report, p string) *HeldFile {
	for i := range rep.Held {
		if rep.Held[i].Path == p {
			return &rep.Held[i]
		}
	}
	return nil
}

func writtenOf(rep Report, p string) *WrittenFile {
	for i := range rep.Written {
		if rep.Written[i].Path == p {
			return &rep.Written[i]
		}
	}
	return nil
}

func errorOf(rep Report, p string) *ResourceError {
	for i := range rep.Errors {
		if rep.Errors[i].Resource == fsm.KindFile+":"+p {
			return &rep.Errors[i]
		}
	}
	return nil
}

func wantOriginal(t testing.TB, h *Host, p, want string) {
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
func roBind(t *testing.T, dir string) {
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
