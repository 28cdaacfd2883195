package host

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"meshd/catalogue"
	"meshd/fsm"
	"meshd/host/hosttest"
	"meshd/host/pass"
	"meshd/report"
)

// ADR 0100: on an adopted node a found file is kept until its module is taken: bytes and mtime
// unchanged, reported held, its original recorded; a change by something else is reported and not
// reverted; taking the module converges it, the original kept.
func TestAdoptedNodeHoldsFoundFileUntilTaken(t *testing.T) {
	hosttest.RequireChown(t)
	b := hosttest.NewBed(t)
	b.Place(hosttest.AppConf, hosttest.PredecessorContent)
	before := b.Stat(hosttest.AppConf)
	h := openBed(b)
	res := hosttest.With(hosttest.File("webapp", hosttest.AppConf, hosttest.MeshContent, false), func(f *catalogue.File) { f.Mode = "0640" })

	rep := b.Pass(h, hosttest.Decl(fsm.Adopted, res))
	hosttest.NoErrors(t, rep)
	if got := b.Read(hosttest.AppConf); got != hosttest.PredecessorContent {
		t.Fatalf("held file changed on assign: %q", got)
	}
	if after := b.Stat(hosttest.AppConf); !after.ModTime().Equal(before.ModTime()) || after.Mode() != before.Mode() {
		t.Fatalf("held file touched: mtime %v -> %v, mode %v -> %v", before.ModTime(), after.ModTime(), before.Mode(), after.Mode())
	}
	hf := hosttest.HeldOf(rep, hosttest.AppConf)
	if hf == nil || hf.Module != "webapp" || hf.Changed || hf.RecordedHash != pass.HashOf([]byte(hosttest.PredecessorContent)) || hf.CurrentHash != hf.RecordedHash {
		t.Fatalf("not reported held as found: %+v (report %+v)", hf, rep)
	}
	if hosttest.WrittenOf(rep, hosttest.AppConf) != nil {
		t.Fatalf("a held file reported written")
	}
	hosttest.WantOriginal(t, h, hosttest.AppConf, hosttest.PredecessorContent)

	// The predecessor, still writing, changes it: reported, never reverted.
	const stillWriting = "listen 8080\n# the predecessor is still writing\n"
	b.Place(hosttest.AppConf, stillWriting)
	for range 2 {
		rep = b.Pass(h, hosttest.Decl(fsm.Adopted, res))
		hosttest.NoErrors(t, rep)
		hf = hosttest.HeldOf(rep, hosttest.AppConf)
		if hf == nil || !hf.Changed || hf.Reason != report.ChangedBySomethingElse ||
			hf.RecordedHash != pass.HashOf([]byte(hosttest.PredecessorContent)) || hf.CurrentHash != pass.HashOf([]byte(stillWriting)) {
			t.Fatalf("a held file that changed is not reported so: %+v", hf)
		}
		if got := b.Read(hosttest.AppConf); got != stillWriting {
			t.Fatalf("a held file that changed was reverted: %q", got)
		}
	}

	// Taken: it converges, content and mode; the original is the one found first.
	res.Taken = true
	rep = b.Pass(h, hosttest.Decl(fsm.Adopted, res))
	hosttest.NoErrors(t, rep)
	if got := b.Read(hosttest.AppConf); got != hosttest.MeshContent {
		t.Fatalf("taken file not converged: %q", got)
	}
	if m := b.Stat(hosttest.AppConf).Mode().Perm(); m != 0o640 {
		t.Fatalf("taken file mode %o, want 0640", m)
	}
	if hosttest.HeldOf(rep, hosttest.AppConf) != nil {
		t.Fatalf("a taken file still reported held")
	}
	if w := hosttest.WrittenOf(rep, hosttest.AppConf); w == nil || w.Hash != pass.HashOf([]byte(hosttest.MeshContent)) || w.Module != "webapp" {
		t.Fatalf("taken file not reported written: %+v", rep.Written)
	}
	hosttest.WantOriginal(t, h, hosttest.AppConf, hosttest.PredecessorContent)

	// Taken, it is the mesh's: changed by something else, it is converged back.
	b.Place(hosttest.AppConf, stillWriting)
	rep = b.Pass(h, hosttest.Decl(fsm.Adopted, res))
	hosttest.NoErrors(t, rep)
	if got := b.Read(hosttest.AppConf); got != hosttest.MeshContent {
		t.Fatalf("taken file not converged after a change: %q", got)
	}
}

