package host

// Unit tests of a staged take across kinds, on the in-memory engine and a temporary root: the
// order (prepare, record, cut over, then write files), a take that cannot prepare touching
// nothing, a cutover that fails putting back what was found, the latest bytes of a held file
// recorded beside its original, and mode and owner kept.

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"meshd/catalogue"
	"meshd/container"
	"meshd/fsm"
)

const (
	takeConf       = "/etc/web/web.conf"
	takeFoundBytes = "predecessor's conf\n"
)

// takeBed is a node with a held container (web, image web:1) and a held file of module webapp.
func takeBed(t *testing.T) (*Host, *fakeEngine, string, string) {
	t.Helper()
	f := newFakeEngine("web:1", "web:2")
	h, root := unitHost(t, newContainerDriver(f, unitLog()))
	foundID := f.run(unitFound("web", "web:1", "old"))
	unitPlace(t, root, takeConf, takeFoundBytes)
	if err := os.Chmod(root+takeConf, 0o640); err != nil {
		t.Fatal(err)
	}
	rep := h.Reconcile(unitCtx(t), takeDecl(false))
	unitNoErrors(t, rep)
	if heldIn(rep, takeConf) == nil || unitCtrView(t, rep, "web").State != ContainerHeld {
		t.Fatalf("not held before the take: %+v", rep)
	}
	f.takeOps()
	return h, f, root, foundID
}

func takeDecl(taken bool, more ...fsm.Resource) *fsm.Declaration {
	return unitDecl(fsm.Adopted, append([]fsm.Resource{unitCtr("webapp", "web", "web:2", "new", taken),
		unitFile("webapp", takeConf, "meshd's conf\n", taken)}, more...)...)
}

// A take prepares, records, cuts the container over, and only then writes the files; the replaced
// container is kept stopped aside; the held file's latest bytes, mode and owner are recorded.
func TestUnitTakeStagedOrder(t *testing.T) {
	h, f, root, foundID := takeBed(t)
	unitPlace(t, root, takeConf, "edited by hand while held\n") // the latest bytes differ,
	if err := os.Chmod(root+takeConf, 0o600); err != nil {      // and its mode
		t.Fatal(err)
	}
	var atStart []string
	f.onStart = func(name string) { atStart = append(atStart, name+": "+unitRead(t, root, takeConf)) }

	rep := h.Reconcile(unitCtx(t), takeDecl(true))
	unitNoErrors(t, rep)
	unitOps(t, f, unitTakeOps("web", foundID)...)
	if want := []string{"web: edited by hand while held\n"}; !slices.Equal(atStart, want) {
		t.Fatalf("the file when the new container started: %q, want %q (files are written after the containers)", atStart, want)
	}
	if unitRead(t, root, takeConf) != "meshd's conf\n" || writtenOf(rep, takeConf) == nil {
		t.Fatalf("file not taken: %q %+v", unitRead(t, root, takeConf), rep.Written)
	}
	aside, ok := f.get(ctrAsideName("web", foundID))
	if !ok || aside.running || aside.id != foundID {
		t.Fatalf("the replaced container is not kept stopped aside: %+v, %v", aside, ok)
	}
	if v := unitCtrView(t, rep, "web"); v.State != ContainerReplaced || v.Aside != ctrAsideName("web", foundID) || !v.Running {
		t.Fatalf("taken container: %+v", v)
	}
	cf, err := h.ContainerFound("web")
	if err != nil || cf.Aside != ctrAsideName("web", foundID) || cf.ReplacedID != foundID || !strings.Contains(string(cf.Original), foundID) || cf.TakeUnderWay {
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
	rep = h.Reconcile(unitCtx(t), takeDecl(true))
	unitNoErrors(t, rep)
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
			rep := h.Reconcile(unitCtx(t), takeDecl(true))
			if len(rep.Errors) == 0 || !strings.Contains(rep.Errors[0].Reason, "take not prepared, nothing touched") {
				t.Fatalf("errors: %+v", rep.Errors)
			}
			if ops := f.takeOps(); len(ops) != 0 {
				t.Fatalf("the engine was changed: %q", ops)
			}
			if ctr, _ := f.get("web"); ctr.id != foundID || !ctr.running {
				t.Fatalf("the found container: %+v", ctr)
			}
			if unitRead(t, root, takeConf) != takeFoundBytes || heldIn(rep, takeConf) == nil || writtenOf(rep, takeConf) != nil {
				t.Fatalf("the held file was touched: %q, %+v", unitRead(t, root, takeConf), rep)
			}
			if !reasonNames(rep, fsm.KindFile+":"+takeConf, "did not cut over") {
				t.Fatalf("the file's error does not say the take did not cut over: %+v", rep.Errors)
			}
		})
	}
}

