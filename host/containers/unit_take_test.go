package containers

// Unit tests of a staged take across kinds, on the in-memory engine and a temporary root: the
// order (prepare, record, cut over, then write files), a take that cannot prepare touching
// nothing, a cutover that fails putting back what was found, the latest bytes of a held file
// recorded beside its original, and mode and owner kept.

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"meshd/ctrspec"
	"meshd/fsm"
	"meshd/host"
	"meshd/host/hosttest"
	"meshd/host/hosttest/drivertest"
	"meshd/report"
)

const (
	takeConf       = "/etc/web/web.conf"
	takeFoundBytes = "predecessor's conf\n"
)

// takeBed is a node with a held container (web, image web:1) and a held file of module webapp.
func takeBed(t *testing.T) (*host.Host, *fakeEngine, string, string) {
	t.Helper()
	f := newFakeEngine("web:1", "web:2")
	h, root := drivertest.Open(t, newDriver(f, hosttest.Log()))
	foundID := f.run(unitFound("web", "web:1", "old"))
	hosttest.PlaceAt(t, root, takeConf, takeFoundBytes)
	if err := os.Chmod(root+takeConf, 0o640); err != nil {
		t.Fatal(err)
	}
	rep := h.Reconcile(hosttest.Ctx(t), takeDecl(false))
	hosttest.NoErrorsFatal(t, rep)
	if hosttest.HeldOf(rep, takeConf) == nil || hosttest.ContainerOf(t, rep, "web").State != report.ContainerHeld {
		t.Fatalf("not held before the take: %+v", rep)
	}
	f.takeOps()
	return h, f, root, foundID
}

func takeDecl(taken bool, more ...fsm.Resource) *fsm.Declaration {
	return hosttest.DeclUntaken(fsm.Adopted, append([]fsm.Resource{declContainer("webapp", "web", "web:2", "new", taken),
		hosttest.OwnFile("webapp", takeConf, "meshd's conf\n", taken)}, more...)...)
}

// A take prepares, records, cuts the container over, and only then writes the files; the replaced
// container is kept stopped aside; the held file's latest bytes, mode and owner are recorded.
func TestUnitTakeStagedOrder(t *testing.T) {
	h, f, root, foundID := takeBed(t)
	hosttest.PlaceAt(t, root, takeConf, "edited by hand while held\n") // the latest bytes differ,
	if err := os.Chmod(root+takeConf, 0o600); err != nil {             // and its mode
		t.Fatal(err)
	}
	var atStart []string
	f.onStart = func(name string) { atStart = append(atStart, name+": "+hosttest.ReadAt(t, root, takeConf)) }

	rep := h.Reconcile(hosttest.Ctx(t), takeDecl(true))
	hosttest.NoErrorsFatal(t, rep)
	unitOps(t, f, unitTakeOps("web", foundID)...)
	if want := []string{"web: edited by hand while held\n"}; !slices.Equal(atStart, want) {
		t.Fatalf("the file when the new container started: %q, want %q (files are written after the containers)", atStart, want)
	}
	if hosttest.ReadAt(t, root, takeConf) != "meshd's conf\n" || hosttest.WrittenOf(rep, takeConf) == nil {
		t.Fatalf("file not taken: %q %+v", hosttest.ReadAt(t, root, takeConf), rep.Written)
	}
	aside, ok := f.get(report.AsideName("web", foundID))
	if !ok || aside.running || aside.id != foundID {
		t.Fatalf("the replaced container is not kept stopped aside: %+v, %v", aside, ok)
	}
	if v := hosttest.ContainerOf(t, rep, "web"); v.State != report.ContainerReplaced || v.Aside != report.AsideName("web", foundID) || !v.Running {
		t.Fatalf("taken container: %+v", v)
	}
	cf, err := h.ContainerFound("web")
	if err != nil || cf.Aside != report.AsideName("web", foundID) || cf.ReplacedID != foundID || !strings.Contains(string(cf.Original), foundID) || cf.TakeUnderWay {
		t.Fatalf("what was found of web: %+v, %v", cf, err)
	}

	// Both kept: the original as found, and the last seen before the cutover, each with its mode and owner.
	if b, _ := h.Original(takeConf); string(b) != takeFoundBytes {
		t.Fatalf("original: %q", b)
	}
	if b, err := h.Latest(takeConf); err != nil || string(b) != "edited by hand while held\n" {
		t.Fatalf("latest bytes: %q, %v", b, err)
	}
	fo, err := h.FileOriginal(takeConf)
	if err != nil || fo.Mode != "0640" || fo.UID == nil || *fo.UID != os.Getuid() || fo.Latest == nil || !fo.Latest.ChangedSinceFound || fo.Latest.Mode != "0600" {
		t.Fatalf("file original: %+v (latest %+v), %v", fo, fo.Latest, err)
	}

	// Taken: the next pass does nothing, and the aside container stays as it is.
	rep = h.Reconcile(hosttest.Ctx(t), takeDecl(true))
	hosttest.NoErrorsFatal(t, rep)
	unitOps(t, f)
	if rep.Changes != 0 {
		t.Fatalf("the pass after a take changed %d", rep.Changes)
	}
}

