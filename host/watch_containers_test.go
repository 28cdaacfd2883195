package host

import (
	"strings"
	"testing"
	"time"

	dcontainer "github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"meshd/container"
	"meshd/fsm"
	"meshd/host/containers"
	"meshd/host/hosttest"
	"meshd/internal/testenv"
	"meshd/report"
)

// ctViewOf is the container named name in rep, if the report has the container kind and it.
func ctViewOf(rep report.Report, name string) (report.ContainerView, bool) {
	cr, ok := rep.Kinds[fsm.KindContainer].(*report.ContainerReport)
	if !ok {
		return report.ContainerView{}, false
	}
	for _, v := range cr.Containers {
		if v.Name == name {
			return v, true
		}
	}
	return report.ContainerView{}, false
}

// A held container removed by something else is reported removed within a second of the
// removal, and one the predecessor then creates again under the name is reported changed within
// a second; neither is touched. The clock starts when the engine has done the change (a
// forced removal itself takes the engine a while).
func TestDriftHeldContainerReportedAtOnce(t *testing.T) {
	eng := hosttest.Engine(t)
	img := hosttest.Import(t, eng, "echo", hosttest.Labsvc(t))
	b := hosttest.NewBed(t)
	r := runHost(t, b, containers.New(eng, hosttest.Log()))
	ctx := hosttest.DockerCtx(t)

	held, port := hosttest.ContainerName(t, "", "notes"), hosttest.FreePort(t)
	hosttest.Predecessor(t, eng, held, img, port, "old")
	rep := r.declare(hosttest.Decl(fsm.Adopted, hosttest.Webapp("notes", held, img, port, "new", false)))
	hosttest.NoErrorsFatal(t, rep)
	if v := hosttest.ContainerOf(t, rep, held); v.State != report.ContainerHeld || v.Changed {
		t.Fatalf("found container not held as it is: %+v", v)
	}

	if err := eng.Remove(ctx, held); err != nil {
		t.Fatal(err)
	}
	r.seenWithin(time.Now(), "held container removed by something else", func(rep report.Report) bool {
		v, ok := ctViewOf(rep, held)
		return ok && v.State == report.ContainerHeld && v.Changed && v.Reason == report.RemovedBySomethingElse
	})

	newID := hosttest.Predecessor(t, eng, held, img, port, "still the predecessor")
	r.seenWithin(time.Now(), "held container replaced by something else", func(rep report.Report) bool {
		v, ok := ctViewOf(rep, held)
		return ok && v.State == report.ContainerHeld && v.Changed && v.ID == newID && strings.HasPrefix(v.Reason, report.ChangedBySomethingElse)
	})
	if o, ok := hosttest.Inspect(t, eng, held); !ok || o.ID != newID || !o.Running {
		t.Fatalf("a held container was touched: found %v id %s running %v, want %s running", ok, o.ID, o.Running, newID)
	}
}

