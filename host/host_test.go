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
)

const (
	appConf            = "/etc/webapp/app.conf"
	predecessorContent = "listen 8080\n# written by the predecessor\n"
	meshContent        = "listen 8080\n# written by meshd\n"
)

// ADR 0100: on an adopted node a found file is kept until its module is taken: bytes and mtime
// unchanged, reported held, its original recorded; a change by something else is reported and not
// reverted; taking the module converges it, the original kept.
func TestAdoptedNodeHoldsFoundFileUntilTaken(t *testing.T) {
	b := newBed(t)
	b.place(appConf, predecessorContent)
	before := b.stat(appConf)
	h := b.open()
	res := with(file("webapp", appConf, meshContent, false), func(f *catalogue.File) { f.Mode = "0640" })

	rep := b.pass(h, decl(fsm.Adopted, res))
	noErrors(t, rep)
	if got := b.read(appConf); got != predecessorContent {
		t.Fatalf("held file changed on assign: %q", got)
	}
	if after := b.stat(appConf); !after.ModTime().Equal(before.ModTime()) || after.Mode() != before.Mode() {
		t.Fatalf("held file touched: mtime %v -> %v, mode %v -> %v", before.ModTime(), after.ModTime(), before.Mode(), after.Mode())
	}
	hf := heldOf(rep, appConf)
	if hf == nil || hf.Module != "webapp" || hf.Changed || hf.RecordedHash != hashOf([]byte(predecessorContent)) || hf.CurrentHash != hf.RecordedHash {
		t.Fatalf("not reported held as found: %+v (report %+v)", hf, rep)
	}
	if writtenOf(rep, appConf) != nil {
		t.Fatalf("a held file reported written")
	}
	wantOriginal(t, h, appConf, predecessorContent)

	// The predecessor, still writing, changes it: reported, never reverted.
	const stillWriting = "listen 8080\n# the predecessor is still writing\n"
	b.place(appConf, stillWriting)
	for range 2 {
		rep = b.pass(h, decl(fsm.Adopted, res))
		noErrors(t, rep)
		hf = heldOf(rep, appConf)
		if hf == nil || !hf.Changed || hf.Reason != ChangedBySomethingElse ||
			hf.RecordedHash != hashOf([]byte(predecessorContent)) || hf.CurrentHash != hashOf([]byte(stillWriting)) {
			t.Fatalf("a held file that changed is not reported so: %+v", hf)
		}
		if got := b.read(appConf); got != stillWriting {
			t.Fatalf("a held file that changed was reverted: %q", got)
		}
	}

	// Taken: it converges, content and mode; the original is the one found first.
	res.Taken = true
	rep = b.pass(h, decl(fsm.Adopted, res))
	noErrors(t, rep)
	if got := b.read(appConf); got != meshContent {
		t.Fatalf("taken file not converged: %q", got)
	}
	if m := b.stat(appConf).Mode().Perm(); m != 0o640 {
		t.Fatalf("taken file mode %o, want 0640", m)
	}
	if heldOf(rep, appConf) != nil {
		t.Fatalf("a taken file still reported held")
	}
	if w := writtenOf(rep, appConf); w == nil || w.Hash != hashOf([]byte(meshContent)) || w.Module != "webapp" {
		t.Fatalf("taken file not reported written: %+v", rep.Written)
	}
	wantOriginal(t, h, appConf, predecessorContent)

	// Taken, it is the mesh's: changed by something else, it is converged back.
	b.place(appConf, stillWriting)
	rep = b.pass(h, decl(fsm.Adopted, res))
	noErrors(t, rep)
	if got := b.read(appConf); got != meshContent {
		t.Fatalf("taken file not converged after a change: %q", got)
	}
}