// A take that cannot prepare (image missing, configuration refused) touches nothing: the found
// container runs on, the held file keeps its bytes, both are still held.
func TestUnitTakeNotPreparedTouchesNothing(t *testing.T) {
	for _, c := range []struct {
		name   string
		break_ func(f *fakeEngine)
	}{
		{"image missing", func(f *fakeEngine) { delete(f.images, "web:2") }},
		{"create refused", func(f *fakeEngine) { f.failPrepare = errors.New("port is already allocated") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, f, root, foundID := takeBed(t)
			c.break_(f)
			rep := h.Reconcile(hosttest.Ctx(t), takeDecl(true))
			if len(rep.Errors) == 0 || !strings.Contains(rep.Errors[0].Reason, "take not prepared, nothing touched") {
				t.Fatalf("errors: %+v", rep.Errors)
			}
			if ops := f.takeOps(); len(ops) != 0 {
				t.Fatalf("the engine was changed: %q", ops)
			}
			if ctr, _ := f.get("web"); ctr.id != foundID || !ctr.running {
				t.Fatalf("the found container: %+v", ctr)
			}
			if hosttest.ReadAt(t, root, takeConf) != takeFoundBytes || hosttest.HeldOf(rep, takeConf) == nil || hosttest.WrittenOf(rep, takeConf) != nil {
				t.Fatalf("the held file was touched: %q, %+v", hosttest.ReadAt(t, root, takeConf), rep)
			}
			if !hosttest.ReasonNames(rep, fsm.KindFile+":"+takeConf, "did not cut over") {
				t.Fatalf("the file's error does not say the take did not cut over: %+v", rep.Errors)
			}
		})
	}
}

// A found container that restarts by itself is kept aside with restart policy "no", so that a
// reboot does not start it beside its replacement; a failed cutover gives its policy back.
func TestUnitTakeAsideDoesNotRestart(t *testing.T) {
	f := newFakeEngine("web:1", "web:2")
	h, _ := drivertest.Open(t, newDriver(f, hosttest.Log()))
	found := unitFound("web", "web:1", "old")
	found.Restart = ctrspec.RestartAlways
	foundID := f.run(found)
	hosttest.NoErrorsFatal(t, h.Reconcile(hosttest.Ctx(t), hosttest.DeclUntaken(fsm.Adopted, declContainer("webapp", "web", "web:2", "new", false))))
	f.takeOps()

	f.failStart["web:2"] = errors.New("port is already allocated")
	h.Reconcile(hosttest.Ctx(t), hosttest.DeclUntaken(fsm.Adopted, declContainer("webapp", "web", "web:2", "new", true)))
	if c, _ := f.get("web"); c.id != foundID || !c.running || c.spec.Restart != ctrspec.RestartAlways {
		t.Fatalf("after a failed cutover: %+v", c)
	}
	delete(f.failStart, "web:2")
	h.Driver(fsm.KindContainer).(*Driver).now = func() time.Time { return time.Now().Add(time.Minute) }
	hosttest.NoErrorsFatal(t, h.Reconcile(hosttest.Ctx(t), hosttest.DeclUntaken(fsm.Adopted, declContainer("webapp", "web", "web:2", "new", true))))
	aside, _ := f.get(report.AsideName("web", foundID))
	if aside.id != foundID || aside.running || aside.spec.Restart != ctrspec.RestartNo {
		t.Fatalf("kept aside: %+v", aside)
	}
	if cf, err := h.ContainerFound("web"); err != nil || cf.AsideRestart != ctrspec.RestartAlways {
		t.Fatalf("what was found: %+v, %v", cf, err)
	}
}