// A held file is never removed, also when its module is unassigned; a file the host created for a
// module unassigned before it was taken is removed.
func TestUnassignKeepsHeldRemovesCreated(t *testing.T) {
	hosttest.RequireChown(t)
	b := hosttest.NewBed(t)
	const created = "/etc/webapp/extra.conf"
	b.Place(hosttest.AppConf, hosttest.PredecessorContent)
	h := openBed(b)
	rep := b.Pass(h, hosttest.Decl(fsm.Adopted,
		hosttest.File("webapp", hosttest.AppConf, hosttest.MeshContent, false),
		hosttest.With(hosttest.File("webapp", created, "extra\n", false), func(f *catalogue.File) { f.Mode = "0600" }),
		hosttest.File("other", "/etc/other.conf", "other\n", false)))
	hosttest.NoErrors(t, rep)
	if got := b.Read(created); got != "extra\n" {
		t.Fatalf("assigning did not create the missing file: %q", got)
	}
	if m := b.Stat(created).Mode().Perm(); m != 0o600 {
		t.Fatalf("created with mode %o, want 0600", m)
	}
	if w := hosttest.WrittenOf(rep, created); w == nil || w.Module != "webapp" {
		t.Fatalf("created file not reported written: %+v", rep.Written)
	}
	if hosttest.HeldOf(rep, hosttest.AppConf) == nil {
		t.Fatal("found file not held")
	}

	// webapp unassigned before it was taken.
	for range 2 {
		rep = b.Pass(h, hosttest.Decl(fsm.Adopted, hosttest.File("other", "/etc/other.conf", "other\n", false)))
		hosttest.NoErrors(t, rep)
		if got := b.Read(hosttest.AppConf); got != hosttest.PredecessorContent {
			t.Fatalf("held file changed or removed on unassign: %q", got)
		}
		hf := hosttest.HeldOf(rep, hosttest.AppConf)
		if hf == nil || !hf.Unassigned || hf.Module != "webapp" || hf.Changed {
			t.Fatalf("held file of an unassigned module not reported held: %+v", rep.Held)
		}
		if !b.Missing(created) {
			t.Fatal("file created for a module unassigned before it was taken is still there")
		}
		if hosttest.WrittenOf(rep, created) != nil {
			t.Fatal("removed file still reported written")
		}
	}
	if _, err := h.Original(created); err == nil || !strings.Contains(err.Error(), created) {
		t.Fatalf("a created file has an original (or the error does not name it): %v", err)
	}
	hosttest.WantOriginal(t, h, hosttest.AppConf, hosttest.PredecessorContent)
	if got := b.Read("/etc/other.conf"); got != "other\n" {
		t.Fatalf("the other module's file: %q", got)
	}

	// Even a held file whose module left while it was changed by something else stays.
	b.Place(hosttest.AppConf, "rewritten\n")
	rep = b.Pass(h, hosttest.Decl(fsm.Adopted))
	if hf := hosttest.HeldOf(rep, hosttest.AppConf); hf == nil || !hf.Changed || !hf.Unassigned {
		t.Fatalf("changed held file of an unassigned module: %+v", rep.Held)
	}
	if got := b.Read(hosttest.AppConf); got != "rewritten\n" {
		t.Fatalf("held file touched: %q", got)
	}
	if !b.Missing("/etc/other.conf") {
		t.Fatal("other module's created file not removed on unassign")
	}
}

// create_once: written when missing, never rewritten; a found one is kept, its original recorded.
func TestCreateOnce(t *testing.T) {
	hosttest.RequireChown(t)
	b := hosttest.NewBed(t)
	const secret, seeded = "/var/lib/webapp/secret", "/var/lib/webapp/seeded"
	b.Place(seeded, "the predecessor's seed\n")
	h := openBed(b)
	once := func(p, c string) fsm.Resource {
		return hosttest.With(hosttest.File("webapp", p, c, true), func(f *catalogue.File) { f.CreateOnce = true; f.Mode = "0600" })
	}
	d := hosttest.Decl(fsm.Converged, once(secret, "generated-1\n"), once(seeded, "mesh seed\n"))
	rep := b.Pass(h, d)
	hosttest.NoErrors(t, rep)
	if got := b.Read(secret); got != "generated-1\n" {
		t.Fatalf("create_once file not created: %q", got)
	}
	if got := b.Read(seeded); got != "the predecessor's seed\n" {
		t.Fatalf("found create_once file rewritten: %q", got)
	}
	if w := hosttest.WrittenOf(rep, seeded); w == nil || !w.Kept {
		t.Fatalf("found create_once file not reported kept: %+v", rep.Written)
	}
	hosttest.WantOriginal(t, h, seeded, "the predecessor's seed\n")

	// Edited by the operator, declared with new content: never rewritten.
	b.Place(secret, "edited\n")
	d = hosttest.Decl(fsm.Converged, once(secret, "generated-2\n"), once(seeded, "mesh seed 2\n"))
	rep = b.Pass(h, d)
	hosttest.NoErrors(t, rep)
	if got := b.Read(secret); got != "edited\n" {
		t.Fatalf("create_once file rewritten: %q", got)
	}
	// Gone: written again.
	os.Remove(b.At(secret))
	rep = b.Pass(h, d)
	hosttest.NoErrors(t, rep)
	if got := b.Read(secret); got != "generated-2\n" {
		t.Fatalf("missing create_once file not written: %q", got)
	}
}