// A found container that restarts by itself is kept aside with restart policy "no", so that a
// reboot does not start it beside its replacement; a failed cutover gives its policy back.
func TestUnitTakeAsideDoesNotRestart(t *testing.T) {
	f := newFakeEngine("web:1", "web:2")
	h, _ := unitHost(t, newContainerDriver(f, unitLog()))
	found := unitFound("web", "web:1", "old")
	found.Restart = container.RestartAlways
	foundID := f.run(found)
	unitNoErrors(t, h.Reconcile(unitCtx(t), unitDecl(fsm.Adopted, unitCtr("webapp", "web", "web:2", "new", false))))
	f.takeOps()

	f.failStart["web:2"] = errors.New("port is already allocated")
	h.Reconcile(unitCtx(t), unitDecl(fsm.Adopted, unitCtr("webapp", "web", "web:2", "new", true)))
	if c, _ := f.get("web"); c.id != foundID || !c.running || c.spec.Restart != container.RestartAlways {
		t.Fatalf("after a failed cutover: %+v", c)
	}
	delete(f.failStart, "web:2")
	h.drivers[0].(*ContainerDriver).now = func() time.Time { return time.Now().Add(time.Minute) }
	unitNoErrors(t, h.Reconcile(unitCtx(t), unitDecl(fsm.Adopted, unitCtr("webapp", "web", "web:2", "new", true))))
	aside, _ := f.get(ctrAsideName("web", foundID))
	if aside.id != foundID || aside.running || aside.spec.Restart != container.RestartNo {
		t.Fatalf("kept aside: %+v", aside)
	}
	if cf, err := h.ContainerFound("web"); err != nil || cf.AsideRestart != container.RestartAlways {
		t.Fatalf("what was found: %+v, %v", cf, err)
	}
}

// The new container does not start: the found one is renamed back and running, the new one
// removed, the file left as it was, and the error names the container and why.
func TestUnitTakeFailedStartPutsBack(t *testing.T) {
	h, f, root, foundID := takeBed(t)
	f.failStart["web:2"] = errors.New("port 8080 is already allocated")
	rep := h.Reconcile(unitCtx(t), takeDecl(true))
	if !reasonNames(rep, fsm.KindContainer+":web", "starting the new container") || !reasonNames(rep, fsm.KindContainer+":web", "is back") {
		t.Fatalf("errors: %+v", rep.Errors)
	}
	unitOps(t, f, "prepare web as web.meshd-new", "rename web to "+ctrAsideName("web", foundID),
		"rename web.meshd-new to web", "stop "+ctrAsideName("web", foundID), "remove web", "rename "+ctrAsideName("web", foundID)+" to web", "start web")
	ctr, _ := f.get("web")
	if ctr.id != foundID || !ctr.running || len(f.ctrs) != 1 {
		t.Fatalf("after a failed cutover: web %+v, containers %d", ctr, len(f.ctrs))
	}
	if unitRead(t, root, takeConf) != takeFoundBytes {
		t.Fatal("the file was written though the container's cutover failed")
	}
	if v := unitCtrView(t, rep, "web"); v.State != ContainerHeld {
		t.Fatalf("container after a failed take: %+v", v)
	}
	// The next passes do not stop the found container again at once: the take waits.
	rep = h.Reconcile(unitCtx(t), takeDecl(true))
	if !reasonNames(rep, fsm.KindContainer+":web", "the take waits until") {
		t.Fatalf("the pass after a failed cutover: %+v", rep.Errors)
	}
	unitOps(t, f)
	// Once the cause is gone and the wait over, the take goes through.
	delete(f.failStart, "web:2")
	h.drivers[0].(*ContainerDriver).now = func() time.Time { return time.Now().Add(time.Minute) }
	rep = h.Reconcile(unitCtx(t), takeDecl(true))
	unitNoErrors(t, rep)
	if unitRead(t, root, takeConf) != "meshd's conf\n" || unitCtrView(t, rep, "web").State != ContainerReplaced {
		t.Fatalf("the take after the cause was removed: %+v", rep)
	}
}