// A held file is never removed, also when its module is unassigned; a file the host created for a
// module unassigned before it was taken is removed.
func TestUnassignKeepsHeldRemovesCreated(t *testing.T) {
	b := newBed(t)
	const created = "/etc/webapp/extra.conf"
	b.place(appConf, predecessorContent)
	h := b.open()
	rep := b.pass(h, decl(fsm.Adopted,
		file("webapp", appConf, meshContent, false),
		with(file("webapp", created, "extra\n", false), func(f *catalogue.File) { f.Mode = "0600" }),
		file("other", "/etc/other.conf", "other\n", false)))
	noErrors(t, rep)
	if got := b.read(created); got != "extra\n" {
		t.Fatalf("assigning did not create the missing file: %q", got)
	}
	if m := b.stat(created).Mode().Perm(); m != 0o600 {
		t.Fatalf("created with mode %o, want 0600", m)
	}
	if w := writtenOf(rep, created); w == nil || w.Module != "webapp" {
		t.Fatalf("created file not reported written: %+v", rep.Written)
	}
	if heldOf(rep, appConf) == nil {
		t.Fatal("found file not held")
	}

	// webapp unassigned before it was taken.
	for range 2 {
		rep = b.pass(h, decl(fsm.Adopted, file("other", "/etc/other.conf", "other\n", false)))
		noErrors(t, rep)
		if got := b.read(appConf); got != predecessorContent {
			t.Fatalf("held file changed or removed on unassign: %q", got)
		}
		hf := heldOf(rep, appConf)
		if hf == nil || !hf.Unassigned || hf.Module != "webapp" || hf.Changed {
			t.Fatalf("held file of an unassigned module not reported held: %+v", rep.Held)
		}
		if !b.missing(created) {
			t.Fatal("file created for a module unassigned before it was taken is still there")
		}
		if writtenOf(rep, created) != nil {
			t.Fatal("removed file still reported written")
		}
	}
	if _, err := h.Original(created); err == nil || !strings.Contains(err.Error(), created) {
		t.Fatalf("a created file has an original (or the error does not name it): %v", err)
	}
	wantOriginal(t, h, appConf, predecessorContent)
	if got := b.read("/etc/other.conf"); got != "other\n" {
		t.Fatalf("the other module's file: %q", got)
	}

	// Even a held file whose module left while it was changed by something else stays.
	b.place(appConf, "rewritten\n")
	rep = b.pass(h, decl(fsm.Adopted))
	if hf := heldOf(rep, appConf); hf == nil || !hf.Changed || !hf.Unassigned {
		t.Fatalf("changed held file of an unassigned module: %+v", rep.Held)
	}
	if got := b.read(appConf); got != "rewritten\n" {
		t.Fatalf("held file touched: %q", got)
	}
	if !b.missing("/etc/other.conf") {
		t.Fatal("other module's created file not removed on unassign")
	}
}

// create_once: written when missing, never rewritten; a found one is kept, its original recorded.
func TestCreateOnce(t *testing.T) {
	b := newBed(t)
	const secret, seeded = "/var/lib/webapp/secret", "/var/lib/webapp/seeded"
	b.place(seeded, "the predecessor's seed\n")
	h := b.open()
	once := func(p, c string) fsm.Resource {
		return with(file("webapp", p, c, true), func(f *catalogue.File) { f.CreateOnce = true; f.Mode = "0600" })
	}
	d := decl(fsm.Converged, once(secret, "generated-1\n"), once(seeded, "mesh seed\n"))
	rep := b.pass(h, d)
	noErrors(t, rep)
	if got := b.read(secret); got != "generated-1\n" {
		t.Fatalf("create_once file not created: %q", got)
	}
	if got := b.read(seeded); got != "the predecessor's seed\n" {
		t.Fatalf("found create_once file rewritten: %q", got)
	}
	if w := writtenOf(rep, seeded); w == nil || !w.Kept {
		t.Fatalf("found create_once file not reported kept: %+v", rep.Written)
	}
	wantOriginal(t, h, seeded, "the predecessor's seed\n")

	// Edited by the operator, declared with new content: never rewritten.
	b.place(secret, "edited\n")
	d = decl(fsm.Converged, once(secret, "generated-2\n"), once(seeded, "mesh seed 2\n"))
	rep = b.pass(h, d)
	noErrors(t, rep)
	if got := b.read(secret); got != "edited\n" {
		t.Fatalf("create_once file rewritten: %q", got)
	}
	// Gone: written again.
	os.Remove(b.at(secret))
	rep = b.pass(h, d)
	noErrors(t, rep)
	if got := b.read(secret); got != "generated-2\n" {
		t.Fatalf("missing create_once file not written: %q", got)
	}
}

