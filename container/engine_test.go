package container

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	dcontainer "github.com/docker/docker/api/types/container"
	"github.com/docker/go-connections/nat"

	"meshd/ctrspec"
	"meshd/internal/testenv"
)

// webappSpec is a module's declaration of one labsvc container answering on hostPort.
func webappSpec(name, image string, hostPort int, greeting string) ctrspec.Spec {
	return ctrspec.Spec{
		Name:    name,
		Image:   image,
		Env:     map[string]string{"GREETING": greeting},
		Ports:   []string{fmt.Sprintf("127.0.0.1:%d:8080", hostPort)},
		Restart: ctrspec.RestartUnlessStopped,
		Labels:  ctrspec.ManagedLabels("webapp"),
		Cmd:     []string{"--listen", ":8080", "--name", "webapp"},
	}
}

func TestCreateServes(t *testing.T) {
	e := requireEngine(t)
	img := labsvcImages(t, e)
	ctx := testCtx(t)
	name := testName(t, "webapp")
	port := testenv.FreePort(t)

	id, err := e.Create(ctx, webappSpec(name, img.echo, port, "hi"))
	if err != nil {
		t.Fatal(err)
	}
	serves(t, port, "hi from webapp")

	o, found, err := e.Inspect(ctx, name)
	if err != nil || !found {
		t.Fatalf("Inspect(%s) = found %v, %v", name, found, err)
	}
	wantImageID, err := e.ImageID(ctx, img.echo)
	if err != nil {
		t.Fatal(err)
	}
	if o.ID != id || !o.Running || !o.Managed || o.Module != "webapp" || o.ImageID != wantImageID || o.ImageRef != img.echo {
		t.Errorf("observed id %s running %v managed %v module %q image %s (%s); want id %s running managed webapp image %s (%s)",
			o.ID, o.Running, o.Managed, o.Module, o.ImageRef, o.ImageID, id, img.echo, wantImageID)
	}
	if len(o.Ports) == 0 || o.Ports[0].HostPort != uint16(port) || o.Ports[0].ContainerPort != 8080 || o.Ports[0].Proto != "tcp" {
		t.Errorf("observed ports %v, want 127.0.0.1:%d -> 8080/tcp", o.Ports, port)
	}

	// A second container on the same name is refused, and says so.
	if _, err := e.Create(ctx, webappSpec(name, img.echo, testenv.FreePort(t), "hi")); err == nil || !strings.Contains(err.Error(), name) {
		t.Errorf("Create on a name in use: %v, want an error naming %s", err, name)
	}
	// Remove is idempotent.
	if err := e.Remove(ctx, name); err != nil {
		t.Fatal(err)
	}
	if err := e.Remove(ctx, name); err != nil {
		t.Errorf("second Remove: %v", err)
	}
	if _, found, err := e.Inspect(ctx, name); found || err != nil {
		t.Errorf("after Remove: found %v, %v", found, err)
	}
}

func TestCreateMissingImage(t *testing.T) {
	e := requireEngine(t)
	ctx := testCtx(t)
	name := testName(t, "noimage")
	missing := "ct-test/absent:" + runID
	_, err := e.Create(ctx, ctrspec.Spec{Name: name, Image: missing})
	var im *ImageMissingError
	if !errors.Is(err, ErrImageMissing) || !errors.As(err, &im) || im.Image != missing || !strings.Contains(err.Error(), missing) {
		t.Fatalf("Create with a missing image: %v, want ErrImageMissing naming %s", err, missing)
	}
	if _, found, _ := e.Inspect(ctx, name); found {
		t.Error("a container was left behind")
	}
}

func TestCreatePortHeldLeavesNothing(t *testing.T) {
	e := requireEngine(t)
	img := labsvcImages(t, e)
	ctx := testCtx(t)
	first, second := testName(t, "holder"), testName(t, "late")
	port := testenv.FreePort(t)
	if _, err := e.Create(ctx, webappSpec(first, img.echo, port, "first")); err != nil {
		t.Fatal(err)
	}
	_, err := e.Create(ctx, webappSpec(second, img.echo, port, "second"))
	if err == nil || !strings.Contains(err.Error(), strconv.Itoa(port)) {
		t.Fatalf("Create on a held port: %v, want an error naming port %d", err, port)
	}
	if _, found, _ := e.Inspect(ctx, second); found {
		t.Error("the container that could not start was left behind")
	}
	serves(t, port, "first from webapp")
}