// The new container does not start: the found one is renamed back and running, the new one
// removed, the file left as it was, and the error names the container and why.
func TestUnitTakeFailedStartPutsBack(t *testing.T) {
	h, f, root, foundID := takeBed(t)
	f.failStart["web:2"] = errors.New("port 8080 is already allocated")
	rep := h.Reconcile(hosttest.Ctx(t), takeDecl(true))
	if !hosttest.ReasonNames(rep, fsm.KindContainer+":web", "starting the new container") || !hosttest.ReasonNames(rep, fsm.KindContainer+":web", "is back") {
		t.Fatalf("errors: %+v", rep.Errors)
	}
	unitOps(t, f, "prepare web as web.meshd-new", "rename web to "+report.AsideName("web", foundID),
		"rename web.meshd-new to web", "stop "+report.AsideName("web", foundID), "remove web", "rename "+report.AsideName("web", foundID)+" to web", "start web")
	ctr, _ := f.get("web")
	if ctr.id != foundID || !ctr.running || len(f.ctrs) != 1 {
		t.Fatalf("after a failed cutover: web %+v, containers %d", ctr, len(f.ctrs))
	}
	if hosttest.ReadAt(t, root, takeConf) != takeFoundBytes {
		t.Fatal("the file was written though the container's cutover failed")
	}
	if v := hosttest.ContainerOf(t, rep, "web"); v.State != report.ContainerHeld {
		t.Fatalf("container after a failed take: %+v", v)
	}
	// The next passes do not stop the found container again at once: the take waits.
	rep = h.Reconcile(hosttest.Ctx(t), takeDecl(true))
	if !hosttest.ReasonNames(rep, fsm.KindContainer+":web", "the take waits until") {
		t.Fatalf("the pass after a failed cutover: %+v", rep.Errors)
	}
	unitOps(t, f)
	// Once the cause is gone and the wait over, the take goes through.
	delete(f.failStart, "web:2")
	h.Driver(fsm.KindContainer).(*Driver).now = func() time.Time { return time.Now().Add(time.Minute) }
	rep = h.Reconcile(hosttest.Ctx(t), takeDecl(true))
	hosttest.NoErrorsFatal(t, rep)
	if hosttest.ReadAt(t, root, takeConf) != "meshd's conf\n" || hosttest.ContainerOf(t, rep, "web").State != report.ContainerReplaced {
		t.Fatalf("the take after the cause was removed: %+v", rep)
	}
}

// A file that cannot be written after the containers cut over steps the whole module back: the
// files already written are put back from their latest bytes, the found container is back.
func TestUnitTakeFailedFileStepsBack(t *testing.T) {
	h, f, root, foundID := takeBed(t)
	const second = "/etc/web/second.conf"
	hosttest.PlaceAt(t, root, second, "predecessor's second\n")
	d := takeDecl(false, hosttest.OwnFile("webapp", second, "meshd's second\n", false))
	hosttest.NoErrorsFatal(t, h.Reconcile(hosttest.Ctx(t), d))
	f.takeOps()
	// When the new container starts, something puts a directory where the second file is: its
	// write cannot rename over it.
	f.onStart = func(string) {
		_ = os.Remove(root + second)
		_ = os.MkdirAll(filepath.Join(root+second, "x"), 0o755)
		f.onStart = nil
	}
	rep := h.Reconcile(hosttest.Ctx(t), takeDecl(true, hosttest.OwnFile("webapp", second, "meshd's second\n", true)))
	if !hosttest.ReasonNames(rep, fsm.KindFile+":"+second, "the take of module webapp was stepped back") {
		t.Fatalf("errors: %+v", rep.Errors)
	}
	if got := hosttest.ReadAt(t, root, takeConf); got != takeFoundBytes {
		t.Fatalf("the first file was not put back: %q", got)
	}
	if fi, err := os.Stat(root + takeConf); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("the first file's mode was not put back: %v, %v", fi.Mode(), err)
	}
	ctr, _ := f.get("web")
	if ctr.id != foundID || !ctr.running {
		t.Fatalf("the found container is not back: %+v", ctr)
	}
	if _, ok := f.get(report.AsideName("web", foundID)); ok {
		t.Fatal("the found container is still aside")
	}
	if hf := hosttest.HeldOf(rep, takeConf); hf == nil {
		t.Fatalf("the first file is not reported held again: %+v", rep.Held)
	}
	// The next pass waits before it stops the found container again.
	rep = h.Reconcile(hosttest.Ctx(t), takeDecl(true, hosttest.OwnFile("webapp", second, "meshd's second\n", true)))
	if !hosttest.ReasonNames(rep, fsm.KindContainer+":web", "the take waits until") || !hosttest.ReasonNames(rep, fsm.KindContainer+":web", "stepped back") {
		t.Fatalf("the pass after a step back: %+v", rep.Errors)
	}
	if ctr, _ := f.get("web"); ctr.id != foundID || !ctr.running {
		t.Fatalf("the found container was touched again: %+v", ctr)
	}
}