// A file that cannot be written after the containers cut over steps the whole module back: the
// files already written are put back from their latest bytes, the found container is back.
func TestUnitTakeFailedFileStepsBack(t *testing.T) {
	h, f, root, foundID := takeBed(t)
	const second = "/etc/web/second.conf"
	unitPlace(t, root, second, "predecessor's second\n")
	d := takeDecl(false, unitFile("webapp", second, "meshd's second\n", false))
	unitNoErrors(t, h.Reconcile(unitCtx(t), d))
	f.takeOps()
	// When the new container starts, something puts a directory where the second file is: its
	// write cannot rename over it.
	f.onStart = func(string) {
		_ = os.Remove(root + second)
		_ = os.MkdirAll(filepath.Join(root+second, "x"), 0o755)
		f.onStart = nil
	}
	rep := h.Reconcile(unitCtx(t), takeDecl(true, unitFile("webapp", second, "meshd's second\n", true)))
	if !reasonNames(rep, fsm.KindFile+":"+second, "the take of module webapp was stepped back") {
		t.Fatalf("errors: %+v", rep.Errors)
	}
	if got := unitRead(t, root, takeConf); got != takeFoundBytes {
		t.Fatalf("the first file was not put back: %q", got)
	}
	if fi, err := os.Stat(root + takeConf); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("the first file's mode was not put back: %v, %v", fi.Mode(), err)
	}
	ctr, _ := f.get("web")
	if ctr.id != foundID || !ctr.running {
		t.Fatalf("the found container is not back: %+v", ctr)
	}
	if _, ok := f.get(ctrAsideName("web", foundID)); ok {
		t.Fatal("the found container is still aside")
	}
	if hf := heldIn(rep, takeConf); hf == nil {
		t.Fatalf("the first file is not reported held again: %+v", rep.Held)
	}
	// The next pass waits before it stops the found container again.
	rep = h.Reconcile(unitCtx(t), takeDecl(true, unitFile("webapp", second, "meshd's second\n", true)))
	if !reasonNames(rep, fsm.KindContainer+":web", "the take waits until") || !reasonNames(rep, fsm.KindContainer+":web", "stepped back") {
		t.Fatalf("the pass after a step back: %+v", rep.Errors)
	}
	if ctr, _ := f.get("web"); ctr.id != foundID || !ctr.running {
		t.Fatalf("the found container was touched again: %+v", ctr)
	}
}

func reasonNames(rep Report, resource, what string) bool {
	for _, e := range rep.Errors {
		if e.Resource == resource && strings.Contains(e.Reason, what) {
			return true
		}
	}
	return false
}

// crashed is what a unit test's crash point panics with.
type crashed struct{ point string }

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
			arm := func(c *crasher) {
				c.at, c.nth, c.hits = point, 1, 0
				c.kill = func() { panic(crashed{point}) }
			}
			d := newContainerDriver(f, unitLog())
			dc := &crasher{log: unitLog()}
			arm(dc)
			d.crash = dc.reach
			h, err := Open(Config{DataDir: data, Root: root, Logger: unitLog(), Drivers: []Driver{d}})
			if err != nil {
				t.Fatal(err)
			}
			arm(h.crasher)
			func() {
				defer func() {
					if r := recover(); r != (crashed{point}) {
						t.Fatalf("crash point %s not reached (%v)", point, r)
					}
				}()
				h.Reconcile(unitCtx(t), takeDecl(true))
			}()
			h.Close()

			// Restarted, without the crash point.
			h, err = Open(Config{DataDir: data, Root: root, Logger: unitLog(), Drivers: []Driver{newContainerDriver(f, unitLog())}})
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			rep := h.Reconcile(unitCtx(t), takeDecl(true))
			unitNoErrors(t, rep)
			ctr, _ := f.get("web")
			if ctr.spec.Image != "web:2" || !ctr.running {
				t.Fatalf("after restart web is %+v, want the declared container running", ctr)
			}
			aside, ok := f.get(ctrAsideName("web", foundID))
			if !ok || aside.id != foundID || aside.running {
				t.Fatalf("after restart the found container is not stopped aside: %+v %v", aside, ok)
			}
			if _, ok := f.get(ctrStagedName("web")); ok || len(f.ctrs) != 2 {
				t.Fatalf("containers left after restart: %d", len(f.ctrs))
			}
			if got := unitRead(t, root, takeConf); got != "meshd's conf\n" {
				t.Fatalf("file after restart: %q", got)
			}
			if b, _ := h.Original(takeConf); string(b) != takeFoundBytes {
				t.Fatalf("original after restart: %q", b)
			}
			if b, err := h.Latest(takeConf); err != nil || string(b) != takeFoundBytes {
				t.Fatalf("latest bytes after restart: %q, %v", b, err)
			}
			if cf, err := h.ContainerFound("web"); err != nil || cf.TakeUnderWay || cf.Aside != ctrAsideName("web", foundID) || cf.State != ContainerReplaced {
				t.Fatalf("container record after restart: %+v, %v", cf, err)
			}
			if rep := h.Reconcile(unitCtx(t), takeDecl(true)); rep.Changes != 0 || len(rep.Errors) > 0 {
				t.Fatalf("the pass after recovery changed %d (errors %+v)", rep.Changes, rep.Errors)
			}
		})
	}
}

