package containers

// Unit tests of the container kind's decisions and their execution, on the in-memory engine
// (fakes_test.go): every row of docs/architecture.md's "Adopted and converged" for containers,
// without root, in milliseconds. The same rules against the real engine are containers_test.go.

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"meshd/catalogue"
	"meshd/container"
	"meshd/ctrspec"
	"meshd/fsm"
	"meshd/host/hosttest"
	"meshd/host/hosttest/drivertest"
	"meshd/report"
)

// declContainer declares container name of module: image, one env value, one published port.
func declContainer(module, name, image, greeting string, taken bool) fsm.Resource {
	return fsm.Resource{Module: module, Kind: fsm.KindContainer, Taken: taken, Container: &catalogue.Container{
		Name: name, Image: image, Env: map[string]string{"GREETING": greeting}, Ports: []string{"8080:80"}}}
}

// unitFound is what a predecessor left at name: the same shape, none of meshd's labels.
func unitFound(name, image, greeting string) ctrspec.Spec {
	return ctrspec.Spec{Name: name, Image: image, Env: map[string]string{"GREETING": greeting}, Ports: []string{"8080:80"}}
}

// unitTakeOps are the engine calls of a staged take of the found container foundID at name:
// prepared under the staged name, then the cutover.
func unitTakeOps(name, foundID string) []string {
	return []string{"prepare " + name + " as " + stagedName(name),
		"rename " + name + " to " + report.AsideName(name, foundID), "rename " + stagedName(name) + " to " + name,
		"stop " + report.AsideName(name, foundID), "start " + name}
}

func unitOps(t *testing.T, f *fakeEngine, want ...string) {
	t.Helper()
	if got := f.takeOps(); !slices.Equal(got, want) {
		t.Fatalf("engine calls %q, want %q", got, want)
	}
}

// unitOpsAnyOrder is unitOps for calls made side by side: the same calls, in any order.
func unitOpsAnyOrder(t *testing.T, f *fakeEngine, want ...string) {
	t.Helper()
	got := slices.Sorted(slices.Values(f.takeOps()))
	if want = slices.Sorted(slices.Values(want)); !slices.Equal(got, want) {
		t.Fatalf("engine calls %q (sorted), want %q", got, want)
	}
}

