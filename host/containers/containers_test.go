package containers

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dcontainer "github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"

	"meshd/catalogue"
	"meshd/container"
	"meshd/ctrspec"
	"meshd/fsm"
	"meshd/host/hosttest"
	"meshd/host/hosttest/drivertest"
	"meshd/internal/testenv"
	"meshd/report"
)

func asTaken(r fsm.Resource) fsm.Resource { r.Taken = true; return r }

// On an adopted node, assigning holds a found container (same id, still serving) and creates
// what is not there; taking replaces the found one (its configuration kept) and the new one
// serves; an unchanged declaration is then never recreated.
func TestContainerAssignHoldsTakeReplaces(t *testing.T) {
	eng := hosttest.Engine(t)
	img := hosttest.Import(t, eng, "echo", hosttest.Labsvc(t))
	b := hosttest.NewBed(t)
	h := drivertest.OpenBed(b, New(eng, hosttest.Log()))
	ctx := hosttest.DockerCtx(t)

	found, port := hosttest.ContainerName(t, "", "webapp"), hosttest.FreePort(t)
	predID := hosttest.Predecessor(t, eng, found, img, port, "old")
	hosttest.Serves(t, port, "old from predecessor")
	fresh, freshPort := hosttest.ContainerName(t, "", "cache"), hosttest.FreePort(t)

	assigned := hosttest.Decl(fsm.Adopted, hosttest.Webapp("webapp", found, img, port, "new", false), hosttest.Webapp("webapp", fresh, img, freshPort, "new", false))
	rep := h.Reconcile(ctx, assigned)
	hosttest.NoErrorsFatal(t, rep)
	v := hosttest.ContainerOf(t, rep, found)
	if v.State != report.ContainerHeld || v.ID != predID || !v.Running || v.Module != "webapp" || v.Image != img || v.Changed ||
		len(v.Ports) != 1 || v.Ports[0] != fmt.Sprintf("127.0.0.1:%d->8080/tcp", port) {
		t.Fatalf("found container reported %+v; want held, id %s, running, its port", v, report.Short(predID))
	}
	if o, ok := hosttest.Inspect(t, eng, found); !ok || o.ID != predID {
		t.Fatalf("the found container was touched: found %v id %s, want %s", ok, o.ID, predID)
	}
	hosttest.Serves(t, port, "old from predecessor")
	if c := hosttest.ContainerOf(t, rep, fresh); c.State != report.ContainerCreated || !c.Running {
		t.Fatalf("a declared container not found: %+v; want created and running", c)
	}
	hosttest.Serves(t, freshPort, "new from "+fresh)
	if o, _ := hosttest.Inspect(t, eng, fresh); !o.Managed || o.Module != "webapp" {
		t.Fatalf("created container labels %v; want meshd's for webapp", o.Labels)
	}
	var pub *report.PublishedPort
	for i, p := range hosttest.ContainersOf(t, rep).Published {
		if p.Container == found {
			pub = &hosttest.ContainersOf(t, rep).Published[i]
		}
	}
	if pub == nil || pub.HostPort != uint16(port) || pub.State != report.ContainerHeld || pub.Module != "webapp" {
		t.Fatalf("published ports %+v; want %s's port %d, held by webapp", hosttest.ContainersOf(t, rep).Published, found, port)
	}

	before := h.RecordWrites()
	rep = h.Reconcile(ctx, assigned)
	hosttest.NoErrorsFatal(t, rep)
	if rep.Changes != 0 || h.RecordWrites() != before || hosttest.ContainerOf(t, rep, found).Changed {
		t.Fatalf("a pass with nothing to do: changes %d, record writes %d, held %+v", rep.Changes, h.RecordWrites()-before, hosttest.ContainerOf(t, rep, found))
	}

	// Taken: the found container is replaced by the declared one, which serves.
	taken := hosttest.Decl(fsm.Adopted, hosttest.Webapp("webapp", found, img, port, "new", true), hosttest.Webapp("webapp", fresh, img, freshPort, "new", true))
	rep = h.Reconcile(ctx, taken)
	hosttest.NoErrorsFatal(t, rep)
	v = hosttest.ContainerOf(t, rep, found)
	if v.State != report.ContainerReplaced || v.ID == predID || v.Action != "replaced" || !v.Running || !v.OriginalKept {
		t.Fatalf("taken: %+v; want replaced by a new container", v)
	}
	hosttest.Serves(t, port, "new from "+found)
	orig, replaced, err := h.ContainerOriginal(found)
	if err != nil || !strings.Contains(string(orig), predID) || !strings.Contains(string(replaced), predID) ||
		!strings.Contains(string(replaced), "GREETING=old") {
		t.Fatalf("the replaced container's configuration is not kept: %v\noriginal %.200s\nreplaced %.200s", err, orig, replaced)
	}
	if _, _, err := h.ContainerOriginal(fresh); err == nil {
		t.Fatal("an original reported for a container the host created")
	}

	// Unchanged: never recreated.
	ids := map[string]string{found: v.ID, fresh: hosttest.ContainerOf(t, rep, fresh).ID}
	before = h.RecordWrites()
	for i := 0; i < 10; i++ {
		rep = h.Reconcile(ctx, taken)
		hosttest.NoErrorsFatal(t, rep)
		if rep.Changes != 0 {
			t.Fatalf("reconcile %d of an unchanged declaration changed %d", i, rep.Changes)
		}
		for name, id := range ids {
			if got := hosttest.ContainerOf(t, rep, name).ID; got != id {
				t.Fatalf("reconcile %d recreated %s: id %s, was %s", i, name, got, id)
			}
		}
	}
	if n := h.RecordWrites() - before; n != 0 {
		t.Fatalf("10 passes with nothing to do wrote the record store %d times", n)
	}
}