func TestUnchangedSpecNeverRecreated(t *testing.T) {
	e := requireEngine(t)
	img := labsvcImages(t, e)
	ctx := testCtx(t)
	name := testName(t, "steady")
	p1, p2 := testenv.FreePort(t), testenv.FreePort(t)
	dir := t.TempDir()
	spec := ctrspec.Spec{
		Name:    name,
		Image:   img.echo,
		Env:     map[string]string{"GREETING": "steady", "MODE": "test"},
		Ports:   []string{fmt.Sprintf("127.0.0.1:%d:8080", p1), fmt.Sprintf("127.0.0.1:%d:9090/tcp", p2)},
		Volumes: []string{dir + ":/data:ro"},
		Restart: ctrspec.RestartOnFailure + ":3",
		Labels:  ctrspec.ManagedLabels("steady"),
		Cmd:     []string{"--listen", ":8080", "--listen", ":9090", "--name", "steady"},
	}
	id, err := e.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	serves(t, p2, "steady from steady")

	// The same declaration written differently is the same declaration.
	same := spec
	same.Ports = []string{fmt.Sprintf("127.0.0.1:%d:9090", p2), fmt.Sprintf("127.0.0.1:%d:8080/TCP", p1)}
	same.Volumes = []string{dir + "/:/data/:ro"}
	for i := 0; i < 10; i++ {
		o, found, err := e.Inspect(ctx, name)
		if err != nil || !found {
			t.Fatalf("reconcile %d: found %v, %v", i, found, err)
		}
		if o.ID != id {
			t.Fatalf("reconcile %d: id changed %s -> %s", i, id, o.ID)
		}
		s := spec
		if i%2 == 1 {
			s = same
		}
		if d := Diff(s, o); len(d) != 0 {
			t.Fatalf("reconcile %d: Diff of an unchanged spec = %q, want none", i, d)
		}
	}

	o, _, err := e.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	// The container inherits PATH and a label from its image; neither is a difference, and
	// neither shows in the reconstructed spec.
	if o.Env["PATH"] == "" || o.Labels["org.example.built-by"] != "ct" {
		t.Fatalf("test image inheritance not in effect: env %v labels %v", o.Env, o.Labels)
	}
	if _, ok := o.Spec.Env["PATH"]; ok {
		t.Errorf("reconstructed env carries the image's PATH: %v", o.Spec.Env)
	}

	changed := func(field string, mutate func(*ctrspec.Spec)) {
		t.Helper()
		s := spec
		s.Env, s.Labels = maps.Clone(spec.Env), maps.Clone(spec.Labels)
		s.Ports, s.Volumes = slices.Clone(spec.Ports), slices.Clone(spec.Volumes)
		mutate(&s)
		d := Diff(s, o)
		if len(d) == 0 || !slices.ContainsFunc(d, func(l string) bool { return strings.HasPrefix(l, field) }) {
			t.Errorf("changed %s: Diff = %q, want a line about %s", field, d, field)
		}
	}
	changed("env GREETING", func(s *ctrspec.Spec) { s.Env["GREETING"] = "other" })
	changed("env EXTRA", func(s *ctrspec.Spec) { s.Env["EXTRA"] = "1" })
	changed("env MODE", func(s *ctrspec.Spec) { delete(s.Env, "MODE") })
	changed("image", func(s *ctrspec.Spec) { s.Image = img.echo2 })
	changed("ports", func(s *ctrspec.Spec) { s.Ports[0] = fmt.Sprintf("127.0.0.1:%d:8081", p1) })
	changed("ports", func(s *ctrspec.Spec) { s.Ports = s.Ports[:1] })
	changed("volumes", func(s *ctrspec.Spec) { s.Volumes = []string{dir + ":/data"} })
	changed("restart", func(s *ctrspec.Spec) { s.Restart = ctrspec.RestartAlways })
	changed("labels meshd.module", func(s *ctrspec.Spec) { s.Labels[ctrspec.LabelModule] = "other" })
	changed("cmd", func(s *ctrspec.Spec) { s.Cmd = []string{"--listen", ":8080"} })

	// The env value is never printed: it may be a secret.
	s := spec
	s.Env = map[string]string{"GREETING": "s3cret-value", "MODE": "test"}
	if d := strings.Join(Diff(s, o), "\n"); strings.Contains(d, "s3cret") || strings.Contains(d, "steady\"") {
		t.Errorf("Diff prints env values: %s", d)
	}
}