// Each row of the container decision, as a pure function.
func TestUnitDecideContainer(t *testing.T) {
	spec := report.SpecOf(declContainer("webapp", "web", "web:2", "new", false))
	same := container.Observed{ID: "c1", ImageRef: "web:2", Running: true,
		Spec: ctrspec.Spec{Ports: []string{"8080:80"}}, Env: map[string]string{"GREETING": "new"}}
	differs := same
	differs.Env = map[string]string{"GREETING": "old"}
	stopped := same
	stopped.Running = false
	labelled := same
	labelled.ID, labelled.Managed, labelled.Module = "c2", true, "webapp"
	labelled.Labels = ctrspec.ManagedLabels("webapp")
	held := &record{State: report.ContainerHeld, ID: "c1", FoundID: "c1", Module: "webapp"}
	created := &record{State: report.ContainerCreated, ID: "c1", Image: "web:2", Module: "webapp"}
	stale := &record{State: report.ContainerCreated, ID: "c0", Image: "web:2", Module: "webapp"}
	cutting := &record{State: report.ContainerHeld, ID: "c1", FoundID: "c1", Module: "webapp",
		Cutover: &cutover{OldID: "c1", WasRunning: true, Aside: "web.meshd-replaced-c1", StagedID: "c3"}}

	for _, c := range []struct {
		name   string
		rec    *record
		o      container.Observed
		exists bool
		taken  bool
		want   action
	}{
		{"adopted: found is held", nil, differs, true, false, action{step: stepHold}},
		{"adopted: held stays held", held, differs, true, false, action{step: stepObserveHeld}},
		{"adopted: held removed by hand stays held", held, container.Observed{}, false, false, action{step: stepObserveHeld}},
		{"missing is created", nil, container.Observed{}, false, false, action{step: stepCreate}},
		{"missing is created, taken", nil, container.Observed{}, false, true, action{step: stepCreate}},
		{"held removed by hand, taken: created", held, container.Observed{}, false, true, action{step: stepCreate}},
		{"taken: found already the declaration is adopted", nil, same, true, true, action{step: stepAdopt, recordFound: true}},
		{"taken: found stopped is adopted and started", nil, stopped, true, true, action{step: stepAdopt, recordFound: true, start: true}},
		{"taken: held already the declaration is adopted", held, same, true, true, action{step: stepAdopt}},
		{"taken: found differing is recorded then replaced", nil, differs, true, true,
			action{step: stepReplace, recordFound: true, diff: []string{"env GREETING: value differs from the declared one"}}},
		{"taken: held differing is replaced", held, differs, true, true,
			action{step: stepReplace, diff: []string{"env GREETING: value differs from the declared one"}}},
		{"the host's, as declared: kept", created, same, true, false, action{step: stepKeep}},
		{"the host's, id moved: record refreshed", stale, same, true, true, action{step: stepKeep, refresh: true}},
		{"the host's, stopped: started", created, stopped, true, true, action{step: stepStart}},
		{"the host's, removed by hand: recreated", created, container.Observed{}, false, true, action{step: stepRecreate}},
		{"the host's, changed by hand: recreated on the real difference", created, differs, true, true,
			action{step: stepConverge, diff: []string{"env GREETING: value differs from the declared one"}}},
		{"labelled, no record: claimed as created", nil, labelled, true, false, action{claim: claimLabelled, step: stepKeep}},
		{"held, taken, labelled with another id: an interrupted take", held, labelled, true, true,
			action{claim: claimInterrupted, step: stepKeep}},
		{"held, taken, moved aside by a take a crash cut short: the take resumed", cutting, container.Observed{}, false, true,
			action{step: stepResume}},
		{"held, taken, stopped by a take a crash cut short: the take again", cutting, func() container.Observed {
			o := differs
			o.Running = false
			return o
		}(), true, true, action{step: stepReplace, diff: []string{"env GREETING: value differs from the declared one"}}},
		{"held, taken, the new one in place but stopped: claimed and started", cutting, func() container.Observed {
			o := labelled
			o.Running = false
			return o
		}(), true, true, action{claim: claimInterrupted, step: stepStart}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var rec *record
			if c.rec != nil {
				r := *c.rec
				rec = &r
			}
			got := decideContainer(rec, c.o, c.exists, spec, "webapp", c.taken)
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("decideContainer = %+v, want %+v", got, c.want)
			}
		})
	}
}

// What becomes of a recorded container no module declares any more, as a pure function.
func TestUnitDecideUndeclared(t *testing.T) {
	there := container.Observed{ID: "c1"}
	foreign := container.Observed{ID: "c9"}
	for _, c := range []struct {
		state  string
		o      container.Observed
		exists bool
		want   leave
	}{
		{report.ContainerHeld, there, true, leaveHeld},
		{report.ContainerHeld, container.Observed{}, false, leaveHeld},
		{report.ContainerAdopted, there, true, leaveStands},
		{report.ContainerReplaced, there, true, leaveStands},
		{report.ContainerReplaced, container.Observed{}, false, leaveGone},
		{report.ContainerCreated, there, true, leaveRemove},
		{report.ContainerCreated, foreign, true, leaveForeign},
		{report.ContainerCreated, container.Observed{}, false, leaveForget},
	} {
		rec := &record{State: c.state, ID: "c1", Module: "webapp"}
		if got := decideUndeclared(rec, c.o, c.exists); got != c.want {
			t.Errorf("%s, exists %v, id %s: decided %v, want %v", c.state, c.exists, c.o.ID, got, c.want)
		}
	}
}