// A file the host wrote in an earlier life of the node is not found after a restart.
func TestWrittenInEarlierLifeIsNotFound(t *testing.T) {
	hosttest.RequireChown(t)
	b := hosttest.NewBed(t)
	h := openBed(b)
	d := hosttest.Decl(fsm.Adopted, hosttest.File("webapp", hosttest.AppConf, hosttest.MeshContent, false))
	hosttest.NoErrors(t, b.Pass(h, d))
	if got := b.Read(hosttest.AppConf); got != hosttest.MeshContent {
		t.Fatalf("not created: %q", got)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}

	h = openBed(b) // the node restarts
	rep := b.Pass(h, d)
	hosttest.NoErrors(t, rep)
	if hf := hosttest.HeldOf(rep, hosttest.AppConf); hf != nil {
		t.Fatalf("a file written in an earlier life is reported held: %+v", hf)
	}
	if w := hosttest.WrittenOf(rep, hosttest.AppConf); w == nil {
		t.Fatalf("a file written in an earlier life is not reported written: %+v", rep)
	}
	if _, err := h.Original(hosttest.AppConf); err == nil {
		t.Fatal("a file written in an earlier life was recorded as found")
	}
	// It is the mesh's: a new declared content converges it, on an adopted node too.
	rep = b.Pass(h, hosttest.Decl(fsm.Adopted, hosttest.File("webapp", hosttest.AppConf, "v2\n", false)))
	hosttest.NoErrors(t, rep)
	if got := b.Read(hosttest.AppConf); got != "v2\n" {
		t.Fatalf("own file not converged after restart: %q", got)
	}
}

// On a converged node a found file is recorded first, then replaced, with mode and owner.
func TestConvergedNodeRecordsThenReplaces(t *testing.T) {
	b := hosttest.NewBed(t)
	b.Place(hosttest.AppConf, hosttest.PredecessorContent)
	h := openBed(b)
	res := hosttest.With(hosttest.File("webapp", hosttest.AppConf, hosttest.MeshContent, false), func(f *catalogue.File) { f.Mode = "0640"; f.Owner = "65534:65534" })
	rep := b.Pass(h, hosttest.Decl(fsm.Converged, res))
	hosttest.NoErrors(t, rep)
	if got := b.Read(hosttest.AppConf); got != hosttest.MeshContent {
		t.Fatalf("not converged: %q", got)
	}
	fi := b.Stat(hosttest.AppConf)
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm() != 0o640 || st.Uid != 65534 || st.Gid != 65534 {
		t.Fatalf("mode %o owner %d:%d, want 0640 65534:65534", fi.Mode().Perm(), st.Uid, st.Gid)
	}
	hosttest.WantOriginal(t, h, hosttest.AppConf, hosttest.PredecessorContent)

	// Mode and owner drift alone are put back without rewriting the content.
	os.Chmod(b.At(hosttest.AppConf), 0o666)
	os.Chown(b.At(hosttest.AppConf), 0, 0)
	ino := st.Ino
	rep = b.Pass(h, hosttest.Decl(fsm.Converged, res))
	hosttest.NoErrors(t, rep)
	fi = b.Stat(hosttest.AppConf)
	st = fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm() != 0o640 || st.Uid != 65534 || st.Ino != ino {
		t.Fatalf("metadata not fixed in place: mode %o uid %d inode %d->%d", fi.Mode().Perm(), st.Uid, ino, st.Ino)
	}
}

