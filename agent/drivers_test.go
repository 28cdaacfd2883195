package agent

import (
	"log/slog"
	"testing"

	"meshd/fsm"
)

// A pass runs its drivers in order: the openings (the guard among them) come before the
// containers, so a foundation container never publishes a guarded port before the guard refuses
// it from outside (issue 11).
func TestUnitOpeningsBeforeContainers(t *testing.T) {
	ds, err := drivers(Config{DockerHost: "unix:///nonexistent/docker.sock", DataDir: t.TempDir()}, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, d := range ds {
		kinds = append(kinds, d.Kind())
	}
	if len(kinds) != 2 || kinds[0] != fsm.KindOpening || kinds[1] != fsm.KindContainer {
		t.Fatalf("driver order %v, want [%s %s]", kinds, fsm.KindOpening, fsm.KindContainer)
	}
}