// Adopted node: a found container is recorded first and held, never touched, and reported
// changed when something else changes it; taking its module replaces it, keeping what was found.
func TestUnitContainerAdoptedHeldThenTakenReplaced(t *testing.T) {
	f := newFakeEngine("web:1", "web:2")
	h, _ := drivertest.Open(t, newDriver(f, hosttest.Log()))
	ctx := hosttest.Ctx(t)
	foundID := f.run(unitFound("web", "web:1", "old"))

	rep := h.Reconcile(ctx, hosttest.DeclUntaken(fsm.Adopted, declContainer("webapp", "web", "web:2", "new", false)))
	hosttest.NoErrorsFatal(t, rep)
	unitOps(t, f)
	v := hosttest.ContainerOf(t, rep, "web")
	if v.State != report.ContainerHeld || v.ID != foundID || !v.OriginalKept || v.Changed {
		t.Fatalf("found container: %+v, want held, %s, original kept, unchanged", v, foundID)
	}
	if orig, _, err := h.ContainerOriginal("web"); err != nil || !strings.Contains(string(orig), foundID) {
		t.Fatalf("original of the held container: %s, %v", orig, err)
	}

	// Something else changes it while held: reported, never reverted.
	f.gone("web")
	other := f.run(unitFound("web", "web:1", "edited"))
	rep = h.Reconcile(ctx, hosttest.DeclUntaken(fsm.Adopted, declContainer("webapp", "web", "web:2", "new", false)))
	unitOps(t, f)
	if v = hosttest.ContainerOf(t, rep, "web"); v.State != report.ContainerHeld || !v.Changed || !strings.HasPrefix(v.Reason, report.ChangedBySomethingElse) {
		t.Fatalf("held container changed by hand: %+v", v)
	}
	if c, _ := f.get("web"); c.id != other {
		t.Fatal("a held container was touched")
	}

	// Taken: replaced, what was found kept.
	rep = h.Reconcile(ctx, hosttest.DeclUntaken(fsm.Adopted, declContainer("webapp", "web", "web:2", "new", true)))
	hosttest.NoErrorsFatal(t, rep)
	unitOps(t, f, unitTakeOps("web", other)...)
	if v = hosttest.ContainerOf(t, rep, "web"); v.State != report.ContainerReplaced || v.Action != "replaced" || !v.OriginalKept {
		t.Fatalf("taken: %+v", v)
	}
	c, _ := f.get("web")
	if c.spec.Image != "web:2" || c.spec.Labels[ctrspec.LabelModule] != "webapp" || !c.running {
		t.Fatalf("the declared container is not in place: %+v", c)
	}
	if orig, replaced, err := h.ContainerOriginal("web"); err != nil || !strings.Contains(string(orig), foundID) || !strings.Contains(string(replaced), other) {
		t.Fatalf("after the take: original %s, replaced %s, %v", orig, replaced, err)
	}

	// Converged now: a pass with nothing to do does nothing.
	rep = h.Reconcile(ctx, hosttest.DeclUntaken(fsm.Adopted, declContainer("webapp", "web", "web:2", "new", true)))
	hosttest.NoErrorsFatal(t, rep)
	unitOps(t, f)
	if rep.Changes != 0 {
		t.Fatalf("a pass with nothing to do changed %d", rep.Changes)
	}
}

// Converged node: a found container is recorded, then replaced, in one pass; a missing one is
// created, as it is on an adopted node (assigning prepares).
func TestUnitContainerConvergedRecordsThenReplacesMissingCreated(t *testing.T) {
	for _, mode := range []fsm.Mode{fsm.Adopted, fsm.Converged} {
		t.Run(string(mode), func(t *testing.T) {
			f := newFakeEngine("web:1", "web:2")
			h, _ := drivertest.Open(t, newDriver(f, hosttest.Log()))
			ctx := hosttest.Ctx(t)
			foundID := f.run(unitFound("web", "web:1", "old"))
			rep := h.Reconcile(ctx, hosttest.DeclUntaken(mode, declContainer("webapp", "web", "web:2", "new", false),
				declContainer("notes", "notes", "web:2", "hi", false)))
			hosttest.NoErrorsFatal(t, rep)
			if v := hosttest.ContainerOf(t, rep, "notes"); v.State != report.ContainerCreated || v.Action != "created" || !v.Running {
				t.Fatalf("missing container on a %s node: %+v", mode, v)
			}
			if c, _ := f.get("notes"); c.spec.Labels[ctrspec.LabelManaged] != "true" {
				t.Fatalf("created without meshd's labels: %+v", c.spec.Labels)
			}
			if _, _, err := h.ContainerOriginal("notes"); err == nil || !strings.Contains(err.Error(), "created by the host") {
				t.Fatalf("original of a created container: %v", err)
			}
			web := hosttest.ContainerOf(t, rep, "web")
			if mode == fsm.Adopted {
				unitOps(t, f, "create notes")
				if web.State != report.ContainerHeld {
					t.Fatalf("found on an adopted node: %+v", web)
				}
				return
			}
			unitOps(t, f, append(unitTakeOps("web", foundID), "create notes")...)
			if web.State != report.ContainerReplaced || !web.OriginalKept {
				t.Fatalf("found on a converged node: %+v", web)
			}
			if orig, _, err := h.ContainerOriginal("web"); err != nil || !strings.Contains(string(orig), foundID) {
				t.Fatalf("original not recorded before the replace: %s, %v", orig, err)
			}
		})
	}
}

