package host

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"meshd/fsm"
	"meshd/host/hosttest"
	"meshd/host/pass"
	"meshd/report"
)

// driftBound is what issue 20 promises: drift on the machine is in the report (held) or put back
// (taken) within a second of the change, where the timer alone took up to its whole interval.
const driftBound = time.Second

// engineStartAllowance is added to driftBound where meshd converges a container back: the bound
// is on meshd noticing and acting, and starting the container is the engine's own work inside
// that pass, which on this loaded two-core machine took up to most of a second by itself (a stop
// converged 1.014 s after it in CI while meshd's pass began well inside the second).
const engineStartAllowance = time.Second

// running is a host whose loop runs, with a timer far longer than any test: whatever it notices
// within a test, a watch noticed.
type running struct {
	t     *testing.T
	h     *Host
	decls chan *fsm.Declaration
}

func runHost(t *testing.T, b *hosttest.Bed, drivers ...Driver) *running {
	t.Helper()
	h, err := Open(Config{DataDir: b.Data, Seal: hosttest.Seal, Root: b.Root, Logger: hosttest.Log(), Interval: time.Hour, Drivers: drivers})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{t: t, h: h, decls: make(chan *fsm.Declaration, 1)}
	done := make(chan struct{})
	go func() { defer close(done); _ = h.Run(ctx, r.decls) }()
	t.Cleanup(func() { cancel(); <-done; h.Close() })
	return r
}

// declare hands the loop d and waits for the pass that reconciled it.
func (r *running) declare(d *fsm.Declaration) report.Report {
	r.t.Helper()
	before := r.h.Report().When
	r.decls <- d
	var rep report.Report
	if _, ok := r.until(30*time.Second, func(x report.Report) bool { rep = x; return x.When.After(before) }); !ok {
		r.t.Fatalf("no pass for a new declaration within 30s")
	}
	return rep
}

