package host

// Unit tests of the file kind's decision and its execution under a temporary root, owned by the
// user running the test: every row of docs/architecture.md's "Adopted and converged" for files,
// without root, in milliseconds. The crash points are checked by crash_test.go.

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"meshd/catalogue"
	"meshd/fsm"
)

// unitFile declares a file owned by the user running the test, so no chown needs root.
func unitFile(module, p, content string, taken bool) fsm.Resource {
	return fsm.Resource{Module: module, Kind: fsm.KindFile, Taken: taken, File: &catalogue.File{
		Path: p, Content: content, Mode: "0644", Owner: fmt.Sprintf("%d:%d", os.Getuid(), os.Getgid())}}
}

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
		if got := decideFile(c.ours, c.wasFound, c.exists, c.same, c.taken, c.createOnce); got != c.want {
			t.Errorf("%s: decideFile = %+v, want %+v", c.name, got, c.want)
		}
	}
}

func unitRead(t *testing.T, root, p string) string {
	t.Helper()
	b, err := os.ReadFile(root + p)
	if err != nil {
		return "(missing)"
	}
	return string(b)
}

func unitPlace(t *testing.T, root, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(root+p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(root+p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// Adopted node: found held (original recorded first, reported, changes reported, never
// reverted), missing created, taking replaces; converged node: found recorded then replaced;
// unassigned: created removed, held stays, replaced left.
func TestUnitFilesAdoptedAndConverged(t *testing.T) {
	h, root := unitHost(t)
	ctx := unitCtx(t)
	unitPlace(t, root, "/etc/app/held.conf", "predecessor")
	unitPlace(t, root, "/etc/app/taken.conf", "predecessor's other")
	d := func(taken bool, rs ...fsm.Resource) *fsm.Declaration {
		return unitDecl(fsm.Adopted, append([]fsm.Resource{
			unitFile("app", "/etc/app/held.conf", "declared", false),
			unitFile("app2", "/etc/app/taken.conf", "declared 2", taken),
		}, rs...)...)
	}

	rep := h.Reconcile(ctx, d(false, unitFile("app", "/etc/app/new.conf", "fresh", false)))
	unitNoErrors(t, rep)
	if len(rep.Held) != 2 || unitRead(t, root, "/etc/app/held.conf") != "predecessor" {
		t.Fatalf("found files on an adopted node: held %+v, content %q", rep.Held, unitRead(t, root, "/etc/app/held.conf"))
	}
	if b, err := h.Original("/etc/app/held.conf"); err != nil || string(b) != "predecessor" {
		t.Fatalf("original of a held file: %q, %v", b, err)
	}
	if unitRead(t, root, "/etc/app/new.conf") != "fresh" {
		t.Fatal("a missing declared file was not created on an adopted node")
	}

	unitPlace(t, root, "/etc/app/held.conf", "edited by hand")
	rep = h.Reconcile(ctx, d(true, unitFile("app", "/etc/app/new.conf", "fresh", false)))
	unitNoErrors(t, rep)
	if hf := heldIn(rep, "/etc/app/held.conf"); hf == nil || !hf.Changed || hf.Reason != ChangedBySomethingElse {
		t.Fatalf("held file changed by hand: %+v", hf)
	}
	if unitRead(t, root, "/etc/app/held.conf") != "edited by hand" {
		t.Fatal("a held file was reverted")
	}
	if unitRead(t, root, "/etc/app/taken.conf") != "declared 2" {
		t.Fatal("taking a module did not replace its held file")
	}
	if b, _ := h.Original("/etc/app/taken.conf"); string(b) != "predecessor's other" {
		t.Fatalf("the replaced file's original is not kept: %q", b)
	}

	// Unassigned: the created file goes, the held one stays, the replaced one is left.
	rep = h.Reconcile(ctx, unitDecl(fsm.Adopted))
	unitNoErrors(t, rep)
	if unitRead(t, root, "/etc/app/new.conf") != "(missing)" {
		t.Error("a created file is still there after its module was unassigned")
	}
	if hf := heldIn(rep, "/etc/app/held.conf"); hf == nil || !hf.Unassigned || unitRead(t, root, "/etc/app/held.conf") != "edited by hand" {
		t.Errorf("held file, unassigned: %+v", hf)
	}
	if unitRead(t, root, "/etc/app/taken.conf") != "declared 2" {
		t.Error("a file that replaced a found one was not left as it is")
	}

	// Converged node: found is recorded, then replaced, in one pass.
	unitPlace(t, root, "/etc/other.conf", "found")
	rep = h.Reconcile(ctx, unitDecl(fsm.Converged, unitFile("other", "/etc/other.conf", "converged", false)))
	unitNoErrors(t, rep)
	if unitRead(t, root, "/etc/other.conf") != "converged" {
		t.Error("a found file on a converged node was not replaced")
	}
	if b, _ := h.Original("/etc/other.conf"); string(b) != "found" {
		t.Errorf("original on a converged node: %q", b)
	}
	if rep = h.Reconcile(ctx, unitDecl(fsm.Converged, unitFile("other", "/etc/other.conf", "converged", false))); rep.Changes != 0 {
		t.Errorf("a pass with nothing to do changed %d", rep.Changes)
	}
}

func heldIn(rep Report, p string) *HeldFile {
	for i := range rep.Held {
		if rep.Held[i].Path == p {
			return &rep.Held[i]
		}
	}
	return nil
}