// A found container that already is the declaration is adopted in place when taken: same id,
// never recreated (meshd's labels are not asked of it); stopped, it is started.
func TestUnitContainerAdoptedInPlace(t *testing.T) {
	f := newFakeEngine("web:2")
	h, _ := drivertest.Open(t, newDriver(f, hosttest.Log()))
	ctx := hosttest.Ctx(t)
	id := f.run(unitFound("web", "web:2", "new"))
	stoppedID := f.run(unitFound("api", "web:2", "api"))
	f.stop("api")
	d := hosttest.DeclUntaken(fsm.Adopted, declContainer("webapp", "web", "web:2", "new", true), declContainer("apis", "api", "web:2", "api", true))

	rep := h.Reconcile(ctx, d)
	hosttest.NoErrorsFatal(t, rep)
	unitOps(t, f, "start api")
	if v := hosttest.ContainerOf(t, rep, "web"); v.State != report.ContainerAdopted || v.Action != "adopted" || v.ID != id {
		t.Fatalf("found as declared: %+v, want adopted in place as %s", v, id)
	}
	if v := hosttest.ContainerOf(t, rep, "api"); v.State != report.ContainerAdopted || v.Action != "adopted, started" || v.ID != stoppedID || !v.Running {
		t.Fatalf("found as declared, stopped: %+v", v)
	}
	for range 2 {
		rep = h.Reconcile(ctx, d)
		hosttest.NoErrorsFatal(t, rep)
		unitOps(t, f)
	}
	if c, _ := f.get("web"); c.id != id {
		t.Fatal("an adopted container was recreated")
	}
}

// The host's container converges back: recreated only on a real difference, created again when
// removed by hand, started when stopped; a pass with nothing to do does nothing.
func TestUnitContainerTakenConvergesBack(t *testing.T) {
	f := newFakeEngine("web:2")
	h, _ := drivertest.Open(t, newDriver(f, hosttest.Log()))
	ctx := hosttest.Ctx(t)
	d := hosttest.DeclUntaken(fsm.Adopted, declContainer("webapp", "web", "web:2", "new", true))
	hosttest.NoErrorsFatal(t, h.Reconcile(ctx, d))
	unitOps(t, f, "create web")

	rep := h.Reconcile(ctx, d)
	unitOps(t, f)
	if rep.Changes != 0 {
		t.Fatalf("no-op pass changed %d", rep.Changes)
	}

	c, _ := f.get("web")
	f.gone("web")
	edited := c.spec
	edited.Env = map[string]string{"GREETING": "edited"}
	f.run(edited)
	rep = h.Reconcile(ctx, d)
	hosttest.NoErrorsFatal(t, rep)
	unitOps(t, f, "replace web")
	if v := hosttest.ContainerOf(t, rep, "web"); v.Action != "recreated" || !strings.Contains(v.Reason, "env GREETING") {
		t.Fatalf("changed by hand: %+v", v)
	}

	f.gone("web")
	rep = h.Reconcile(ctx, d)
	hosttest.NoErrorsFatal(t, rep)
	unitOps(t, f, "create web")
	if v := hosttest.ContainerOf(t, rep, "web"); v.Action != "recreated" || v.Reason != report.RemovedBySomethingElse {
		t.Fatalf("removed by hand: %+v", v)
	}

	f.stop("web")
	rep = h.Reconcile(ctx, d)
	hosttest.NoErrorsFatal(t, rep)
	unitOps(t, f, "start web")
	if v := hosttest.ContainerOf(t, rep, "web"); v.Action != "started" || !v.Running {
		t.Fatalf("stopped: %+v", v)
	}
}