// Bad input fails alone, named with its reason; every other resource converges; nothing is lost.
func TestBadInputFailsAloneOthersConverge(t *testing.T) {
	b := hosttest.NewBed(t)
	const (
		dirPath  = "/etc/webapp/conf.d"
		escape   = "/etc/webapp/escape.conf"
		inside   = "/etc/webapp/inside.conf"
		fifo     = "/etc/webapp/pipe.conf"
		readonly = "/etc/ro/app.conf"
		good     = "/etc/webapp/good.conf"
		fresh    = "/etc/webapp/fresh.conf"
		secret   = "/outside/secret"
	)
	os.MkdirAll(b.At(dirPath), 0o755)
	b.Place(secret, "not the mesh's\n")
	if err := os.Symlink("../../outside/secret", b.At(escape)); err != nil {
		t.Fatal(err)
	}
	b.Place("/etc/webapp/inside.real", "inside, original\n")
	if err := os.Symlink("inside.real", b.At(inside)); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(b.At(fifo), 0o644); err != nil {
		t.Fatal(err)
	}
	b.Place(readonly, "on a read-only file system\n")
	hosttest.ROBind(t, filepath.Dir(b.At(readonly)))
	b.Place(good, "good, original\n")

	h := openBed(b)
	d := hosttest.Decl(fsm.Adopted,
		hosttest.File("webapp", dirPath, "x\n", true),
		hosttest.File("webapp", escape, "x\n", true),
		hosttest.File("webapp", inside, "inside, mesh\n", true),
		hosttest.File("webapp", fifo, "x\n", true),
		hosttest.File("ro", readonly, "mesh\n", true),
		hosttest.File("webapp", good, "good, mesh\n", true),
		hosttest.File("webapp", fresh, "fresh\n", false))
	rep := b.Pass(h, d)
	want := map[string]string{
		dirPath:  "is a directory",
		escape:   "outside /etc/webapp: refused, not followed",
		fifo:     "cannot be read as a file: it is a named pipe",
		readonly: "read-only file system",
	}
	for p, reason := range want {
		e := hosttest.ErrorOf(rep, p)
		if e == nil || !strings.Contains(e.Reason, reason) || !strings.Contains(e.Reason, p) {
			t.Errorf("%s: want failure %q naming the path, got %+v", p, reason, e)
		}
	}
	if len(rep.Errors) != len(want) {
		t.Errorf("failures %+v, want exactly %d", rep.Errors, len(want))
	}
	if got := b.Read(good); got != "good, mesh\n" {
		t.Errorf("good file not converged beside bad ones: %q", got)
	}
	if got := b.Read(fresh); got != "fresh\n" {
		t.Errorf("missing file not created beside bad ones: %q", got)
	}
	if got := b.Read("/etc/webapp/inside.real"); got != "inside, mesh\n" {
		t.Errorf("symlink inside its directory not followed: %q", got)
	}
	if b.Stat(inside).Mode()&os.ModeSymlink == 0 {
		t.Error("a symlink inside its directory was replaced by a file")
	}
	if got := b.Read(secret); got != "not the mesh's\n" {
		t.Errorf("escaping symlink followed: %q", got)
	}
	if b.Stat(fifo).Mode()&os.ModeNamedPipe == 0 || !b.Stat(dirPath).IsDir() {
		t.Error("a bad input was replaced")
	}
	if got := b.Read(readonly); got != "on a read-only file system\n" {
		t.Errorf("read-only file: %q", got)
	}
	// Nothing is lost: the read-only file's original was recorded before the write failed.
	hosttest.WantOriginal(t, h, readonly, "on a read-only file system\n")
	hosttest.WantOriginal(t, h, good, "good, original\n")
	if _, err := h.Original(escape); err == nil {
		t.Error("an escaping symlink's target was recorded")
	}
}