// A file the host wrote in an earlier life of the node is not found after a restart.
func TestWrittenInEarlierLifeIsNotFound(t *testing.T) {
	b := newBed(t)
	h := b.open()
	d := decl(fsm.Adopted, file("webapp", appConf, meshContent, false))
	noErrors(t, b.pass(h, d))
	if got := b.read(appConf); got != meshContent {
		t.Fatalf("not created: %q", got)
	}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}

	h = b.open() // the node restarts
	rep := b.pass(h, d)
	noErrors(t, rep)
	if hf := heldOf(rep, appConf); hf != nil {
		t.Fatalf("a file written in an earlier life is reported held: %+v", hf)
	}
	if w := writtenOf(rep, appConf); w == nil {
		t.Fatalf("a file written in an earlier life is not reported written: %+v", rep)
	}
	if _, err := h.Original(appConf); err == nil {
		t.Fatal("a file written in an earlier life was recorded as found")
	}
	// It is the mesh's: a new declared content converges it, on an adopted node too.
	rep = b.pass(h, decl(fsm.Adopted, file("webapp", appConf, "v2\n", false)))
	noErrors(t, rep)
	if got := b.read(appConf); got != "v2\n" {
		t.Fatalf("own file not converged after restart: %q", got)
	}
}

// On a converged node a found file is recorded first, then replaced, with mode and owner.
func TestConvergedNodeRecordsThenReplaces(t *testing.T) {
	b := newBed(t)
	b.place(appConf, predecessorContent)
	h := b.open()
	res := with(file("webapp", appConf, meshContent, false), func(f *catalogue.File) { f.Mode = "0640"; f.Owner = "65534:65534" })
	rep := b.pass(h, decl(fsm.Converged, res))
	noErrors(t, rep)
	if got := b.read(appConf); got != meshContent {
		t.Fatalf("not converged: %q", got)
	}
	fi := b.stat(appConf)
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm() != 0o640 || st.Uid != 65534 || st.Gid != 65534 {
		t.Fatalf("mode %o owner %d:%d, want 0640 65534:65534", fi.Mode().Perm(), st.Uid, st.Gid)
	}
	wantOriginal(t, h, appConf, predecessorContent)

	// Mode and owner drift alone are put back without rewriting the content.
	os.Chmod(b.at(appConf), 0o666)
	os.Chown(b.at(appConf), 0, 0)
	ino := st.Ino
	rep = b.pass(h, decl(fsm.Converged, res))
	noErrors(t, rep)
	fi = b.stat(appConf)
	st = fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm() != 0o640 || st.Uid != 65534 || st.Ino != ino {
		t.Fatalf("metadata not fixed in place: mode %o uid %d inode %d->%d", fi.Mode().Perm(), st.Uid, ino, st.Ino)
	}
}