// TestFoundContainerInspectedFaithfully: a predecessor's container, created through the Docker
// API without meshd's labels, comes back as it was made — what a held container is reported as.
func TestFoundContainerInspectedFaithfully(t *testing.T) {
	e := requireEngine(t)
	img := labsvcImages(t, e)
	ctx := testCtx(t)
	name := testName(t, "legacy")
	port := testenv.FreePort(t)
	dir := t.TempDir()
	id := createByHand(t, name, img.echo, port, "old", dir)
	serves(t, port, "old from legacy")

	o, found, err := e.Inspect(ctx, name)
	if err != nil || !found {
		t.Fatalf("Inspect(%s) = found %v, %v", name, found, err)
	}
	want := ctrspec.Spec{
		Name:    name,
		Image:   img.echo,
		Env:     map[string]string{"GREETING": "old", "PREDECESSOR": "yes"},
		Ports:   []string{fmt.Sprintf("127.0.0.1:%d:8080", port)},
		Volumes: []string{dir + ":/data:ro"},
		Restart: ctrspec.RestartUnlessStopped,
		Labels:  map[string]string{"com.example.predecessor": "legacy"},
		Cmd:     []string{"--listen", ":8080", "--name", "legacy"},
	}
	if o.ID != id || !o.Running || o.Managed || o.Module != "" {
		t.Errorf("observed id %s running %v managed %v module %q; want %s, running, not managed", o.ID, o.Running, o.Managed, o.Module, id)
	}
	if got, _ := json.Marshal(o.Spec); string(got) != string(must(json.Marshal(want))) {
		t.Errorf("reconstructed spec\n got %s\nwant %s", got, must(json.Marshal(want)))
	}
	if len(o.Ports) == 0 || o.Ports[0].HostIP != "127.0.0.1" || o.Ports[0].HostPort != uint16(port) || o.Ports[0].Container != name {
		t.Errorf("observed published ports %v, want 127.0.0.1:%d of %s", o.Ports, port, name)
	}
	if !strings.Contains(string(o.Raw), id) {
		t.Errorf("raw inspect JSON does not carry the id")
	}
	// The reconstruction is a valid spec, and it does not differ from what is running.
	if err := o.Spec.Validate(); err != nil {
		t.Errorf("reconstructed spec does not validate: %v", err)
	}
	if d := Diff(o.Spec, o); len(d) != 0 {
		t.Errorf("Diff(reconstructed, observed) = %q", d)
	}
	// Declared by a module, the difference is exactly meshd's labels (and what the module changes).
	decl := o.Spec
	decl.Labels = maps.Clone(decl.Labels)
	maps.Copy(decl.Labels, ctrspec.ManagedLabels("legacy"))
	d := Diff(decl, o)
	if len(d) != 2 || !strings.HasPrefix(d[0], "labels "+ctrspec.LabelManaged) || !strings.HasPrefix(d[1], "labels "+ctrspec.LabelModule) {
		t.Errorf("Diff with meshd's labels added = %q, want exactly the two labels", d)
	}
	// An id prefix is not a name.
	if _, found, _ := e.Inspect(ctx, id[:12]); found {
		t.Errorf("Inspect by an id prefix found a container")
	}
}

