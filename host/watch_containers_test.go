package host

import (
	"strings"
	"testing"
	"time"

	dcontainer "github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"meshd/container"
	"meshd/fsm"
	"meshd/internal/testenv"
)

// ctViewOf is the container named name in rep, if the report has the container kind and it.
func ctViewOf(rep Report, name string) (ContainerView, bool) {
	cr, ok := rep.Kinds[fsm.KindContainer].(*ContainerReport)
	if !ok {
		return ContainerView{}, false
	}
	for _, v := range cr.Containers {
		if v.Name == name {
			return v, true
		}
	}
	return ContainerView{}, false
}

// A held container removed by something else is reported removed within a second of the
// removal, and one the predecessor then creates again under the name is reported changed within
// a second; neither is touched. The clock starts when the engine has done the change (a
// forced removal itself takes the engine a while).
func TestDriftHeldContainerReportedAtOnce(t *testing.T) {
	eng := ctEngine(t)
	img := ctImport(t, eng, "echo", ctLabsvc(t))
	b := newBed(t)
	r := runHost(t, b, NewContainerDriver(eng, quietLogger()))
	ctx := ctCtx(t)

	held, port := ctName(t, "", "notes"), ctFreePort(t)
	ctPredecessor(t, eng, held, img, port, "old")
	rep := r.declare(decl(fsm.Adopted, ctWebapp("notes", held, img, port, "new", false)))
	ctNoErrors(t, rep)
	if v := ctView(t, rep, held); v.State != ContainerHeld || v.Changed {
		t.Fatalf("found container not held as it is: %+v", v)
	}

	if err := eng.Remove(ctx, held); err != nil {
		t.Fatal(err)
	}
	r.seenWithin(time.Now(), "held container removed by something else", func(rep Report) bool {
		v, ok := ctViewOf(rep, held)
		return ok && v.State == ContainerHeld && v.Changed && v.Reason == RemovedBySomethingElse
	})

	newID := ctPredecessor(t, eng, held, img, port, "still the predecessor")
	r.seenWithin(time.Now(), "held container replaced by something else", func(rep Report) bool {
		v, ok := ctViewOf(rep, held)
		return ok && v.State == ContainerHeld && v.Changed && v.ID == newID && strings.HasPrefix(v.Reason, ChangedBySomethingElse)
	})
	if o, ok := ctInspect(t, eng, held); !ok || o.ID != newID || !o.Running {
		t.Fatalf("a held container was touched: found %v id %s running %v, want %s running", ok, o.ID, o.Running, newID)
	}
}

// A container of meshd's (its module taken) stopped by hand runs again within a second of
// the stop (plus the engine's own start of it), the same container started; removed by hand it
// is created again as soon.
// Settled, a pass with nothing to do writes nothing.
func TestDriftTakenContainerConvergedAtOnce(t *testing.T) {
	eng := ctEngine(t)
	img := ctImport(t, eng, "echo", ctLabsvc(t))
	b := newBed(t)
	r := runHost(t, b, NewContainerDriver(eng, quietLogger()))
	ctx := ctCtx(t)

	name, port := ctName(t, "", "web"), ctFreePort(t)
	rep := r.declare(decl(fsm.Converged, ctWebapp("webapp", name, img, port, "hi", true)))
	ctNoErrors(t, rep)
	first := ctView(t, rep, name)
	if first.State != ContainerCreated || !first.Running {
		t.Fatalf("first pass: %+v", first)
	}

	cli, err := client.NewClientWithOpts(client.WithHost(container.DefaultHost), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	timeout := 1
	if err := cli.ContainerStop(ctx, first.ID, dcontainer.StopOptions{Timeout: &timeout}); err != nil {
		t.Fatal(err)
	}
	r.convergedWithin(time.Now(), "meshd's container stopped by hand", func(Report) bool {
		o, ok, err := eng.Inspect(ctx, name)
		return err == nil && ok && o.ID == first.ID && o.Running
	})
	ctServes(t, port, "hi from "+name)

	if err := eng.Remove(ctx, name); err != nil {
		t.Fatal(err)
	}
	r.convergedWithin(time.Now(), "meshd's container removed by hand", func(Report) bool {
		o, ok, err := eng.Inspect(ctx, name)
		return err == nil && ok && o.ID != first.ID && o.Running
	})
	ctServes(t, port, "hi from "+name)

	settled, ok := r.until(30*time.Second, func(rep Report) bool {
		v, ok := ctViewOf(rep, name)
		// Quiet for five gaps: the engine's events for meshd's own start raise no pass loop.
		// The pass woken below is the one that must find nothing to do.
		return ok && v.Running && time.Since(rep.When) > 5*driftMinGap
	})
	if !ok {
		t.Fatalf("the host did not settle: last report %+v", settled)
	}
	writes := r.h.st.updates.Load()
	r.h.mu.Lock()
	r.h.drift.dr.touch(fsm.KindContainer)
	r.h.mu.Unlock()
	rep, ok = r.until(10*time.Second, func(rep Report) bool { return rep.When.After(settled.When) })
	if !ok || rep.Changes != 0 || r.h.st.updates.Load() != writes {
		t.Fatalf("a container pass with nothing to do: ran %v, changed %d, wrote %d records", ok, rep.Changes, r.h.st.updates.Load()-writes)
	}
}

// The event stream follows the engine through a restart: stopped, the report says the engine is
// unreachable within a second; started again, the stream is back (within its backoff) and a
// container of meshd's removed by hand is created again within a second.
func TestDriftContainerEventsFollowEngineRestart(t *testing.T) {
	bin := ctLabsvc(t)
	dd := testenv.NewDockerd(t, "--bip", "198.51.100.1/24") // its bridge on a TEST-NET address
	dd.Start()
	eng, err := container.New(dd.Sock, container.WithLogger(quietLogger()), container.WithStopTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	dd.WaitUp(eng.Ping)
	img := ctImport(t, eng, "echo", bin)
	b := newBed(t)
	r := runHost(t, b, NewContainerDriver(eng, quietLogger()))
	ctx := ctCtx(t)

	name := ctName(t, "unix://"+dd.Sock, "svc")
	res := ctWebapp("webapp", name, img, ctFreePort(t), "hi", true)
	res.Container.Ports = nil // the private engine's network is its own
	rep := r.declare(decl(fsm.Converged, res))
	ctNoErrors(t, rep)

	dd.Stop()
	r.seenWithin(time.Now(), "engine stopped", func(rep Report) bool {
		cr, ok := rep.Kinds[fsm.KindContainer].(*ContainerReport)
		return ok && !cr.Reachable
	})

	dd.Start()
	dd.WaitUp(eng.Ping)
	// Subscribed again within the stream's longest backoff (5 s), the pass that follows finds
	// the engine again.
	if rep, ok := r.until(15*time.Second, func(rep Report) bool {
		cr, ok := rep.Kinds[fsm.KindContainer].(*ContainerReport)
		v, _ := ctViewOf(rep, name)
		return ok && cr.Reachable && v.Running
	}); !ok {
		t.Fatalf("engine back: the report did not follow within 15s: %+v", rep.Kinds[fsm.KindContainer])
	}
	o, _ := ctInspect(t, eng, name)
	if err := eng.Remove(ctx, name); err != nil {
		t.Fatal(err)
	}
	r.convergedWithin(time.Now(), "meshd's container removed by hand after the engine restarted", func(Report) bool {
		n, ok, err := eng.Inspect(ctx, name)
		return err == nil && ok && n.ID != o.ID && n.Running
	})
}
