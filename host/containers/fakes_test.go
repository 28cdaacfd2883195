package containers

// In-memory fakes of what the host's drivers need of the machine (the engine and packetFilter
// interfaces), for the unit tests that check the host's decisions without root, in milliseconds.
// The real parts are checked by the root tests against the real engine and kernel.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"meshd/container"
	"meshd/ctrspec"
)

// fakeEngine is a container engine in memory: containers by name, the images it has, and whether
// it answers at all.
type fakeEngine struct {
	mu     sync.Mutex
	host   string
	down   bool
	images map[string]bool
	ctrs   map[string]*fakeCtr
	seq    int
	// ops are the calls that changed something ("create NAME", "replace NAME", "prepare NAME as
	// STAGED", "stop NAME", "rename NAME to OTHER", "start NAME", "remove NAME"), in order, each
	// container named by the name it had when called.
	ops []string
	// failStart makes starting a container of that image fail; failPrepare makes every Prepare
	// fail (a refused configuration).
	failStart   map[string]error
	failPrepare error
	// onStart, when set, is called (unlocked) after a container is started: a test looks at the
	// machine at that moment of a take.
	onStart func(name string)
}

type fakeCtr struct {
	id      string
	spec    ctrspec.Spec
	running bool
}

func newFakeEngine(images ...string) *fakeEngine {
	f := &fakeEngine{host: "unix:///run/fake-docker.sock", images: map[string]bool{}, ctrs: map[string]*fakeCtr{}, failStart: map[string]error{}}
	for _, i := range images {
		f.images[i] = true
	}
	return f
}

func (f *fakeEngine) Host() string { return f.host }

func (f *fakeEngine) unreachable(op string) error {
	return &container.UnreachableError{Host: f.host, Op: op, Err: errors.New("connection refused")}
}

func (f *fakeEngine) newID() string {
	f.seq++
	return fmt.Sprintf("sha256:%064x", f.seq)
}

// run puts a container at spec.Name directly, as something other than the host would: a
// predecessor's container, a hand edit. It returns its id.
func (f *fakeEngine) run(spec ctrspec.Spec) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := f.newID()
	f.ctrs[spec.Name] = &fakeCtr{id: id, spec: spec, running: true}
	return id
}

// stop stops a container by hand; gone removes one by hand.
func (f *fakeEngine) stop(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ctrs[name].running = false
}

func (f *fakeEngine) gone(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.ctrs, name)
}

func (f *fakeEngine) get(name string) (fakeCtr, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.ctrs[name]
	if !ok {
		return fakeCtr{}, false
	}
	return *c, true
}

func (f *fakeEngine) takeOps() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	ops := f.ops
	f.ops = nil
	return ops
}

// observe is what the engine shows of c: its declaration read back, ports in the catalogue's form.
func (f *fakeEngine) observe(name string, c *fakeCtr) container.Observed {
	spec := c.spec
	spec.Ports = nil
	var pub []container.Published
	for _, p := range c.spec.Ports {
		b, err := ctrspec.ParsePort(p)
		if err != nil {
			continue
		}
		spec.Ports = append(spec.Ports, b.String())
		if c.running {
			pub = append(pub, container.Published{Container: name, ContainerID: c.id, Module: c.spec.Labels[ctrspec.LabelModule],
				HostIP: "0.0.0.0", HostPort: b.HostPort, ContainerPort: b.ContainerPort, Proto: b.Proto})
		}
	}
	status := "exited"
	if c.running {
		status = "running"
	}
	imageID := "sha256:image-of-" + c.spec.Image
	return container.Observed{ID: c.id, Name: name, ImageRef: c.spec.Image, ImageID: imageID, RefImageID: imageID,
		Running: c.running, Status: status, Managed: c.spec.Labels[ctrspec.LabelManaged] == "true",
		Module: c.spec.Labels[ctrspec.LabelModule], Spec: spec, Env: maps.Clone(c.spec.Env),
		Labels: maps.Clone(c.spec.Labels), Cmd: slices.Clone(c.spec.Cmd), Ports: pub, ImageKnown: true}
}

func (f *fakeEngine) Inspect(_ context.Context, name string) (container.Observed, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return container.Observed{}, false, f.unreachable("inspect container " + name)
	}
	c, ok := f.ctrs[name]
	if !ok {
		return container.Observed{}, false, nil
	}
	o := f.observe(name, c)
	o.Raw, _ = json.Marshal(map[string]any{"Id": c.id, "Name": "/" + name, "Config": c.spec})
	return o, true, nil
}

func (f *fakeEngine) imageMissing(spec ctrspec.Spec) error {
	if f.images[spec.Image] {
		return nil
	}
	return &container.ImageMissingError{Image: spec.Image, Container: spec.Name, Host: f.host}
}

