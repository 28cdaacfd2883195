package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"meshd/container"
	"meshd/draft"
	"meshd/report"
)

// A draft writes each manifest 0600 into a directory it makes 0700, and never overwrites: when one
// of the files is there, nothing is written and the error names it.
func TestUnitWriteDraftsNeverOverwrites(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "drafts")
	mods := []draft.Module{{Name: "a", File: "a.yaml", Manifest: []byte("name: a\n")}, {Name: "b", File: "b.yaml", Manifest: []byte("name: b\n")}}
	if err := writeDrafts(dir, mods[:1]); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "a.yaml")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("a.yaml: %v, %v; want mode 0600", fi, err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("%s: %v, %v; want mode 0700", dir, fi, err)
	}
	mods[0].Manifest = []byte("name: a\nchanged\n")
	err := writeDrafts(dir, mods)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "a.yaml")) {
		t.Fatalf("writeDrafts over a.yaml: %v; want refused naming it", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a.yaml")); string(b) != "name: a\n" {
		t.Errorf("a.yaml was overwritten: %q", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "b.yaml")); !os.IsNotExist(err) {
		t.Errorf("b.yaml was written though the draft was refused: %v", err)
	}
}

// --file reads a file as the machine has it: content, mode with its setgid bit, owner.
func TestUnitReadDraftFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sync.conf")
	if err := os.WriteFile(p, []byte("generation 4\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o640|os.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	f, err := readDraftFile("sync=" + p)
	if err != nil {
		t.Fatal(err)
	}
	if f.Module != "sync" || f.Path != p || string(f.Content) != "generation 4\n" || f.Mode != 0o2640 || int(f.UID) != os.Getuid() {
		t.Errorf("read %+v", f)
	}
	if _, err := readDraftFile("relative/path"); err == nil || !strings.Contains(err.Error(), "absolute") {
		t.Errorf("a relative path: %v", err)
	}
}

// A container a take keeps aside was left out as "declared by module webapp already", which it
// is not: the module declares the container that replaced it. The reason names the take.
func TestUnitDraftLeavesOutWithTheRealReason(t *testing.T) {
	cr := report.ContainerReport{Containers: []report.ContainerView{
		{Name: "webapp", Module: "webapp", State: report.ContainerReplaced, Aside: "webapp.meshd-replaced-0123456789ab"},
		{Name: "cache", Module: "cache", State: "held"},
	}}
	for name, want := range map[string]string{
		"webapp.meshd-replaced-0123456789ab": "is the found webapp that module webapp's take replaced, kept aside stopped (meshd node original hub container webapp)",
		"old.meshd-replaced-fedcba987654":    "is one a take replaced, kept aside",
		"webapp":                             "is declared by module webapp already",
		"cache":                              "is declared by module cache already",
		"other":                              "",
	} {
		got := leftOut(container.Observed{Name: name}, "hub", cr)
		if want == "" && got != "" || !strings.Contains(got, want) {
			t.Errorf("%s left out as %q, want %q", name, got, want)
		}
	}
	if got := leftOut(container.Observed{Name: "x", Managed: true, Module: "web"}, "hub", cr); !strings.Contains(got, "is meshd's (module web)") {
		t.Errorf("meshd's own: %q", got)
	}
}