// The preview of a take reads the node's report and the declaration with the module taken: the
// held container (found id, image → new image, differences, where it will be kept), the held file
// (recorded and current hash, changed by something else), what is created, what starts to be
// guarded. It changes nothing.
func TestUnitTakePreview(t *testing.T) {
	h, f, root, foundID := takeBed(t)
	unitPlace(t, root, takeConf, "edited by hand while held\n")
	fresh := unitFile("webapp", "/etc/web/fresh.conf", "new\n", false)
	guard := fsm.Resource{Module: "webapp", Kind: fsm.KindOpening, Opening: &catalogue.PortOpening{Port: 6379, Proto: "tcp", From: "private", Path: "incoming", Guarded: true}}
	rep := h.Reconcile(unitCtx(t), takeDecl(false, fresh))
	unitNoErrors(t, rep)
	f.takeOps()
	// Through JSON, as a server holds another node's report.
	b, _ := json.Marshal(rep)
	var remote Report
	if err := json.Unmarshal(b, &remote); err != nil {
		t.Fatal(err)
	}
	notCreated := unitCtr("other", "notyet", "web:2", "x", true)
	pv, err := PreviewTake(&remote, takeDecl(true, ctTakenUnit(fresh), ctTakenUnit(guard), notCreated, ctTakenUnit(unitCtr("webapp", "db", "web:2", "x", false))), "webapp")
	if err != nil {
		t.Fatal(err)
	}
	if len(pv.Containers) != 1 {
		t.Fatalf("containers: %+v", pv.Containers)
	}
	c := pv.Containers[0]
	if c.Name != "web" || c.FoundID != foundID || c.Image != "web:1" || c.NewImage != "web:2" || c.Aside != ctrAsideName("web", foundID) ||
		!slices.Contains(c.Differences, "image web:1 → web:2") || !slices.Contains(c.Differences, "env GREETING") {
		t.Fatalf("container preview: %+v", c)
	}
	if len(pv.Files) != 1 || pv.Files[0].Path != takeConf || !pv.Files[0].Changed || pv.Files[0].RecordedHash == pv.Files[0].CurrentHash {
		t.Fatalf("file preview: %+v", pv.Files)
	}
	// fresh.conf was created at assign already; db is not there yet.
	if !slices.Equal(pv.Created, []string{"container:db"}) {
		t.Fatalf("created: %q", pv.Created)
	}
	if !slices.Equal(pv.Guarded, []string{"6379/tcp incoming from private"}) {
		t.Fatalf("guarded: %q", pv.Guarded)
	}
	unitOps(t, f)
	if _, err := PreviewTake(nil, takeDecl(true), "webapp"); err == nil || !strings.Contains(err.Error(), "no host report") {
		t.Fatalf("a preview without a report: %v", err)
	}
	// A report of a pass made before webapp was assigned (right after `module assign`) holds
	// nothing of webapp's: the preview refuses it, naming the node, the module and the report's
	// time, rather than call webapp's found file and container "created".
	before := h.Reconcile(unitCtx(t), unitDecl(fsm.Adopted))
	var behind *ReportBehindError
	if _, err := PreviewTake(&before, takeDecl(true), "webapp"); !errors.As(err, &behind) ||
		!strings.Contains(err.Error(), "node n1's latest report (of "+before.When.Format(time.RFC3339)) || !strings.Contains(err.Error(), "before webapp was assigned") {
		t.Fatalf("a preview from a report made before the assignment: %v", err)
	}
	// An older agent's report says nothing of what was assigned: read as it is.
	before.Assigned = nil
	if _, err := PreviewTake(&before, takeDecl(true), "webapp"); err != nil {
		t.Fatalf("a preview from a report without assignments: %v", err)
	}
}

func ctTakenUnit(r fsm.Resource) fsm.Resource { r.Taken = true; return r }

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
		rec := &containerRecord{TakeFailedFor: "k", TakeFailures: c.failures, TakeFailedAt: at}
		if _, wait := takeWaits(rec, c.key, at.Add(c.after)); wait != c.wait {
			t.Errorf("%d failures, key %s, %s after: wait %v, want %v", c.failures, c.key, c.after, wait, c.wait)
		}
	}
}