// A held container that something else changes is reported, never touched; one whose module is
// unassigned stays; what the host created is removed on unassign; an image missing at take is an
// error naming it and the found container keeps running.
func TestContainerHeldChangedUnassignedImageMissing(t *testing.T) {
	eng := hosttest.Engine(t)
	img := hosttest.Import(t, eng, "echo", hosttest.Labsvc(t))
	b := hosttest.NewBed(t)
	h := drivertest.OpenBed(b, New(eng, hosttest.Log()))
	ctx := hosttest.DockerCtx(t)

	held, port := hosttest.ContainerName(t, "", "notes"), hosttest.FreePort(t)
	hosttest.Predecessor(t, eng, held, img, port, "old")
	fresh, freshPort := hosttest.ContainerName(t, "", "side"), hosttest.FreePort(t)
	d := hosttest.Decl(fsm.Adopted, hosttest.Webapp("notes", held, img, port, "new", false), hosttest.Webapp("notes", fresh, img, freshPort, "new", false))
	hosttest.NoErrorsFatal(t, h.Reconcile(ctx, d))

	// The predecessor, still running, recreates its container with another configuration.
	if err := eng.Remove(ctx, held); err != nil {
		t.Fatal(err)
	}
	newID := hosttest.Predecessor(t, eng, held, img, port, "still the predecessor")
	rep := h.Reconcile(ctx, d)
	hosttest.NoErrorsFatal(t, rep)
	v := hosttest.ContainerOf(t, rep, held)
	if v.State != report.ContainerHeld || !v.Changed || !strings.HasPrefix(v.Reason, report.ChangedBySomethingElse) || !strings.Contains(v.Reason, "env GREETING") {
		t.Fatalf("a held container changed by something else: %+v", v)
	}
	if o, _ := hosttest.Inspect(t, eng, held); o.ID != newID {
		t.Fatalf("a changed held container was touched: id %s, want %s", o.ID, newID)
	}
	hosttest.Serves(t, port, "still the predecessor from predecessor")

	// Taking it with an image not on the machine fails, naming the image; it keeps serving.
	missing := "hc-test/absent:" + hosttest.Rand(4)
	rep = h.Reconcile(ctx, hosttest.Decl(fsm.Adopted, asTaken(hosttest.Webapp("notes", held, missing, port, "new", false)), hosttest.Webapp("notes", fresh, img, freshPort, "new", false)))
	var failed *report.ResourceError
	for i := range rep.Errors {
		if rep.Errors[i].Resource == fsm.KindContainer+":"+held {
			failed = &rep.Errors[i]
		}
	}
	if failed == nil || !strings.Contains(failed.Reason, missing) || len(rep.Errors) != 1 {
		t.Fatalf("errors %+v; want one naming image %s", rep.Errors, missing)
	}
	if o, _ := hosttest.Inspect(t, eng, held); o.ID != newID || !o.Running {
		t.Fatalf("a failed take touched the found container: id %s running %v", o.ID, o.Running)
	}
	hosttest.Serves(t, port, "still the predecessor")
	if v := hosttest.ContainerOf(t, rep, held); v.State != report.ContainerHeld {
		t.Fatalf("after a failed take: %+v; want still held", v)
	}

	// Unassigned: the held container stays, reported; the created one goes.
	rep = h.Reconcile(ctx, hosttest.Decl(fsm.Adopted))
	hosttest.NoErrorsFatal(t, rep)
	if v := hosttest.ContainerOf(t, rep, held); v.State != report.ContainerHeld || !v.Unassigned || !v.Running {
		t.Fatalf("held, unassigned: %+v", v)
	}
	if o, ok := hosttest.Inspect(t, eng, held); !ok || o.ID != newID {
		t.Fatal("a held container was removed on unassign")
	}
	if _, ok := hosttest.Inspect(t, eng, fresh); ok {
		t.Fatal("a container the host created was not removed on unassign")
	}
	if rep = h.Reconcile(ctx, hosttest.Decl(fsm.Adopted)); rep.Changes != 0 {
		t.Fatalf("a second unassigned pass changed %d", rep.Changes)
	}
}

