package host

// Unit tests of the file kind's decision and its execution under a temporary root, owned by the
// user running the test: every row of docs/architecture.md's "Adopted and converged" for files,
// without root, in milliseconds. The crash points are checked by crash_test.go.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"meshd/fsm"
	"meshd/host/hosttest"
	"meshd/report"
)

func TestUnitDecideFile(t *testing.T) {
	for _, c := range []struct {
		name                                            string
		ours, wasFound, exists, same, taken, createOnce bool
		want                                            fileAction
	}{
		{"adopted: found is held", false, false, true, false, false, false, fileAction{step: fileHold}},
		{"adopted: held stays held", false, true, true, false, false, false, fileAction{step: fileObserveHeld}},
		{"adopted: held removed by hand stays held", false, true, false, false, false, false, fileAction{step: fileObserveHeld}},
		{"missing is created", false, false, false, false, false, false, fileAction{step: fileWrite}},
		{"missing is created, taken", false, false, false, false, true, false, fileAction{step: fileWrite}},
		{"taken: found is recorded, then replaced", false, false, true, false, true, false, fileAction{step: fileWrite, recordFound: true, stage: true}},
		{"taken: held is replaced, staged", false, true, true, false, true, false, fileAction{step: fileWrite, stage: true}},
		{"taken: held removed by hand is written, nothing to stage", false, true, false, false, true, false, fileAction{step: fileWrite}},
		{"the host's, as declared: kept", true, false, true, true, true, false, fileAction{step: fileFixMeta}},
		{"the host's, as declared, module not taken: kept", true, false, true, true, false, false, fileAction{step: fileFixMeta}},
		{"the host's, changed by hand: written back", true, false, true, false, true, false, fileAction{step: fileWrite}},
		{"the host's, removed by hand: written again", true, false, false, false, true, false, fileAction{step: fileWrite}},
		{"create_once, there: kept", true, false, true, false, true, true, fileAction{step: fileKeepOnce}},
		{"create_once, found on a take: recorded, kept", false, false, true, false, true, true, fileAction{step: fileKeepOnce, recordFound: true}},
		{"create_once, missing: written", false, false, false, false, true, true, fileAction{step: fileWrite}},
	} {
		if got := decideFile(fileFacts{ours: c.ours, wasFound: c.wasFound, exists: c.exists,
			sameContent: c.same, taken: c.taken, createOnce: c.createOnce}); got != c.want {
			t.Errorf("%s: decideFile = %+v, want %+v", c.name, got, c.want)
		}
	}
}