// Crash safety of a take, on the in-memory engine: the pass is cut short at each step (the
// record store and the engine keep what was done, as a SIGKILL leaves them); a new host on the
// same records finishes the take — the taken state, never a mixture: the new container running
// at the name, the found one stopped aside, the file written, nothing staged left — and the pass
// after that has nothing to do.
func TestUnitTakeCrashSafety(t *testing.T) {
	points := []string{"take.before-record-latest", "take.after-record-latest",
		"take.container.after-prepare", "take.container.after-record-cutover",
		"take.container.after-move-aside", "take.container.after-move-new", "take.container.after-stop",
		"take.before-write-files", "take.after-record-written", "take.after-temp-write", "take.after-rename"}
	for _, point := range points {
		t.Run(point, func(t *testing.T) {
			h, f, root, foundID := takeBed(t)
			data := filepath.Join(filepath.Dir(root), "data")
			h.Close()
			d := newDriver(f, hosttest.Log())
			d.crash = hosttest.Armed(point).Reach
			h, err := host.Open(host.Config{DataDir: data, Seal: hosttest.Seal, Root: root, Logger: hosttest.Log(),
				Drivers: []host.Driver{d}, Crasher: hosttest.Armed(point)})
			if err != nil {
				t.Fatal(err)
			}
			func() {
				defer func() {
					if r := recover(); r != (hosttest.Crashed{Point: point}) {
						t.Fatalf("crash point %s not reached (%v)", point, r)
					}
				}()
				h.Reconcile(hosttest.Ctx(t), takeDecl(true))
			}()
			h.Close()

			// Restarted, without the crash point.
			h, err = host.Open(host.Config{DataDir: data, Seal: hosttest.Seal, Root: root, Logger: hosttest.Log(), Drivers: []host.Driver{newDriver(f, hosttest.Log())}})
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			rep := h.Reconcile(hosttest.Ctx(t), takeDecl(true))
			hosttest.NoErrorsFatal(t, rep)
			ctr, _ := f.get("web")
			if ctr.spec.Image != "web:2" || !ctr.running {
				t.Fatalf("after restart web is %+v, want the declared container running", ctr)
			}
			aside, ok := f.get(report.AsideName("web", foundID))
			if !ok || aside.id != foundID || aside.running {
				t.Fatalf("after restart the found container is not stopped aside: %+v %v", aside, ok)
			}
			if _, ok := f.get(stagedName("web")); ok || len(f.ctrs) != 2 {
				t.Fatalf("containers left after restart: %d", len(f.ctrs))
			}
			if got := hosttest.ReadAt(t, root, takeConf); got != "meshd's conf\n" {
				t.Fatalf("file after restart: %q", got)
			}
			if b, _ := h.Original(takeConf); string(b) != takeFoundBytes {
				t.Fatalf("original after restart: %q", b)
			}
			if b, err := h.Latest(takeConf); err != nil || string(b) != takeFoundBytes {
				t.Fatalf("latest bytes after restart: %q, %v", b, err)
			}
			if cf, err := h.ContainerFound("web"); err != nil || cf.TakeUnderWay || cf.Aside != report.AsideName("web", foundID) || cf.State != report.ContainerReplaced {
				t.Fatalf("container record after restart: %+v, %v", cf, err)
			}
			if rep := h.Reconcile(hosttest.Ctx(t), takeDecl(true)); rep.Changes != 0 || len(rep.Errors) > 0 {
				t.Fatalf("the pass after recovery changed %d (errors %+v)", rep.Changes, rep.Errors)
			}
		})
	}
}

// A failed cutover's wait doubles with each failure in a row, up to 30 minutes, and holds only
// for the same declaration and found container.
func TestUnitTakeWaits(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		failures int
		key      string
		after    time.Duration
		wait     bool
	}{
		{0, "k", 0, false},
		{1, "k", 29 * time.Second, true},
		{1, "k", 30 * time.Second, false},
		{1, "other declaration", time.Second, false},
		{2, "k", 59 * time.Second, true},
		{3, "k", 2 * time.Minute, false},
		{20, "k", 29 * time.Minute, true},
		{20, "k", 30 * time.Minute, false},
	} {
		rec := &record{TakeFailedFor: "k", TakeFailures: c.failures, TakeFailedAt: at}
		if _, wait := takeWaits(rec, c.key, at.Add(c.after)); wait != c.wait {
			t.Errorf("%d failures, key %s, %s after: wait %v, want %v", c.failures, c.key, c.after, wait, c.wait)
		}
	}
}