func (f *fakeEngine) Create(_ context.Context, spec ctrspec.Spec) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return "", f.unreachable("create container " + spec.Name)
	}
	if err := f.imageMissing(spec); err != nil {
		return "", err
	}
	if _, ok := f.ctrs[spec.Name]; ok {
		return "", fmt.Errorf("create container %s (engine %s): the name is in use", spec.Name, f.host)
	}
	id := f.newID()
	f.ctrs[spec.Name] = &fakeCtr{id: id, spec: spec, running: true}
	f.ops = append(f.ops, "create "+spec.Name)
	return id, nil
}

func (f *fakeEngine) Replace(_ context.Context, old container.Observed, spec ctrspec.Spec) (string, json.RawMessage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return "", nil, f.unreachable("replace container " + spec.Name)
	}
	// The image is checked before the old container is touched: a missing one leaves it running.
	if err := f.imageMissing(spec); err != nil {
		return "", nil, err
	}
	c, ok := f.ctrs[spec.Name]
	if !ok || c.id != old.ID {
		return "", nil, fmt.Errorf("replace container %s (engine %s): it is not the container observed", spec.Name, f.host)
	}
	raw, _ := json.Marshal(map[string]any{"Id": c.id, "Name": "/" + spec.Name, "Config": c.spec})
	id := f.newID()
	f.ctrs[spec.Name] = &fakeCtr{id: id, spec: spec, running: true}
	f.ops = append(f.ops, "replace "+spec.Name)
	return id, raw, nil
}

// lookup finds a container by its exact name or its id; it returns its name.
func (f *fakeEngine) lookup(ref string) (string, *fakeCtr) {
	if c, ok := f.ctrs[ref]; ok {
		return ref, c
	}
	for name, c := range f.ctrs {
		if c.id == ref {
			return name, c
		}
	}
	return "", nil
}

func (f *fakeEngine) Start(_ context.Context, ref string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return f.unreachable("start container " + ref)
	}
	name, c := f.lookup(ref)
	if c == nil {
		return fmt.Errorf("start container %s (engine %s): no such container", ref, f.host)
	}
	if err := f.failStart[c.spec.Image]; err != nil {
		return fmt.Errorf("start container %s (engine %s): %w", name, f.host, err)
	}
	c.running = true
	f.ops = append(f.ops, "start "+name)
	if hook := f.onStart; hook != nil {
		f.mu.Unlock()
		defer f.mu.Lock()
		hook(name)
	}
	return nil
}

func (f *fakeEngine) Remove(_ context.Context, ref string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return f.unreachable("remove container " + ref)
	}
	if name, c := f.lookup(ref); c != nil {
		delete(f.ctrs, name)
		f.ops = append(f.ops, "remove "+name)
	}
	return nil
}

func (f *fakeEngine) Prepare(_ context.Context, spec ctrspec.Spec, as string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return "", f.unreachable("prepare container " + spec.Name)
	}
	if err := f.imageMissing(spec); err != nil {
		return "", err
	}
	if f.failPrepare != nil {
		return "", fmt.Errorf("prepare container %s (engine %s): %w", spec.Name, f.host, f.failPrepare)
	}
	if _, ok := f.ctrs[as]; ok {
		return "", fmt.Errorf("prepare container %s as %s (engine %s): the name is in use", spec.Name, as, f.host)
	}
	id := f.newID()
	f.ctrs[as] = &fakeCtr{id: id, spec: spec}
	f.ops = append(f.ops, "prepare "+spec.Name+" as "+as)
	return id, nil
}

func (f *fakeEngine) Stop(_ context.Context, ref string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return f.unreachable("stop container " + ref)
	}
	name, c := f.lookup(ref)
	if c == nil {
		return fmt.Errorf("stop container %s (engine %s): no such container", ref, f.host)
	}
	c.running = false
	f.ops = append(f.ops, "stop "+name)
	return nil
}

func (f *fakeEngine) SetRestart(_ context.Context, ref, restart string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return f.unreachable("update container " + ref)
	}
	name, c := f.lookup(ref)
	if c == nil {
		return fmt.Errorf("update container %s (engine %s): no such container", ref, f.host)
	}
	c.spec.Restart = restart
	f.ops = append(f.ops, "restart "+name+" "+restart)
	return nil
}

func (f *fakeEngine) Rename(_ context.Context, ref, to string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return f.unreachable("rename container " + ref)
	}
	name, c := f.lookup(ref)
	if c == nil {
		return fmt.Errorf("rename container %s (engine %s): no such container", ref, f.host)
	}
	if _, taken := f.ctrs[to]; taken {
		return fmt.Errorf("rename container %s to %s (engine %s): the name is in use", name, to, f.host)
	}
	delete(f.ctrs, name)
	f.ctrs[to] = c
	f.ops = append(f.ops, "rename "+name+" to "+to)
	return nil
}

func (f *fakeEngine) Published(context.Context) ([]container.Published, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, f.unreachable("list containers")
	}
	var out []container.Published
	for _, name := range slices.Sorted(maps.Keys(f.ctrs)) {
		out = append(out, f.observe(name, f.ctrs[name]).Ports...)
	}
	return out, nil
}

var _ engine = (*fakeEngine)(nil)
