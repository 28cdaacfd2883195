package container

import (
	"errors"
	"strings"
	"testing"

	"meshd/ctrspec"
	"meshd/internal/testenv"
)

// TestEngineUnreachableAndBack: the engine stopped makes every call fail with
// ErrEngineUnreachable naming the socket; started again, the same Engine works without being
// made anew.
func TestEngineUnreachableAndBack(t *testing.T) {
	// No bridge at all (a dockerd with --bridge=none deletes the docker0 link of its namespace,
	// which is its own).
	d := testenv.NewDockerd(t, "--bridge=none")
	d.Start()
	e, err := New(d.Sock)
	if err != nil {
		t.Fatal(err)
	}
	d.WaitUp(e.Ping)
	ctx := testCtx(t)

	works := func(when string) {
		t.Helper()
		if _, found, err := e.Inspect(ctx, "ct-nothing-here"); err != nil || found {
			t.Fatalf("%s: Inspect = found %v, %v", when, found, err)
		}
		if ps, err := e.Published(ctx); err != nil || len(ps) != 0 {
			t.Fatalf("%s: Published = %v, %v", when, ps, err)
		}
		// A missing image on a live engine is a missing image, not an unreachable engine.
		_, err := e.Create(ctx, ctrspec.Spec{Name: "ct-nothing-here", Image: "ct-test/absent:" + runID})
		if !errors.Is(err, ErrImageMissing) || errors.Is(err, ErrEngineUnreachable) {
			t.Fatalf("%s: Create with a missing image = %v", when, err)
		}
	}
	works("engine up")

	d.Stop()
	calls := map[string]func() error{
		"Ping": func() error { return e.Ping(ctx) },
		"Inspect": func() error {
			_, _, err := e.Inspect(ctx, "ct-nothing-here")
			return err
		},
		"Published": func() error {
			_, err := e.Published(ctx)
			return err
		},
		"Create": func() error {
			_, err := e.Create(ctx, ctrspec.Spec{Name: "ct-nothing-here", Image: "ct-test/echo:1"})
			return err
		},
		"Remove": func() error { return e.Remove(ctx, "ct-nothing-here") },
		"Replace": func() error {
			_, _, err := e.Replace(ctx, Observed{Name: "ct-nothing-here"}, ctrspec.Spec{Name: "ct-nothing-here", Image: "ct-test/echo:1"})
			return err
		},
	}
	for name, call := range calls {
		err := call()
		t.Logf("%s with the engine stopped: %v", name, err)
		var ue *UnreachableError
		if !errors.Is(err, ErrEngineUnreachable) || !errors.As(err, &ue) || ue.Host != "unix://"+d.Sock ||
			!strings.Contains(err.Error(), d.Sock) {
			t.Errorf("%s with the engine stopped: %v; want ErrEngineUnreachable naming %s", name, err, d.Sock)
		}
	}

	d.Start()
	d.WaitUp(e.Ping)
	works("engine back")
}