// A pass with nothing to do writes nothing: no file, no record-store write transaction.
func TestNoOpPassWritesNothing(t *testing.T) {
	hosttest.RequireChown(t)
	b := hosttest.NewBed(t)
	b.Place(hosttest.AppConf, hosttest.PredecessorContent)
	b.Place("/etc/webapp/old.conf", "held, module gone\n")
	b.Place("/etc/db/db.conf", "db, found\n")
	h := openBed(b)
	hosttest.NoErrors(t, b.Pass(h, hosttest.Decl(fsm.Adopted, hosttest.File("legacy", "/etc/webapp/old.conf", "x\n", false))))
	d := hosttest.Decl(fsm.Adopted,
		hosttest.File("webapp", hosttest.AppConf, hosttest.MeshContent, false),
		hosttest.File("webapp", "/etc/webapp/new.conf", "new\n", false),
		hosttest.With(hosttest.File("db", "/etc/db/db.conf", "db, mesh\n", true), func(f *catalogue.File) { f.Owner = "65534"; f.Mode = "0600" }),
		hosttest.With(hosttest.File("db", "/var/lib/db/key", "k\n", true), func(f *catalogue.File) { f.CreateOnce = true }))
	rep := b.Pass(h, d)
	hosttest.NoErrors(t, rep)
	if rep.Changes == 0 {
		t.Fatal("the first pass changed nothing")
	}
	b.Place(hosttest.AppConf, "changed by the predecessor\n") // held and changed: reported, not a write

	type snap struct {
		size  int64
		mtime time.Time
	}
	stat := func() map[string]snap {
		out := map[string]snap{}
		for _, dir := range []string{b.Root, b.Data} {
			filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
				if err == nil {
					out[p] = snap{fi.Size(), fi.ModTime()}
				}
				return nil
			})
		}
		return out
	}
	before, txs := stat(), h.RecordWrites()
	time.Sleep(20 * time.Millisecond) // so that a write would show in an mtime
	for range 3 {
		rep = b.Pass(h, d)
		hosttest.NoErrors(t, rep)
		if rep.Changes != 0 {
			t.Fatalf("a no-op pass reports %d changes", rep.Changes)
		}
	}
	if got := h.RecordWrites(); got != txs {
		t.Fatalf("a no-op pass began %d record-store write transactions", got-txs)
	}
	after := stat()
	if len(after) != len(before) {
		t.Fatalf("files appeared or vanished: %d -> %d", len(before), len(after))
	}
	for p, s := range before {
		if after[p] != s {
			t.Errorf("%s changed in a no-op pass: %+v -> %+v", p, s, after[p])
		}
	}
	if hf := hosttest.HeldOf(rep, hosttest.AppConf); hf == nil || !hf.Changed {
		t.Fatalf("the changed held file is not reported: %+v", rep.Held)
	}
	if hf := hosttest.HeldOf(rep, "/etc/webapp/old.conf"); hf == nil || !hf.Unassigned {
		t.Fatalf("the unassigned held file is not reported: %+v", rep.Held)
	}
}

func BenchmarkNoOpPass(b *testing.B) {
	bd := hosttest.NewBed(b)
	var rs []fsm.Resource
	for i := range 20 {
		p := filepath.Join("/etc/bench", "held", string(rune('a'+i))+".conf")
		bd.Place(p, strings.Repeat("predecessor line\n", 100))
		rs = append(rs, hosttest.File("held", p, "x\n", false))
		rs = append(rs, hosttest.File("taken", filepath.Join("/etc/bench", "taken", string(rune('a'+i))+".conf"), strings.Repeat("mesh line\n", 100), true))
	}
	h := openBed(bd)
	d := hosttest.Decl(fsm.Adopted, rs...)
	if rep := h.Reconcile(context.Background(), d); len(rep.Errors) > 0 {
		b.Fatal(rep.Errors)
	}
	txs := h.RecordWrites()
	b.ResetTimer()
	for b.Loop() {
		if rep := h.Reconcile(context.Background(), d); rep.Changes != 0 {
			b.Fatalf("no-op pass changed %d", rep.Changes)
		}
	}
	if h.RecordWrites() != txs {
		b.Fatal("no-op passes wrote to the record store")
	}
}