// createByHand creates and starts a container the way a predecessor would: straight through the
// Docker API, without meshd's labels.
func createByHand(t *testing.T, name, image string, port int, greeting, dir string) string {
	t.Helper()
	ctx := testCtx(t)
	cli := rawClient(t)
	p := nat.Port("8080/tcp")
	resp, err := cli.ContainerCreate(ctx, &dcontainer.Config{
		Image:        image,
		Env:          []string{"PREDECESSOR=yes", "GREETING=" + greeting},
		Cmd:          []string{"--listen", ":8080", "--name", "legacy"},
		Labels:       map[string]string{"com.example.predecessor": "legacy"},
		ExposedPorts: nat.PortSet{p: {}},
	}, &dcontainer.HostConfig{
		PortBindings:  nat.PortMap{p: {{HostIP: "127.0.0.1", HostPort: strconv.Itoa(port)}}},
		Binds:         []string{dir + ":/data:ro"},
		RestartPolicy: dcontainer.RestartPolicy{Name: dcontainer.RestartPolicyUnlessStopped},
	}, nil, nil, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := cli.ContainerStart(ctx, resp.ID, dcontainer.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	return resp.ID
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestReplaceFound(t *testing.T) {
	e := requireEngine(t)
	img := labsvcImages(t, e)
	ctx := testCtx(t)
	name := testName(t, "legacy")
	port := testenv.FreePort(t)
	oldID := createByHand(t, name, img.echo, port, "old", t.TempDir())
	serves(t, port, "old from legacy")

	found, ok, err := e.Inspect(ctx, name)
	if err != nil || !ok {
		t.Fatalf("Inspect: %v %v", ok, err)
	}

	// Taking with an image that is not there changes nothing.
	spec := webappSpec(name, "ct-test/absent:"+runID, port, "new")
	_, _, err = e.Replace(ctx, found, spec)
	if !errors.Is(err, ErrImageMissing) || !strings.Contains(err.Error(), spec.Image) {
		t.Fatalf("Replace with a missing image: %v, want ErrImageMissing naming %s", err, spec.Image)
	}
	if o, ok, err := e.Inspect(ctx, name); err != nil || !ok || o.ID != oldID || !o.Running {
		t.Fatalf("after a failed take the old container is %+v (found %v, %v), want %s running", o.ID, ok, err, oldID)
	}
	serves(t, port, "old from legacy")

	// Taking it for real.
	spec.Image = img.echo
	newID, replaced, err := e.Replace(ctx, found, spec)
	if err != nil {
		t.Fatal(err)
	}
	serves(t, port, "new from webapp")
	if newID == oldID {
		t.Fatal("Replace kept the old id")
	}
	var old dcontainer.InspectResponse
	if err := json.Unmarshal(replaced, &old); err != nil {
		t.Fatalf("replaced config is not the inspect JSON: %v", err)
	}
	if old.ID != oldID || !slices.Contains(old.Config.Env, "GREETING=old") || old.Config.Labels["com.example.predecessor"] != "legacy" {
		t.Errorf("replaced config: id %s env %v labels %v; want the predecessor's", old.ID, old.Config.Env, old.Config.Labels)
	}
	o, ok, err := e.Inspect(ctx, name)
	if err != nil || !ok || o.ID != newID || !o.Managed || len(Diff(spec, o)) != 0 {
		t.Errorf("after take: found %v id %s managed %v diff %q err %v", ok, o.ID, o.Managed, Diff(spec, o), err)
	}
	if _, err := rawClient(t).ContainerInspect(ctx, oldID); err == nil {
		t.Errorf("the old container %s is still there", oldID)
	}

	// A take that cannot start (its port held by another container) puts the old one back.
	blocker := testName(t, "blocker")
	other := testenv.FreePort(t)
	if _, err := e.Create(ctx, webappSpec(blocker, img.echo, other, "blocker")); err != nil {
		t.Fatal(err)
	}
	bad := webappSpec(name, img.echo2, other, "never")
	if _, _, err := e.Replace(ctx, o, bad); err == nil {
		t.Fatal("Replace onto a held port succeeded")
	}
	if back, ok, err := e.Inspect(ctx, name); err != nil || !ok || back.ID != newID || !back.Running {
		t.Fatalf("after a failed replace: %s found %v running %v err %v, want %s back and running", back.ID, ok, back.Running, err, newID)
	}
	serves(t, port, "new from webapp")
}

func TestPublishedListsEveryContainer(t *testing.T) {
	e := requireEngine(t)
	img := labsvcImages(t, e)
	ctx := testCtx(t)
	legacy, mine := testName(t, "legacy"), testName(t, "mine")
	lp, mp := testenv.FreePort(t), testenv.FreePort(t)
	createByHand(t, legacy, img.echo, lp, "old", t.TempDir())
	if _, err := e.Create(ctx, webappSpec(mine, img.echo, mp, "mine")); err != nil {
		t.Fatal(err)
	}
	ps, err := e.Published(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var sawLegacy, sawMine bool
	for _, p := range ps {
		switch {
		case p.Container == legacy && p.HostIP == "127.0.0.1" && p.HostPort == uint16(lp) && p.ContainerPort == 8080 && p.Proto == "tcp" && p.Module == "":
			sawLegacy = true
		case p.Container == mine && p.HostPort == uint16(mp) && p.Module == "webapp":
			sawMine = true
		}
	}
	if !sawLegacy || !sawMine {
		t.Errorf("Published = %v; want %s on 127.0.0.1:%d (no module) and %s on %d (module webapp)", ps, legacy, lp, mine, mp)
	}
}

// A container observed again asks for its image once: the image is kept by its id (the digest
// of its configuration, which never changes), and the second observation reads the same as the
// first; a fresh Engine, which has asked for nothing, observes it the same again.
func TestInspectKeepsImagesByID(t *testing.T) {
	e := requireEngine(t)
	img := labsvcImages(t, e)
	ctx := testCtx(t)
	name := testName(t, "cached")
	if _, err := e.Create(ctx, webappSpec(name, img.echo, testenv.FreePort(t), "cached")); err != nil {
		t.Fatal(err)
	}
	first, found, err := e.Inspect(ctx, name)
	if err != nil || !found {
		t.Fatalf("Inspect(%s) = found %v, %v", name, found, err)
	}
	e.imgMu.Lock()
	_, kept := e.images[first.ImageID]
	n := len(e.images)
	e.imgMu.Unlock()
	if !kept || n == 0 {
		t.Fatalf("the image %s is not kept by its id after an inspection (%d kept)", first.ImageID, n)
	}
	fresh, err := New(e.Host())
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	for _, who := range []struct {
		what string
		e    *Engine
	}{{"again", e}, {"by an engine that kept nothing", fresh}} {
		o, _, err := who.e.Inspect(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if !o.ImageKnown || o.ImageID != first.ImageID || o.RefImageID != first.RefImageID ||
			!maps.Equal(o.ImageEnv, first.ImageEnv) || !maps.Equal(o.ImageLabels, first.ImageLabels) ||
			!slices.Equal(o.ImageCmd, first.ImageCmd) || fmt.Sprint(o.Spec) != fmt.Sprint(first.Spec) {
			t.Fatalf("observed %s: %+v\nfirst: %+v", who.what, o.Spec, first.Spec)
		}
	}
	if len(first.ImageEnv) == 0 || first.ImageEnv["GREETING"] != "hello" {
		t.Fatalf("the image's own env reads %v, want GREETING=hello among it", first.ImageEnv)
	}
}

// BenchmarkInspect is one observation of a container: its image kept from the last one (what a
// pass does) and asked for again (what every pass did).
func BenchmarkInspect(b *testing.B) {
	e := requireEngine(b)
	img := labsvcImages(b, e)
	ctx := testCtx(b)
	name := testName(b, "bench")
	if _, err := e.Create(ctx, webappSpec(name, img.echo, testenv.FreePort(b), "bench")); err != nil {
		b.Fatal(err)
	}
	for _, kept := range []bool{true, false} {
		b.Run(map[bool]string{true: "image-kept", false: "image-asked"}[kept], func(b *testing.B) {
			for b.Loop() {
				if !kept {
					e.imgMu.Lock()
					e.images = nil
					e.imgMu.Unlock()
				}
				if _, _, err := e.Inspect(ctx, name); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