// Adopted node: found held (original recorded first, reported, changes reported, never
// reverted), missing created, taking replaces; converged node: found recorded then replaced;
// unassigned: created removed, held stays, replaced left.
func TestUnitFilesAdoptedAndConverged(t *testing.T) {
	h, root := openTemp(t)
	ctx := hosttest.Ctx(t)
	hosttest.PlaceAt(t, root, "/etc/app/held.conf", "predecessor")
	hosttest.PlaceAt(t, root, "/etc/app/taken.conf", "predecessor's other")
	d := func(taken bool, rs ...fsm.Resource) *fsm.Declaration {
		return hosttest.DeclUntaken(fsm.Adopted, append([]fsm.Resource{
			hosttest.OwnFile("app", "/etc/app/held.conf", "declared", false),
			hosttest.OwnFile("app2", "/etc/app/taken.conf", "declared 2", taken),
		}, rs...)...)
	}

	rep := h.Reconcile(ctx, d(false, hosttest.OwnFile("app", "/etc/app/new.conf", "fresh", false)))
	hosttest.NoErrorsFatal(t, rep)
	if len(rep.Held) != 2 || hosttest.ReadAt(t, root, "/etc/app/held.conf") != "predecessor" {
		t.Fatalf("found files on an adopted node: held %+v, content %q", rep.Held, hosttest.ReadAt(t, root, "/etc/app/held.conf"))
	}
	if b, err := h.Original("/etc/app/held.conf"); err != nil || string(b) != "predecessor" {
		t.Fatalf("original of a held file: %q, %v", b, err)
	}
	if hosttest.ReadAt(t, root, "/etc/app/new.conf") != "fresh" {
		t.Fatal("a missing declared file was not created on an adopted node")
	}

	hosttest.PlaceAt(t, root, "/etc/app/held.conf", "edited by hand")
	rep = h.Reconcile(ctx, d(true, hosttest.OwnFile("app", "/etc/app/new.conf", "fresh", false)))
	hosttest.NoErrorsFatal(t, rep)
	if hf := hosttest.HeldOf(rep, "/etc/app/held.conf"); hf == nil || !hf.Changed || hf.Reason != report.ChangedBySomethingElse {
		t.Fatalf("held file changed by hand: %+v", hf)
	}
	if hosttest.ReadAt(t, root, "/etc/app/held.conf") != "edited by hand" {
		t.Fatal("a held file was reverted")
	}
	if hosttest.ReadAt(t, root, "/etc/app/taken.conf") != "declared 2" {
		t.Fatal("taking a module did not replace its held file")
	}
	if b, _ := h.Original("/etc/app/taken.conf"); string(b) != "predecessor's other" {
		t.Fatalf("the replaced file's original is not kept: %q", b)
	}

	// Unassigned: the created file goes, the held one stays, the replaced one is left.
	rep = h.Reconcile(ctx, hosttest.DeclUntaken(fsm.Adopted))
	hosttest.NoErrorsFatal(t, rep)
	if hosttest.ReadAt(t, root, "/etc/app/new.conf") != "(missing)" {
		t.Error("a created file is still there after its module was unassigned")
	}
	if hf := hosttest.HeldOf(rep, "/etc/app/held.conf"); hf == nil || !hf.Unassigned || hosttest.ReadAt(t, root, "/etc/app/held.conf") != "edited by hand" {
		t.Errorf("held file, unassigned: %+v", hf)
	}
	if hosttest.ReadAt(t, root, "/etc/app/taken.conf") != "declared 2" {
		t.Error("a file that replaced a found one was not left as it is")
	}

	// Converged node: found is recorded, then replaced, in one pass.
	hosttest.PlaceAt(t, root, "/etc/other.conf", "found")
	rep = h.Reconcile(ctx, hosttest.DeclUntaken(fsm.Converged, hosttest.OwnFile("other", "/etc/other.conf", "converged", false)))
	hosttest.NoErrorsFatal(t, rep)
	if hosttest.ReadAt(t, root, "/etc/other.conf") != "converged" {
		t.Error("a found file on a converged node was not replaced")
	}
	if b, _ := h.Original("/etc/other.conf"); string(b) != "found" {
		t.Errorf("original on a converged node: %q", b)
	}
	if rep = h.Reconcile(ctx, hosttest.DeclUntaken(fsm.Converged, hosttest.OwnFile("other", "/etc/other.conf", "converged", false))); rep.Changes != 0 {
		t.Errorf("a pass with nothing to do changed %d", rep.Changes)
	}
}

// Issue 26, finding 6: the catalogue knows meshd's default paths only, so an agent configured with
// its seal key or socket elsewhere had them written over by a module declaring them. A declared
// file at or under one of the node's own paths is that resource's error, naming the path, and
// nothing is written there; the module's other files still converge.
func TestUnitFilesRefuseMeshdsConfiguredPaths(t *testing.T) {
	b := hosttest.NewBed(t)
	own := filepath.Join(b.Root, "/srv/meshd-keys")
	h, err := Open(Config{DataDir: b.Data, Seal: hosttest.Seal, Root: b.Root, Logger: hosttest.Log(), Own: []string{own}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	rep := h.Reconcile(hosttest.Ctx(t), hosttest.DeclUntaken(fsm.Adopted,
		hosttest.OwnFile("evil", "/srv/meshd-keys/seal.key", "attacker's key", true),
		hosttest.OwnFile("evil", "/etc/app/ok.conf", "fine", true)))
	if len(rep.Errors) != 1 || rep.Errors[0].Resource != "file:/srv/meshd-keys/seal.key" || !strings.Contains(rep.Errors[0].Reason, "meshd's own") {
		t.Fatalf("the report's errors: %+v", rep.Errors)
	}
	if _, err := os.Stat(filepath.Join(own, "seal.key")); !os.IsNotExist(err) {
		t.Fatalf("the file was written under meshd's own path: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(b.Root, "/etc/app/ok.conf")); err != nil || string(b) != "fine" {
		t.Fatalf("the module's other file: %q %v", b, err)
	}
}