// Unassigned: what the host created is removed, a held container stays, one that replaced a
// found one (or was adopted) is left as it is.
func TestUnitContainerUnassigned(t *testing.T) {
	f := newFakeEngine("web:1", "web:2")
	h, _ := drivertest.Open(t, newDriver(f, hosttest.Log()))
	ctx := hosttest.Ctx(t)
	heldID := f.run(unitFound("held", "web:1", "old"))
	f.run(unitFound("took", "web:1", "old"))
	hosttest.NoErrorsFatal(t, h.Reconcile(ctx, hosttest.DeclUntaken(fsm.Adopted,
		declContainer("made", "made", "web:2", "x", false),
		declContainer("kept", "held", "web:2", "x", false),
		declContainer("taken", "took", "web:2", "x", true))))
	f.takeOps()
	tookID := func() string { c, _ := f.get("took"); return c.id }()

	rep := h.Reconcile(ctx, hosttest.DeclUntaken(fsm.Adopted))
	hosttest.NoErrorsFatal(t, rep)
	unitOps(t, f, "remove made")
	if _, ok := f.get("made"); ok {
		t.Fatal("a container the host created is still there after its module was unassigned")
	}
	cr := rep.Kinds[fsm.KindContainer].(*report.ContainerReport)
	for _, v := range cr.Containers {
		if v.Name == "made" {
			t.Fatalf("a removed container is still reported: %+v", v)
		}
	}
	if v := hosttest.ContainerOf(t, rep, "held"); v.State != report.ContainerHeld || !v.Unassigned || v.ID != heldID {
		t.Fatalf("held, unassigned: %+v", v)
	}
	if v := hosttest.ContainerOf(t, rep, "took"); v.State != report.ContainerReplaced || !v.Unassigned || v.ID != tookID {
		t.Fatalf("replaced, unassigned: %+v", v)
	}
	for _, n := range []string{"held", "took"} {
		if c, ok := f.get(n); !ok || !c.running {
			t.Fatalf("%s was touched after its module was unassigned", n)
		}
	}
}

// An engine that does not answer fails every container resource, naming its address; the pass
// goes on with the other kinds, and the same driver works again once the engine answers.
func TestUnitContainerEngineDown(t *testing.T) {
	f := newFakeEngine("web:2")
	f.down = true
	h, root := drivertest.Open(t, newDriver(f, hosttest.Log()))
	ctx := hosttest.Ctx(t)
	d := hosttest.DeclUntaken(fsm.Adopted, declContainer("webapp", "web", "web:2", "new", false),
		declContainer("notes", "notes", "web:2", "hi", true), hosttest.OwnFile("notes", "/etc/notes.conf", "x", true))

	rep := h.Reconcile(ctx, d)
	if len(rep.Errors) != 2 {
		t.Fatalf("errors %+v, want one for each container", rep.Errors)
	}
	for _, e := range rep.Errors {
		if !strings.HasPrefix(e.Resource, fsm.KindContainer+":") || !strings.Contains(e.Reason, f.host) {
			t.Errorf("error %+v does not name the engine %s", e, f.host)
		}
	}
	if cr := rep.Kinds[fsm.KindContainer].(*report.ContainerReport); cr.Reachable || cr.Engine != f.host {
		t.Errorf("report: reachable %v, engine %s", cr.Reachable, cr.Engine)
	}
	if b, err := os.ReadFile(root + "/etc/notes.conf"); err != nil || string(b) != "x" {
		t.Errorf("the file kind did not converge while the engine was down: %q, %v", b, err)
	}

	f.down = false
	rep = h.Reconcile(ctx, d)
	hosttest.NoErrorsFatal(t, rep)
	// The two are created side by side (createAll): in either order.
	unitOpsAnyOrder(t, f, "create notes", "create web")
}

// A missing image is that resource's error, naming the image; the found container keeps running
// and the other containers converge.
func TestUnitContainerMissingImage(t *testing.T) {
	f := newFakeEngine("web:1", "web:2")
	h, _ := drivertest.Open(t, newDriver(f, hosttest.Log()))
	ctx := hosttest.Ctx(t)
	foundID := f.run(unitFound("web", "web:1", "old"))

	rep := h.Reconcile(ctx, hosttest.DeclUntaken(fsm.Adopted, declContainer("webapp", "web", "web:9", "new", true),
		declContainer("notes", "notes", "web:2", "hi", true)))
	if len(rep.Errors) != 1 || rep.Errors[0].Resource != "container:web" || !strings.Contains(rep.Errors[0].Reason, "web:9") {
		t.Fatalf("errors %+v, want container:web's naming image web:9", rep.Errors)
	}
	var missing *container.ImageMissingError
	if !errors.As(f.imageMissing(ctrspec.Spec{Name: "web", Image: "web:9"}), &missing) {
		t.Fatal("the fake does not report a missing image as the engine does")
	}
	if c, ok := f.get("web"); !ok || c.id != foundID || !c.running {
		t.Fatalf("the found container is not running as it was: %+v", c)
	}
	if v := hosttest.ContainerOf(t, rep, "web"); v.State != report.ContainerHeld || v.ID != foundID {
		t.Fatalf("the found container's view: %+v", v)
	}
	unitOps(t, f, "create notes")
}