// A container of meshd's (its module taken) stopped by hand runs again within a second of
// the stop (plus the engine's own start of it), the same container started; removed by hand it
// is created again as soon.
// Settled, a pass with nothing to do writes nothing.
func TestDriftTakenContainerConvergedAtOnce(t *testing.T) {
	eng := hosttest.Engine(t)
	img := hosttest.Import(t, eng, "echo", hosttest.Labsvc(t))
	b := hosttest.NewBed(t)
	r := runHost(t, b, containers.New(eng, hosttest.Log()))
	ctx := hosttest.DockerCtx(t)

	name, port := hosttest.ContainerName(t, "", "web"), hosttest.FreePort(t)
	rep := r.declare(hosttest.Decl(fsm.Converged, hosttest.Webapp("webapp", name, img, port, "hi", true)))
	hosttest.NoErrorsFatal(t, rep)
	first := hosttest.ContainerOf(t, rep, name)
	if first.State != report.ContainerCreated || !first.Running {
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
	r.convergedWithin(time.Now(), "meshd's container stopped by hand", func(report.Report) bool {
		o, ok, err := eng.Inspect(ctx, name)
		return err == nil && ok && o.ID == first.ID && o.Running
	})
	hosttest.Serves(t, port, "hi from "+name)

	if err := eng.Remove(ctx, name); err != nil {
		t.Fatal(err)
	}
	r.convergedWithin(time.Now(), "meshd's container removed by hand", func(report.Report) bool {
		o, ok, err := eng.Inspect(ctx, name)
		return err == nil && ok && o.ID != first.ID && o.Running
	})
	hosttest.Serves(t, port, "hi from "+name)

	settled, ok := r.until(30*time.Second, func(rep report.Report) bool {
		v, ok := ctViewOf(rep, name)
		// Quiet for five gaps: the engine's events for meshd's own start raise no pass loop.
		// The pass woken below is the one that must find nothing to do.
		return ok && v.Running && time.Since(rep.When) > 5*driftMinGap
	})
	if !ok {
		t.Fatalf("the host did not settle: last report %+v", settled)
	}
	writes := r.h.RecordWrites()
	r.h.mu.Lock()
	r.h.drift.dr.touch(fsm.KindContainer)
	r.h.mu.Unlock()
	rep, ok = r.until(10*time.Second, func(rep report.Report) bool { return rep.When.After(settled.When) })
	if !ok || rep.Changes != 0 || r.h.RecordWrites() != writes {
		t.Fatalf("a container pass with nothing to do: ran %v, changed %d, wrote %d records", ok, rep.Changes, r.h.RecordWrites()-writes)
	}
}

// The event stream follows the engine through a restart: stopped, the report says the engine is
// unreachable within a second; started again, the stream is back (within its backoff) and a
// container of meshd's removed by hand is created again within a second.
func TestDriftContainerEventsFollowEngineRestart(t *testing.T) {
	bin := hosttest.Labsvc(t)
	dd := testenv.NewDockerd(t, "--bip", "198.51.100.1/24") // its bridge on a TEST-NET address
	dd.Start()
	eng, err := container.New(dd.Sock, container.WithLogger(hosttest.Log()), container.WithStopTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	dd.WaitUp(eng.Ping)
	img := hosttest.Import(t, eng, "echo", bin)
	b := hosttest.NewBed(t)
	r := runHost(t, b, containers.New(eng, hosttest.Log()))
	ctx := hosttest.DockerCtx(t)

	name := hosttest.ContainerName(t, "unix://"+dd.Sock, "svc")
	res := hosttest.Webapp("webapp", name, img, hosttest.FreePort(t), "hi", true)
	res.Container.Ports = nil // the private engine's network is its own
	rep := r.declare(hosttest.Decl(fsm.Converged, res))
	hosttest.NoErrorsFatal(t, rep)

	dd.Stop()
	r.seenWithin(time.Now(), "engine stopped", func(rep report.Report) bool {
		cr, ok := rep.Kinds[fsm.KindContainer].(*report.ContainerReport)
		return ok && !cr.Reachable
	})

	dd.Start()
	dd.WaitUp(eng.Ping)
	// Subscribed again within the stream's longest backoff (5 s), the pass that follows finds
	// the engine again.
	if rep, ok := r.until(15*time.Second, func(rep report.Report) bool {
		cr, ok := rep.Kinds[fsm.KindContainer].(*report.ContainerReport)
		v, _ := ctViewOf(rep, name)
		return ok && cr.Reachable && v.Running
	}); !ok {
		t.Fatalf("engine back: the report did not follow within 15s: %+v", rep.Kinds[fsm.KindContainer])
	}
	o, _ := hosttest.Inspect(t, eng, name)
	if err := eng.Remove(ctx, name); err != nil {
		t.Fatal(err)
	}
	r.convergedWithin(time.Now(), "meshd's container removed by hand after the engine restarted", func(report.Report) bool {
		n, ok, err := eng.Inspect(ctx, name)
		return err == nil && ok && n.ID != o.ID && n.Running
	})
}