// The loop reconciles on a new declaration and, level-triggered, on its timer.
func TestRunIsLevelTriggered(t *testing.T) {
	hosttest.RequireChown(t)
	b := hosttest.NewBed(t)
	h, err := Open(Config{DataDir: b.Data, Seal: hosttest.Seal, Root: b.Root, Interval: 50 * time.Millisecond, Logger: hosttest.Log()})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ctx, cancel := context.WithCancel(context.Background())
	decls := make(chan *fsm.Declaration)
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx, decls) }()

	decls <- hosttest.Decl(fsm.Converged, hosttest.File("webapp", hosttest.AppConf, hosttest.MeshContent, true))
	eventually(t, "the declared file written", func() bool {
		c, err := os.ReadFile(b.At(hosttest.AppConf))
		return err == nil && string(c) == hosttest.MeshContent
	})
	os.WriteFile(b.At(hosttest.AppConf), []byte("drifted\n"), 0o644)
	eventually(t, "the drifted file converged again by the timer", func() bool {
		c, err := os.ReadFile(b.At(hosttest.AppConf))
		return err == nil && string(c) == hosttest.MeshContent
	})
	decls <- hosttest.Decl(fsm.Converged, hosttest.File("webapp", hosttest.AppConf, "v2\n", true))
	eventually(t, "a new declaration applied", func() bool {
		c, err := os.ReadFile(b.At(hosttest.AppConf))
		return err == nil && string(c) == "v2\n"
	})
	if rep := h.Report(); rep.Node != "web1" || rep.Mode != fsm.Converged || rep.When.IsZero() {
		t.Fatalf("last report: %+v", rep)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// countingDriver is a second resource kind plugged into the loop, as container/ will be.
type countingDriver struct {
	kind  string
	calls int
	got   []fsm.Resource
}

func (c *countingDriver) Kind() string { return c.kind }
func (c *countingDriver) Reconcile(_ context.Context, p pass.Pass) pass.Outcome {
	c.calls++
	c.got = p.Resources
	out := pass.Outcome{Detail: map[string]int{"seen": len(p.Resources)}}
	if _, ok, _ := p.Records.Get("first"); !ok {
		p.Records.Put("first", []byte("x"))
		out.Changes++
	}
	return out
}

// Other kinds plug in as drivers; a kind no driver speaks fails by resource, files still converge.
func TestDriversPlugIn(t *testing.T) {
	hosttest.RequireChown(t)
	b := hosttest.NewBed(t)
	drv := &countingDriver{kind: fsm.KindContainer}
	h, err := Open(Config{DataDir: b.Data, Seal: hosttest.Seal, Root: b.Root, Logger: hosttest.Log(), Drivers: []Driver{drv}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	d := hosttest.Decl(fsm.Converged, hosttest.File("webapp", hosttest.AppConf, hosttest.MeshContent, true),
		fsm.Resource{Module: "webapp", Kind: fsm.KindContainer, Taken: true, Container: &catalogue.Container{Name: "webapp", Image: "labsvc"}},
		fsm.Resource{Module: "webapp", Kind: fsm.KindOpening, Taken: true, Opening: &catalogue.PortOpening{Port: 8080, Proto: "tcp", From: "anywhere", Path: "forwarded"}})
	rep := h.Reconcile(context.Background(), d)
	if drv.calls != 1 || len(drv.got) != 1 || drv.got[0].Container.Name != "webapp" {
		t.Fatalf("driver called %d times with %+v", drv.calls, drv.got)
	}
	if len(rep.Errors) != 1 || !strings.Contains(rep.Errors[0].Reason, `no driver for resource kind "opening"`) {
		t.Fatalf("errors: %+v", rep.Errors)
	}
	if b.Read(hosttest.AppConf) != hosttest.MeshContent {
		t.Fatal("files not converged beside the drivers")
	}
	js, err := json.Marshal(rep)
	if err != nil || !strings.Contains(string(js), `"container":{"seen":1}`) {
		t.Fatalf("report JSON %s: %v", js, err)
	}
	rep = h.Reconcile(context.Background(), d)
	if rep.Changes != 0 {
		t.Fatalf("second pass changed %d", rep.Changes)
	}
	if _, err := Open(Config{DataDir: t.TempDir(), Seal: hosttest.Seal, Root: b.Root, Drivers: []Driver{drv, drv}}); err == nil {
		t.Fatal("two drivers for one kind accepted")
	}
}

// The report encodes as the JSON `meshd node show --json` serves.
func TestReportJSON(t *testing.T) {
	hosttest.RequireChown(t)
	b := hosttest.NewBed(t)
	b.Place(hosttest.AppConf, hosttest.PredecessorContent)
	h := openBed(b)
	b.Pass(h, hosttest.Decl(fsm.Adopted, hosttest.File("webapp", hosttest.AppConf, hosttest.MeshContent, false), hosttest.File("webapp", "/etc/webapp/new.conf", "n\n", false)))
	js, err := json.Marshal(h.Report())
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	json.Unmarshal(js, &back)
	held := back["held"].([]any)[0].(map[string]any)
	for _, k := range []string{"path", "module", "recorded_hash", "current_hash", "changed"} {
		if _, ok := held[k]; !ok {
			t.Errorf("held file JSON lacks %q: %s", k, js)
		}
	}
	if back["node"] != "web1" || back["mode"] != "adopted" || len(back["written"].([]any)) != 1 {
		t.Errorf("report JSON: %s", js)
	}
}
