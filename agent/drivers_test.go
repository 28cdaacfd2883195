package agent

import (
	"log/slog"
	"path/filepath"
	"testing"

	"meshd/fsm"
	"meshd/pki"
)

// A pass runs its drivers in order: the openings (the guard among them) come before the tunnel
// and the containers, so a foundation container never publishes a guarded port before the guard
// refuses it from outside (issue 11).
func TestUnitOpeningsBeforeContainers(t *testing.T) {
	dir := t.TempDir()
	seal := pki.NewSealKey(filepath.Join(dir, "seal.key"))
	if err := seal.Write(); err != nil {
		t.Fatal(err)
	}
	ds, err := drivers(Config{DockerHost: "unix:///nonexistent/docker.sock", DataDir: dir, SealKey: seal.Path}, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, d := range ds {
		kinds = append(kinds, d.Kind())
	}
	want := []string{fsm.KindOpening, fsm.KindTunnel, fsm.KindContainer}
	if len(kinds) != len(want) || kinds[0] != want[0] || kinds[1] != want[1] || kinds[2] != want[2] {
		t.Fatalf("driver order %v, want %v", kinds, want)
	}
}