// Issue 26, finding 6: a container mounting meshd's own data dir (wherever this node's agent keeps
// it: the catalogue knows only the default) would hand the module the node's sealed secrets and
// record. It is that container's error, naming the path, and the engine is not asked to create it.
func TestUnitContainerMountingMeshdsOwnPathIsRefused(t *testing.T) {
	f := newFakeEngine("web:2")
	b := hosttest.NewBed(t)
	h := drivertest.OpenBed(b, newDriver(f, hosttest.Log()))
	r := declContainer("evil", "evil", "web:2", "hi", true)
	r.Container.Volumes = []string{b.Data + ":/steal:ro"}
	rep := h.Reconcile(hosttest.Ctx(t), hosttest.DeclUntaken(fsm.Converged, r))
	if len(rep.Errors) != 1 || !strings.Contains(rep.Errors[0].Reason, "meshd's own") || !strings.Contains(rep.Errors[0].Reason, b.Data) {
		t.Fatalf("the report's errors: %+v", rep.Errors)
	}
	if _, ok := f.get("evil"); ok {
		t.Fatal("the engine created the container mounting meshd's data dir")
	}
}

// Issue 34, finding 1, on the machine: a confined module mounting its own data directory, which
// is a symlink to the machine's cron directory, would have the engine follow it and hand the
// container the machine's cron. It is refused before the engine is asked, naming where the path
// leads; a mount of a real directory in a module's own place is created.
func TestUnitConfinedMountLeadingOutIsRefused(t *testing.T) {
	f := newFakeEngine("web:2")
	b := hosttest.NewBed(t)
	h := drivertest.OpenBed(b, newDriver(f, hosttest.Log()))
	for _, d := range []string{b.At("/etc/cron.d"), b.Data + "/web/data"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(b.At("/etc/cron.d"), b.Data+"/app"); err != nil {
		t.Fatal(err)
	}
	evil := declContainer("app", "app", "web:2", "hi", true)
	evil.Confined, evil.Container.Volumes = true, []string{b.Data + "/app:/data"}
	fine := declContainer("web", "web", "web:2", "hi", true)
	fine.Confined, fine.Container.Volumes, fine.Container.Ports = true, []string{b.Data + "/web/data:/data"}, nil
	rep := h.Reconcile(hosttest.Ctx(t), hosttest.DeclUntaken(fsm.Converged, evil, fine))
	if len(rep.Errors) != 1 || rep.Errors[0].Resource != "container:app" || !strings.Contains(rep.Errors[0].Reason, "leads to "+b.At("/etc/cron.d")) ||
		!strings.Contains(rep.Errors[0].Reason, "outside the module's own places") {
		t.Fatalf("the report's errors: %+v", rep.Errors)
	}
	if _, ok := f.get("app"); ok {
		t.Fatal("the engine created the container whose mount leads to the machine's cron")
	}
	if _, ok := f.get("web"); !ok {
		t.Fatal("the container mounting its own place was not created")
	}
}

// A found container's record made before a Spec said its Runtime says nothing of its user or
// capabilities: read against the container, it is not changed by something else; a record made
// now says them, and a change of them is one.
func TestUnitFoundRecordBeforeRuntimeIsNoChange(t *testing.T) {
	o := container.Observed{Spec: ctrspec.Spec{Name: "web", Image: "web:1",
		Runtime: ctrspec.Runtime{User: "65534", CapAdd: []string{"NET_ADMIN"}}}}
	old := &record{FoundSpec: &ctrspec.Spec{Name: "web", Image: "web:1"}}
	if got := foundSpecOf(old, o); got.User != "65534" || len(got.CapAdd) != 1 {
		t.Errorf("an old record reads as %+v, want the container's runtime", got.Runtime)
	}
	now := &record{FoundSpec: &ctrspec.Spec{Name: "web", Image: "web:1"}, FoundSpecV: foundSpecRuntime}
	if got := foundSpecOf(now, o); got.User != "" || len(ctrspec.RuntimeChanges(o.Spec, got)) != 2 {
		t.Errorf("a record made now reads as %+v, want its own (no user, no capability)", got.Runtime)
	}
}