// Bad input fails alone, named with its reason; every other resource converges; nothing is lost.
func TestBadInputFailsAloneOthersConverge(t *testing.T) {
	b := newBed(t)
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
	os.MkdirAll(b.at(dirPath), 0o755)
	b.place(secret, "not the mesh's\n")
	if err := os.Symlink("../../outside/secret", b.at(escape)); err != nil {
		t.Fatal(err)
	}
	b.place("/etc/webapp/inside.real", "inside, original\n")
	if err := os.Symlink("inside.real", b.at(inside)); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(b.at(fifo), 0o644); err != nil {
		t.Fatal(err)
	}
	b.place(readonly, "on a read-only file system\n")
	roBind(t, filepath.Dir(b.at(readonly)))
	b.place(good, "good, original\n")

	h := b.open()
	d := decl(fsm.Adopted,
		file("webapp", dirPath, "x\n", true),
		file("webapp", escape, "x\n", true),
		file("webapp", inside, "inside, mesh\n", true),
		file("webapp", fifo, "x\n", true),
		file("ro", readonly, "mesh\n", true),
		file("webapp", good, "good, mesh\n", true),
		file("webapp", fresh, "fresh\n", false))
	rep := b.pass(h, d)
	want := map[string]string{
		dirPath:  "is a directory",
		escape:   "outside /etc/webapp: refused, not followed",
		fifo:     "cannot be read as a file: it is a named pipe",
		readonly: "read-only file system",
	}
	for p, reason := range want {
		e := errorOf(rep, p)
		if e == nil || !strings.Contains(e.Reason, reason) || !strings.Contains(e.Reason, p) {
			t.Errorf("%s: want failure %q naming the path, got %+v", p, reason, e)
		}
	}
	if len(rep.Errors) != len(want) {
		t.Errorf("failures %+v, want exactly %d", rep.Errors, len(want))
	}
	if got := b.read(good); got != "good, mesh\n" {
		t.Errorf("good file not converged beside bad ones: %q", got)
	}
	if got := b.read(fresh); got != "fresh\n" {
		t.Errorf("missing file not created beside bad ones: %q", got)
	}
	if got := b.read("/etc/webapp/inside.real"); got != "inside, mesh\n" {
		t.Errorf("symlink inside its directory not followed: %q", got)
	}
	if b.stat(inside).Mode()&os.ModeSymlink == 0 {
		t.Error("a symlink inside its directory was replaced by a file")
	}
	if got := b.read(secret); got != "not the mesh's\n" {
		t.Errorf("escaping symlink followed: %q", got)
	}
	if b.stat(fifo).Mode()&os.ModeNamedPipe == 0 || !b.stat(dirPath).IsDir() {
		t.Error("a bad input was replaced")
	}
	if got := b.read(readonly); got != "on a read-only file system\n" {
		t.Errorf("read-only file: %q", got)
	}
	// Nothing is lost: the read-only file's original was recorded before the write failed.
	wantOriginal(t, h, readonly, "on a read-only file system\n")
	wantOriginal(t, h, good, "good, original\n")
	if _, err := h.Original(escape); err == nil {
		t.Error("an escaping symlink's target was recorded")
	}
}

// A pass with nothing to do writes nothing: no file, no record-store write transaction.
func TestNoOpPassWritesNothing(t *testing.T) {
	b := newBed(t)
	b.place(appConf, predecessorContent)
	b.place("/etc/webapp/old.conf", "held, module gone\n")
	b.place("/etc/db/db.conf", "db, found\n")
	h := b.open()
	noErrors(t, b.pass(h, decl(fsm.Adopted, file("legacy", "/etc/webapp/old.conf", "x\n", false))))
	d := decl(fsm.Adopted,
		file("webapp", appConf, meshContent, false),
		file("webapp", "/etc/webapp/new.conf", "new\n", false),
		with(file("db", "/etc/db/db.conf", "db, mesh\n", true), func(f *catalogue.File) { f.Owner = "65534"; f.Mode = "0600" }),
		with(file("db", "/var/lib/db/key", "k\n", true), func(f *catalogue.File) { f.CreateOnce = true }))
	rep := b.pass(h, d)
	noErrors(t, rep)
	if rep.Changes == 0 {
		t.Fatal("the first pass changed nothing")
	}
	b.place(appConf, "changed by the predecessor\n") // held and changed: reported, not a write

	type snap struct {
		size  int64
		mtime time.Time
	}
	stat := func() map[string]snap {
		out := map[string]snap{}
		for _, dir := range []string{b.root, b.data} {
			filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
				if err == nil {
					out[p] = snap{fi.Size(), fi.ModTime()}
				}
				return nil
			})
		}
		return out
	}
	before, txs := stat(), h.st.updates.Load()
	time.Sleep(20 * time.Millisecond) // so that a write would show in an mtime
	for range 3 {
		rep = b.pass(h, d)
		noErrors(t, rep)
		if rep.Changes != 0 {
			t.Fatalf("a no-op pass reports %d changes", rep.Changes)
		}
	}
	if got := h.st.updates.Load(); got != txs {
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
	if hf := heldOf(rep, appConf); hf == nil || !hf.Changed {
		t.Fatalf("the changed held file is not reported: %+v", rep.Held)
	}
	if hf := heldOf(rep, "/etc/webapp/old.conf"); hf == nil || !hf.Unassigned {
		t.Fatalf("the unassigned held file is not reported: %+v", rep.Held)
	}
}