// until polls the report every 5ms until ok says so or within has passed, and returns the last
// report, and whether ok said so.
func (r *running) until(within time.Duration, ok func(report.Report) bool) (report.Report, bool) {
	deadline := time.Now().Add(within)
	for {
		rep := r.h.Report()
		if ok(rep) {
			return rep, true
		}
		if time.Now().After(deadline) {
			return rep, false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// seenWithin asserts that ok holds of the report within driftBound of changed (the moment the
// change was made); it waits longer only to say how late it came.
func (r *running) seenWithin(changed time.Time, what string, ok func(report.Report) bool) report.Report {
	r.t.Helper()
	return r.seenWithinBound(changed, driftBound, what, ok)
}

// convergedWithin is seenWithin for drift converged back through the container engine.
func (r *running) convergedWithin(changed time.Time, what string, ok func(report.Report) bool) report.Report {
	r.t.Helper()
	return r.seenWithinBound(changed, driftBound+engineStartAllowance, what, ok)
}

func (r *running) seenWithinBound(changed time.Time, bound time.Duration, what string, ok func(report.Report) bool) report.Report {
	r.t.Helper()
	rep, seen := r.until(10*time.Second, ok)
	took := time.Since(changed)
	switch {
	case !seen:
		r.t.Fatalf("%s: not seen within 10s (the bound is %v); last report %+v", what, bound, rep)
	case took > bound:
		r.t.Fatalf("%s: seen after %v, want within %v", what, took.Round(time.Millisecond), bound)
	}
	r.t.Logf("%s: seen after %v", what, took.Round(time.Millisecond))
	return rep
}

// A held file rewritten by something else (the predecessor still writing) is reported changed
// within a second, and never reverted; removed with its directory, reported removed; the
// directory made again and the file written, reported with its new content: the watch survives
// its directory going.
func TestDriftHeldFileReportedAtOnce(t *testing.T) {
	b := hosttest.NewBed(t)
	b.Place(hosttest.AppConf, hosttest.PredecessorContent)
	r := runHost(t, b)
	rep := r.declare(hosttest.Decl(fsm.Adopted, hosttest.File("webapp", hosttest.AppConf, hosttest.MeshContent, false)))
	hosttest.NoErrors(t, rep)
	if hf := hosttest.HeldOf(rep, hosttest.AppConf); hf == nil || hf.Changed {
		t.Fatalf("found file not held as it is: %+v", hf)
	}

	const stillWriting = "listen 8080\n# the predecessor is still writing\n"
	at := time.Now()
	if err := os.WriteFile(b.At(hosttest.AppConf), []byte(stillWriting), 0o644); err != nil {
		t.Fatal(err)
	}
	r.seenWithin(at, "held file rewritten", func(rep report.Report) bool {
		hf := hosttest.HeldOf(rep, hosttest.AppConf)
		return hf != nil && hf.Changed && hf.Reason == report.ChangedBySomethingElse && hf.CurrentHash == pass.HashOf([]byte(stillWriting))
	})
	if got := b.Read(hosttest.AppConf); got != stillWriting {
		t.Fatalf("a held file that changed was reverted: %q", got)
	}

	at = time.Now()
	if err := os.RemoveAll(filepath.Dir(b.At(hosttest.AppConf))); err != nil {
		t.Fatal(err)
	}
	r.seenWithin(at, "held file's directory removed", func(rep report.Report) bool {
		hf := hosttest.HeldOf(rep, hosttest.AppConf)
		return hf != nil && hf.Changed && hf.Reason == report.RemovedBySomethingElse
	})

	const again = "listen 8080\n# back after its directory was removed\n"
	at = time.Now()
	if err := os.MkdirAll(filepath.Dir(b.At(hosttest.AppConf)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b.At(hosttest.AppConf), []byte(again), 0o644); err != nil {
		t.Fatal(err)
	}
	r.seenWithin(at, "held file written again in its directory made again", func(rep report.Report) bool {
		hf := hosttest.HeldOf(rep, hosttest.AppConf)
		return hf != nil && hf.Changed && hf.CurrentHash == pass.HashOf([]byte(again))
	})
	if got := b.Read(hosttest.AppConf); got != again {
		t.Fatalf("a held file was touched: %q", got)
	}
}

// A taken file edited by hand is converged back within a second; so is one removed with its
// directory. The pass that follows meshd's own write writes nothing, and a drift pass with
// nothing to do writes nothing.
func TestDriftTakenFileConvergedAtOnce(t *testing.T) {
	hosttest.RequireChown(t)
	b := hosttest.NewBed(t)
	r := runHost(t, b)
	rep := r.declare(hosttest.Decl(fsm.Adopted, hosttest.File("webapp", hosttest.AppConf, hosttest.MeshContent, true)))
	hosttest.NoErrors(t, rep)
	if got := b.Read(hosttest.AppConf); got != hosttest.MeshContent {
		t.Fatalf("taken file not written: %q", got)
	}

	at := time.Now()
	if err := os.WriteFile(b.At(hosttest.AppConf), []byte("edited by hand\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r.seenWithin(at, "taken file edited by hand", func(report.Report) bool {
		c, err := os.ReadFile(b.At(hosttest.AppConf))
		return err == nil && string(c) == hosttest.MeshContent
	})

	at = time.Now()
	if err := os.RemoveAll(filepath.Dir(b.At(hosttest.AppConf))); err != nil {
		t.Fatal(err)
	}
	r.seenWithin(at, "taken file's directory removed", func(report.Report) bool {
		c, err := os.ReadFile(b.At(hosttest.AppConf))
		return err == nil && string(c) == hosttest.MeshContent
	})

	// Settled: no pass for five gaps, so meshd's own write does not keep waking passes. Whether
	// that write raised one more pass depends on whether the directory's new watch was in place
	// before the rename (the pass that made the directory adds it); if it did, that pass found
	// nothing to do.
	converged := r.h.Report()
	settled, ok := r.until(10*time.Second, func(rep report.Report) bool { return time.Since(rep.When) > 5*driftMinGap })
	if !ok {
		t.Fatalf("the host did not settle after converging back: last report %+v", settled)
	}
	if settled.When.After(converged.When) && settled.Changes != 0 {
		t.Fatalf("the pass after meshd's own write changed %d things: %+v", settled.Changes, settled)
	}
	// A change that is no drift (the mode set again to what it is) wakes a pass, which writes
	// nothing.
	writes := r.h.RecordWrites()
	at = time.Now()
	if err := os.Chmod(b.At(hosttest.AppConf), 0o644); err != nil {
		t.Fatal(err)
	}
	rep = r.seenWithin(at, "a pass after an attribute event", func(rep report.Report) bool { return rep.When.After(settled.When) })
	if rep.Changes != 0 || r.h.RecordWrites() != writes {
		t.Fatalf("a drift pass with nothing to do changed %d and wrote %d records", rep.Changes, r.h.RecordWrites()-writes)
	}
}

// The watches follow the declaration: a module assigned later has its files watched (its
// directory missing until the host creates it), one unassigned has the files the host created
// removed and no longer watched, while a held file stays watched (it is still reported).
func TestDriftWatchesFollowTheDeclaration(t *testing.T) {
	hosttest.RequireChown(t)
	b := hosttest.NewBed(t)
	b.Place(hosttest.AppConf, hosttest.PredecessorContent)
	r := runHost(t, b)
	webapp := hosttest.File("webapp", hosttest.AppConf, hosttest.MeshContent, false)
	r.declare(hosttest.Decl(fsm.Adopted, webapp))

	const notes = "/srv/notes/conf.d/notes.conf"
	rep := r.declare(hosttest.Decl(fsm.Adopted, webapp, hosttest.File("notes", notes, "notes\n", true)))
	hosttest.NoErrors(t, rep)
	at := time.Now()
	if err := os.WriteFile(b.At(notes), []byte("by hand\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r.seenWithin(at, "file of a module assigned later, edited by hand", func(report.Report) bool {
		c, err := os.ReadFile(b.At(notes))
		return err == nil && string(c) == "notes\n"
	})

	// webapp unassigned (its file held, so kept and still reported), notes unassigned (its file
	// removed).
	rep = r.declare(hosttest.Decl(fsm.Adopted))
	hosttest.NoErrors(t, rep)
	if !b.Missing(notes) {
		t.Fatal("a created file of an unassigned module was not removed")
	}
	// The loop re-follows the declared paths right after the pass has published its report, so
	// the watched set is polled for (briefly), not read once.
	fw := r.watch(t)
	var notesWatched, heldWatched bool
	for deadline := time.Now().Add(time.Second); ; time.Sleep(5 * time.Millisecond) {
		fw.mu.Lock()
		_, notesWatched = fw.byDir[filepath.Dir(b.At(notes))]
		_, heldWatched = fw.byDir[filepath.Dir(b.At(hosttest.AppConf))]
		fw.mu.Unlock()
		if (!notesWatched && heldWatched) || time.Now().After(deadline) {
			break
		}
	}
	if notesWatched || !heldWatched {
		t.Fatalf("after unassigning: %s watched %v (want not), %s watched %v (want watched)", filepath.Dir(notes), notesWatched, filepath.Dir(hosttest.AppConf), heldWatched)
	}
	at = time.Now()
	if err := os.WriteFile(b.At(hosttest.AppConf), []byte("still writing\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r.seenWithin(at, "held file of an unassigned module rewritten", func(rep report.Report) bool {
		hf := hosttest.HeldOf(rep, hosttest.AppConf)
		return hf != nil && hf.Unassigned && hf.Changed && hf.CurrentHash == pass.HashOf([]byte("still writing\n"))
	})
}

// watch is the running loop's file watch.
func (r *running) watch(t *testing.T) *fileWatch {
	t.Helper()
	r.h.mu.Lock()
	defer r.h.mu.Unlock()
	if r.h.drift == nil || r.h.drift.files == nil {
		t.Fatal("the loop runs no file watch")
	}
	return r.h.drift.files
}

// The file watch alone: only the declared names wake it, not their neighbours; a missing
// directory is watched from above and followed once made; nothing is watched once nothing is
// followed.
func TestFileWatchNamesAndMissingDirectories(t *testing.T) {
	root := t.TempDir()
	var touches atomic.Int64
	fw, err := newFileWatch(root, func() { touches.Add(1) }, hosttest.Log())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); fw.run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	const p = "/etc/app/conf.d/app.conf"
	fw.follow([]string{p})
	fw.mu.Lock()
	_, atRoot := fw.byDir[root]
	fw.mu.Unlock()
	if !atRoot {
		t.Fatalf("with /etc/app missing, %s (the nearest directory there) is not watched: %v", root, fw.byDir)
	}
	woke := func(what string, f func()) {
		t.Helper()
		before := touches.Load()
		f()
		deadline := time.Now().Add(driftBound)
		for touches.Load() == before {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the watch did not wake within %v", what, driftBound)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	full := filepath.Join(root, p)
	woke("the missing directories made", func() {
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
	})
	deadline := time.Now().Add(driftBound)
	for {
		fw.mu.Lock()
		_, ok := fw.byDir[filepath.Dir(full)]
		fw.mu.Unlock()
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the directory made is not watched within %v: %v", driftBound, fw.byDir)
		}
		time.Sleep(5 * time.Millisecond)
	}
	woke("the declared file written", func() {
		if err := os.WriteFile(full, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	// A neighbour (an editor's swap file) is not the declared file: its event wakes nothing.
	fw.mu.Lock()
	wd := fw.byDir[filepath.Dir(full)]
	fw.mu.Unlock()
	if fw.handle(inotifyEvent(wd, unix.IN_CLOSE_WRITE, ".app.conf.swp")) {
		t.Fatal("a neighbour of the declared file woke the watch")
	}
	if !fw.handle(inotifyEvent(wd, unix.IN_CLOSE_WRITE, "app.conf")) {
		t.Fatal("the declared file's event did not wake the watch")
	}

	fw.follow(nil)
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if len(fw.byDir) != 0 || len(fw.wds) != 0 {
		t.Fatalf("nothing followed, still watched: %v", fw.byDir)
	}
}

// inotifyEvent is one event as the kernel lays it out: the header, then the name padded with
// NULs.
func inotifyEvent(wd int, mask uint32, name string) []byte {
	n := (len(name) + 1 + 15) / 16 * 16
	b := make([]byte, unix.SizeofInotifyEvent+n)
	ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
	ev.Wd, ev.Mask, ev.Len = int32(wd), mask, uint32(n)
	copy(b[unix.SizeofInotifyEvent:], name)
	return b
}

// callCounter is a driver that counts its passes, safely read while the loop runs.
type callCounter struct {
	kind  string
	calls atomic.Int64
}

func (c *callCounter) Kind() string { return c.kind }
func (c *callCounter) Reconcile(context.Context, pass.Pass) pass.Outcome {
	n := c.calls.Add(1)
	return pass.Outcome{Detail: map[string]int64{"pass": n}}
}

// A drift pass runs the files and the drivers of the kinds touched only: a held file rewritten
// does not cost the firewall's or the engine's pass, and their parts of the report are kept
// from their last pass; a touch of a driver's kind runs that driver.
func TestDriftPassRunsOnlyTheKindsTouched(t *testing.T) {
	b := hosttest.NewBed(t)
	b.Place(hosttest.AppConf, hosttest.PredecessorContent)
	other := &callCounter{kind: fsm.KindOpening}
	r := runHost(t, b, other)
	rep := r.declare(hosttest.Decl(fsm.Adopted, hosttest.File("webapp", hosttest.AppConf, hosttest.MeshContent, false)))
	if other.calls.Load() != 1 {
		t.Fatalf("the declaration's pass ran the driver %d times", other.calls.Load())
	}
	at := time.Now()
	if err := os.WriteFile(b.At(hosttest.AppConf), []byte("rewritten\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep = r.seenWithin(at, "held file rewritten", func(rep report.Report) bool {
		hf := hosttest.HeldOf(rep, hosttest.AppConf)
		return hf != nil && hf.Changed
	})
	if n := other.calls.Load(); n != 1 {
		t.Fatalf("a file's drift pass ran the %s driver (%d passes)", other.kind, n)
	}
	if d, ok := rep.Kinds[fsm.KindOpening].(map[string]int64); !ok || d["pass"] != 1 {
		t.Fatalf("the %s driver's part of the report was not kept: %+v", other.kind, rep.Kinds)
	}
	r.h.mu.Lock()
	r.h.drift.dr.touch(fsm.KindOpening)
	r.h.mu.Unlock()
	rep = r.seenWithin(time.Now(), "a pass for the kind touched", func(rep report.Report) bool {
		d, ok := rep.Kinds[fsm.KindOpening].(map[string]int64)
		return ok && d["pass"] == 2
	})
	if hf := hosttest.HeldOf(rep, hosttest.AppConf); hf == nil || !hf.Changed {
		t.Fatalf("a driver's drift pass lost the files' part of the report: %+v", rep.Held)
	}
}