// Once taken, a container removed by hand is created again, one changed by hand (another image)
// is reported and converged back, and one stopped is started.
func TestContainerTakenConvergesBack(t *testing.T) {
	eng := hosttest.Engine(t)
	bin := hosttest.Labsvc(t)
	img := hosttest.Import(t, eng, "echo", bin)
	other := hosttest.Import(t, eng, "other", bin)
	b := hosttest.NewBed(t)
	h := drivertest.OpenBed(b, New(eng, hosttest.Log()))
	ctx := hosttest.DockerCtx(t)

	name, port := hosttest.ContainerName(t, "", "web"), hosttest.FreePort(t)
	d := hosttest.Decl(fsm.Converged, hosttest.Webapp("webapp", name, img, port, "hi", true))
	rep := h.Reconcile(ctx, d)
	hosttest.NoErrorsFatal(t, rep)
	if v := hosttest.ContainerOf(t, rep, name); v.State != report.ContainerCreated || v.Action != "created" {
		t.Fatalf("first pass: %+v", v)
	}
	hosttest.Serves(t, port, "hi from "+name)

	if err := eng.Remove(ctx, name); err != nil {
		t.Fatal(err)
	}
	rep = h.Reconcile(ctx, d)
	hosttest.NoErrorsFatal(t, rep)
	if v := hosttest.ContainerOf(t, rep, name); v.Action != "recreated" || v.Reason != report.RemovedBySomethingElse {
		t.Fatalf("removed by hand: %+v", v)
	}
	hosttest.Serves(t, port, "hi from "+name)

	// Changed by hand: someone runs another image under the name.
	if err := eng.Remove(ctx, name); err != nil {
		t.Fatal(err)
	}
	byHand, err := eng.Create(ctx, ctrspec.Spec{Name: name, Image: other, Ports: []string{fmt.Sprintf("127.0.0.1:%d:8080", port)},
		Cmd: []string{"--listen", ":8080", "--name", "by-hand"}})
	if err != nil {
		t.Fatal(err)
	}
	hosttest.Serves(t, port, "hello from by-hand")
	rep = h.Reconcile(ctx, d)
	hosttest.NoErrorsFatal(t, rep)
	v := hosttest.ContainerOf(t, rep, name)
	if v.Action != "recreated" || !v.Changed || !strings.Contains(v.Reason, "image: declared "+img) || v.ID == byHand || v.Image != img {
		t.Fatalf("changed by hand: %+v", v)
	}
	hosttest.Serves(t, port, "hi from "+name)

	// Stopped by hand: started, not recreated.
	cli, err := client.NewClientWithOpts(client.WithHost(container.DefaultHost), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	timeout := 1
	if err := cli.ContainerStop(ctx, v.ID, dcontainer.StopOptions{Timeout: &timeout}); err != nil {
		t.Fatal(err)
	}
	rep = h.Reconcile(ctx, d)
	hosttest.NoErrorsFatal(t, rep)
	if w := hosttest.ContainerOf(t, rep, name); w.Action != "started" || w.ID != v.ID || !w.Running {
		t.Fatalf("stopped by hand: %+v; want started, id %s", w, v.ID)
	}
	hosttest.Serves(t, port, "hi from "+name)
	if rep = h.Reconcile(ctx, d); rep.Changes != 0 {
		t.Fatalf("converged back, the next pass changed %d", rep.Changes)
	}
}

// The foundation adopted as modules (ADR 0078 as ADR 0100 cites it): a store raised at genesis
// on the port the node's settings give — not the catalogue's — is held while its module is
// assigned, adopted in place when taken (same container, never recreated), and stays on that
// port. The declaration is what the real catalogue and fsm compose.
func TestContainerFoundationAdoptedOnItsPort(t *testing.T) {
	eng := hosttest.Engine(t)
	// The store image answers on 6379 inside, as the manifest publishes it.
	img := hosttest.Import(t, eng, "store", hosttest.Labsvc(t), `CMD ["--listen", ":6379", "--name", "store"]`)
	port := hosttest.FreePort(t)
	for port == 6379 { // the catalogue default: the test is about another port
		port = hosttest.FreePort(t)
	}
	r := fsm.NewRecord()
	at := time.Now().UTC()
	apply := func(op fsm.Op, body any) {
		t.Helper()
		c, err := fsm.Encode(op, at, body)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fsm.Apply(r, c); err != nil {
			t.Fatalf("%s: %v", op, err)
		}
	}
	apply(fsm.OpGenesis, fsm.Genesis{Node: "hub", ID: "id-hub", Mode: fsm.Adopted, Advertise: "198.51.100.1",
		Settings:  map[string]string{"store.port": fmt.Sprint(port), "store.image": img},
		Catalogue: catalogue.DefaultSources(), Assign: []string{"store"}})
	name := hosttest.ContainerName(t, "", "meshd-store")
	b := hosttest.NewBed(t)
	dataDir := filepath.Join(b.Data, "store") // the store's own place in this node's data dir
	compose := func() *fsm.Declaration {
		t.Helper()
		d, err := fsm.Compose(r, "hub")
		if err != nil {
			t.Fatal(err)
		}
		var rs []fsm.Resource
		for _, res := range d.Resources {
			if res.Kind != fsm.KindContainer {
				continue
			}
			// Only so that the test neither collides with a real meshd-store nor writes to
			// /var/lib/meshd: the name and a volume's host side move, nothing else.
			c := *res.Container
			if c.Name != "meshd-store" {
				t.Fatalf("the catalogue's store is not what this test expects: %+v", c)
			}
			c.Name = name
			c.Volumes = nil
			for _, v := range res.Container.Volumes {
				if rest, ok := strings.CutPrefix(v, "/var/lib/meshd/store:"); ok {
					v = dataDir + ":" + rest
				} else if strings.HasPrefix(v, "/") {
					t.Fatalf("the catalogue's store mounts %s, which this test would not move", v)
				}
				c.Volumes = append(c.Volumes, v)
			}
			res.Container = &c
			rs = append(rs, res)
		}
		d.Resources = rs
		return d
	}
	d := compose()
	if len(d.Resources) != 1 || d.Resources[0].Container.Ports[0] != fmt.Sprintf("%d:6379/tcp", port) {
		t.Fatalf("composed store: %+v", d.Resources)
	}

	// Raised at genesis as the declaration says (by the installer's bundle, without meshd's
	// labels), on the node's port.
	c := d.Resources[0].Container
	raised, err := eng.Create(hosttest.DockerCtx(t), ctrspec.Spec{Name: c.Name, Image: c.Image, Env: c.Env, Ports: c.Ports,
		Volumes: c.Volumes, Restart: c.Restart, Labels: c.Labels, Cmd: c.Command})
	if err != nil {
		t.Fatal(err)
	}
	hosttest.Serves(t, port, "hello from store")

	h := drivertest.OpenBed(b, New(eng, hosttest.Log()))
	ctx := hosttest.DockerCtx(t)
	rep := h.Reconcile(ctx, d)
	hosttest.NoErrorsFatal(t, rep)
	if v := hosttest.ContainerOf(t, rep, name); v.State != report.ContainerHeld || v.ID != raised {
		t.Fatalf("the foundation's store, assigned: %+v; want held", v)
	}

	apply(fsm.OpModuleTake, fsm.ModuleOnNode{Node: "hub", Module: "store"})
	d = compose()
	if !d.Resources[0].Taken {
		t.Fatal("the store is not taken in the composed declaration")
	}
	rep = h.Reconcile(ctx, d)
	hosttest.NoErrorsFatal(t, rep)
	v := hosttest.ContainerOf(t, rep, name)
	onPort := len(v.Ports) > 0
	for _, p := range v.Ports {
		onPort = onPort && strings.HasSuffix(p, fmt.Sprintf(":%d->6379/tcp", port))
	}
	if v.State != report.ContainerAdopted || v.ID != raised || v.Action != "adopted" || !onPort {
		t.Fatalf("the store taken: %+v; want adopted in place (id %s) on port %d", v, raised, port)
	}
	hosttest.Serves(t, port, "hello from store")
	for i := 0; i < 3; i++ {
		if rep = h.Reconcile(ctx, d); rep.Changes != 0 || hosttest.ContainerOf(t, rep, name).ID != raised {
			t.Fatalf("pass %d after adoption: changes %d, %+v", i, rep.Changes, hosttest.ContainerOf(t, rep, name))
		}
	}

	// Converging the node takes nothing more and moves nothing.
	apply(fsm.OpModeSet, fsm.SetMode{Node: "hub", Mode: fsm.Converged})
	rep = h.Reconcile(ctx, compose())
	hosttest.NoErrorsFatal(t, rep)
	if rep.Changes != 0 || hosttest.ContainerOf(t, rep, name).ID != raised {
		t.Fatalf("converged: changes %d, %+v", rep.Changes, hosttest.ContainerOf(t, rep, name))
	}
	hosttest.Serves(t, port, "hello from store")
}

// The engine stopped: every container resource is reported failed, naming the engine's address,
// and the files still converge; started again, the same driver recovers without a restart.
func TestContainerEngineDownAndBack(t *testing.T) {
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
	h := drivertest.OpenBed(b, New(eng, hosttest.Log()))
	ctx := hosttest.DockerCtx(t)

	name := hosttest.ContainerName(t, "unix://"+dd.Sock, "svc")
	res := fsm.Resource{Module: "webapp", Kind: fsm.KindContainer, Taken: true, Container: &catalogue.Container{
		Name: name, Image: img, Restart: ctrspec.RestartUnlessStopped, Command: []string{"--listen", ":8080", "--name", name}}}
	d := hosttest.Decl(fsm.Converged, res, hosttest.File("webapp", hosttest.AppConf, "one\n", true))
	rep := h.Reconcile(ctx, d)
	hosttest.NoErrorsFatal(t, rep)
	first := hosttest.ContainerOf(t, rep, name)
	if first.State != report.ContainerCreated || !first.Running {
		t.Fatalf("first pass: %+v", first)
	}

	dd.Stop()
	d = hosttest.Decl(fsm.Converged, res, hosttest.File("webapp", hosttest.AppConf, "two\n", true))
	rep = h.Reconcile(ctx, d)
	if len(rep.Errors) != 1 || rep.Errors[0].Resource != fsm.KindContainer+":"+name ||
		!strings.Contains(rep.Errors[0].Reason, dd.Sock) || !strings.Contains(rep.Errors[0].Reason, "unreachable") {
		t.Fatalf("engine stopped: errors %+v; want the container failed naming %s", rep.Errors, dd.Sock)
	}
	if cr := hosttest.ContainersOf(t, rep); cr.Reachable || !strings.Contains(cr.EngineError, dd.Sock) || hosttest.ContainerOf(t, rep, name).ID != first.ID {
		t.Fatalf("engine stopped: report %+v", cr)
	}
	if b.Read(hosttest.AppConf) != "two\n" {
		t.Fatal("with the engine down the files did not converge")
	}
	if js, err := json.Marshal(rep); err != nil || !strings.Contains(string(js), `"reachable":false`) {
		t.Fatalf("report JSON: %s %v", js, err)
	}

	dd.Start()
	dd.WaitUp(eng.Ping)
	deadline := time.Now().Add(30 * time.Second)
	for {
		rep = h.Reconcile(ctx, d)
		v := hosttest.ContainerOf(t, rep, name)
		if len(rep.Errors) == 0 && v.Running && hosttest.ContainersOf(t, rep).Reachable {
			if v.ID != first.ID {
				t.Fatalf("recovered by recreating the container: id %s, was %s", v.ID, first.ID)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not recovered: errors %+v, %+v", rep.Errors, v)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if rep = h.Reconcile(ctx, d); rep.Changes != 0 || len(rep.Errors) != 0 {
		t.Fatalf("recovered, the next pass: changes %d errors %+v", rep.Changes, rep.Errors)
	}
}

// A container carrying meshd's labels for the declaring module is the host's, records or not (an
// earlier life, or a crash between creating it and recording it): not found, so not held, and
// not recreated.
func TestContainerLabelledIsNotFound(t *testing.T) {
	eng := hosttest.Engine(t)
	img := hosttest.Import(t, eng, "echo", hosttest.Labsvc(t))
	h := drivertest.OpenBed(hosttest.NewBed(t), New(eng, hosttest.Log()))
	ctx := hosttest.DockerCtx(t)
	name, port := hosttest.ContainerName(t, "", "labelled"), hosttest.FreePort(t)
	res := hosttest.Webapp("webapp", name, img, port, "hi", false)
	id, err := eng.Create(ctx, report.SpecOf(res))
	if err != nil {
		t.Fatal(err)
	}
	rep := h.Reconcile(ctx, hosttest.Decl(fsm.Adopted, res))
	hosttest.NoErrorsFatal(t, rep)
	if v := hosttest.ContainerOf(t, rep, name); v.State != report.ContainerCreated || v.ID != id || v.Action != "" {
		t.Fatalf("a container with meshd's labels for its module: %+v; want the host's, untouched (id %s)", v, id)
	}
	if rep = h.Reconcile(ctx, hosttest.Decl(fsm.Adopted, res)); rep.Changes != 0 || hosttest.ContainerOf(t, rep, name).ID != id {
		t.Fatalf("second pass: changes %d, %+v", rep.Changes, hosttest.ContainerOf(t, rep, name))
	}
}

// A take on the real engine is staged: when the new container cannot start (its port is held by
// another container), the found one is back at its name, the same container, serving, and the
// module's held file is not written; once the port is free the take goes through, the found
// container kept stopped under its moved-aside name, and stepping back is renaming it back and
// starting it.
func TestContainerTakeStagedFailedCutoverAndAside(t *testing.T) {
	eng := hosttest.Engine(t)
	img := hosttest.Import(t, eng, "echo", hosttest.Labsvc(t))
	b := hosttest.NewBed(t)
	h := drivertest.OpenBed(b, New(eng, hosttest.Log()))
	ctx := hosttest.DockerCtx(t)

	found, port := hosttest.ContainerName(t, "", "webapp"), hosttest.FreePort(t)
	predID := hosttest.Predecessor(t, eng, found, img, port, "old")
	hosttest.Serves(t, port, "old from predecessor")
	b.Place(hosttest.AppConf, hosttest.PredecessorContent)
	blocker, blocked := hosttest.ContainerName(t, "", "blocker"), hosttest.FreePort(t)
	if _, err := eng.Create(ctx, ctrspec.Spec{Name: blocker, Image: img, Ports: []string{fmt.Sprintf("127.0.0.1:%d:8080", blocked)},
		Cmd: []string{"--listen", ":8080", "--name", "blocker"}}); err != nil {
		t.Fatal(err)
	}
	web := hosttest.Webapp("webapp", found, img, port, "new", false)
	web.Container.Ports = append(web.Container.Ports, fmt.Sprintf("127.0.0.1:%d:8081/tcp", blocked))
	conf := hosttest.File("webapp", hosttest.AppConf, hosttest.MeshContent, false)
	hosttest.NoErrorsFatal(t, h.Reconcile(ctx, hosttest.Decl(fsm.Adopted, web, conf)))

	// The take: the new container cannot start; what was found is put back.
	rep := h.Reconcile(ctx, hosttest.Decl(fsm.Adopted, asTaken(web), asTaken(conf)))
	var why string
	for _, e := range rep.Errors {
		if e.Resource == fsm.KindContainer+":"+found {
			why = e.Reason
		}
	}
	if !strings.Contains(why, "starting the new container") || !strings.Contains(why, "is back") {
		t.Fatalf("failed cutover reported as %q (errors %+v)", why, rep.Errors)
	}
	if o, ok := hosttest.Inspect(t, eng, found); !ok || o.ID != predID || !o.Running || o.Spec.Restart != ctrspec.RestartUnlessStopped {
		t.Fatalf("after a failed cutover %s is %s running %v restart %q; want the found %s, running, unless-stopped",
			found, report.Short(o.ID), o.Running, o.Spec.Restart, report.Short(predID))
	}
	hosttest.Serves(t, port, "old from predecessor")
	for _, other := range []string{stagedName(found), report.AsideName(found, predID)} {
		if _, ok := hosttest.Inspect(t, eng, other); ok {
			t.Fatalf("%s left after a failed cutover", other)
		}
	}
	if got := b.Read(hosttest.AppConf); got != hosttest.PredecessorContent {
		t.Fatalf("the held file was written though the cutover failed: %q", got)
	}

	// The port freed and the failed cutover's wait over, the take goes through; the found
	// container is kept, stopped, aside.
	if err := eng.Remove(ctx, blocker); err != nil {
		t.Fatal(err)
	}
	h.Driver(fsm.KindContainer).(*Driver).now = func() time.Time { return time.Now().Add(time.Minute) }
	rep = h.Reconcile(ctx, hosttest.Decl(fsm.Adopted, asTaken(web), asTaken(conf)))
	hosttest.NoErrorsFatal(t, rep)
	hosttest.Serves(t, port, "new from "+found)
	aside := report.AsideName(found, predID)
	if o, ok := hosttest.Inspect(t, eng, aside); !ok || o.ID != predID || o.Running || o.Spec.Restart != ctrspec.RestartNo {
		t.Fatalf("the replaced container is not kept stopped as %s, restart no: found %v, id %s, running %v, restart %q",
			aside, ok, report.Short(o.ID), o.Running, o.Spec.Restart)
	}
	if v := hosttest.ContainerOf(t, rep, found); v.State != report.ContainerReplaced || v.Aside != aside {
		t.Fatalf("taken: %+v", v)
	}
	cf, err := h.ContainerFound(found)
	if err != nil || cf.Aside != aside || cf.ReplacedID != predID || !strings.Contains(string(cf.Replaced), "GREETING=old") {
		t.Fatalf("what was found of %s: %+v, %v", found, cf, err)
	}
	if got := b.Read(hosttest.AppConf); got != hosttest.MeshContent {
		t.Fatalf("file after the take: %q", got)
	}
	// Passes after the take leave the aside container alone.
	hosttest.NoErrorsFatal(t, h.Reconcile(ctx, hosttest.Decl(fsm.Adopted, asTaken(web), asTaken(conf))))
	if _, ok := hosttest.Inspect(t, eng, aside); !ok {
		t.Fatal("the aside container was removed by a later pass")
	}

	// Stepping back is a restart: the new one stopped and moved away, the found one renamed back.
	newID := hosttest.ContainerOf(t, rep, found).ID
	for _, step := range []error{eng.Stop(ctx, newID), eng.Rename(ctx, newID, found+".stepped-back"), eng.Rename(ctx, predID, found),
		eng.SetRestart(ctx, found, cf.AsideRestart), eng.Start(ctx, found)} {
		if step != nil {
			t.Fatal(step)
		}
	}
	t.Cleanup(func() { testenv.RemoveContainers(t, container.DefaultHost, found+".stepped-back") })
	hosttest.Serves(t, port, "old from predecessor")
}