func BenchmarkNoOpPass(b *testing.B) {
	bd := newBed(b)
	var rs []fsm.Resource
	for i := range 20 {
		p := filepath.Join("/etc/bench", "held", string(rune('a'+i))+".conf")
		bd.place(p, strings.Repeat("predecessor line\n", 100))
		rs = append(rs, file("held", p, "x\n", false))
		rs = append(rs, file("taken", filepath.Join("/etc/bench", "taken", string(rune('a'+i))+".conf"), strings.Repeat("mesh line\n", 100), true))
	}
	h := bd.open()
	d := decl(fsm.Adopted, rs...)
	if rep := h.Reconcile(context.Background(), d); len(rep.Errors) > 0 {
		b.Fatal(rep.Errors)
	}
	txs := h.st.updates.Load()
	b.ResetTimer()
	for b.Loop() {
		if rep := h.Reconcile(context.Background(), d); rep.Changes != 0 {
			b.Fatalf("no-op pass changed %d", rep.Changes)
		}
	}
	if h.st.updates.Load() != txs {
		b.Fatal("no-op passes wrote to the record store")
	}
}

// The loop reconciles on a new declaration and, level-triggered, on its timer.
func TestRunIsLevelTriggered(t *testing.T) {
	b := newBed(t)
	h, err := Open(Config{DataDir: b.data, Root: b.root, Interval: 50 * time.Millisecond, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ctx, cancel := context.WithCancel(context.Background())
	decls := make(chan *fsm.Declaration)
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx, decls) }()

	decls <- decl(fsm.Converged, file("webapp", appConf, meshContent, true))
	eventually(t, "the declared file written", func() bool {
		c, err := os.ReadFile(b.at(appConf))
		return err == nil && string(c) == meshContent
	})
	os.WriteFile(b.at(appConf), []byte("drifted\n"), 0o644)
	eventually(t, "the drifted file converged again by the timer", func() bool {
		c, err := os.ReadFile(b.at(appConf))
		return err == nil && string(c) == meshContent
	})
	decls <- decl(fsm.Converged, file("webapp", appConf, "v2\n", true))
	eventually(t, "a new declaration applied", func() bool {
		c, err := os.ReadFile(b.at(appConf))
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
func (c *countingDriver) Reconcile(_ context.Context, p Pass) Outcome {
	c.calls++
	c.got = p.Resources
	out := Outcome{Detail: map[string]int{"seen": len(p.Resources)}}
	if _, ok, _ := p.Records.Get("first"); !ok {
		p.Records.Put("first", []byte("x"))
		out.Changes++
	}
	return out
}

// Other kinds plug in as drivers; a kind no driver speaks fails by resource, files still converge.
func TestDriversPlugIn(t *testing.T) {
	b := newBed(t)
	drv := &countingDriver{kind: fsm.KindContainer}
	h, err := Open(Config{DataDir: b.data, Root: b.root, Logger: quietLogger(), Drivers: []Driver{drv}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	d := decl(fsm.Converged, file("webapp", appConf, meshContent, true),
		fsm.Resource{Module: "webapp", Kind: fsm.KindContainer, Taken: true, Container: &catalogue.Container{Name: "webapp", Image: "labsvc"}},
		fsm.Resource{Module: "webapp", Kind: fsm.KindOpening, Taken: true, Opening: &catalogue.PortOpening{Port: 8080, Proto: "tcp", From: "anywhere", Path: "forwarded"}})
	rep := h.Reconcile(context.Background(), d)
	if drv.calls != 1 || len(drv.got) != 1 || drv.got[0].Container.Name != "webapp" {
		t.Fatalf("driver called %d times with %+v", drv.calls, drv.got)
	}
	if len(rep.Errors) != 1 || !strings.Contains(rep.Errors[0].Reason, `no driver for resource kind "opening"`) {
		t.Fatalf("errors: %+v", rep.Errors)
	}
	if b.read(appConf) != meshContent {
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
	if _, err := Open(Config{DataDir: t.TempDir(), Root: b.root, Drivers: []Driver{drv, drv}}); err == nil {
		t.Fatal("two drivers for one kind accepted")
	}
}

// The report encodes as the JSON `meshd node show --json` serves.
func TestReportJSON(t *testing.T) {
	b := newBed(t)
	b.place(appConf, predecessorContent)
	h := b.open()
	b.pass(h, decl(fsm.Adopted, file("webapp", appConf, meshContent, false), file("webapp", "/etc/webapp/new.conf", "n\n", false)))
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
