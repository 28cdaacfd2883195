package host

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
	"time"

	"meshd/container"
	"meshd/netfilter"
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
	spec    container.Spec
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
func (f *fakeEngine) run(spec container.Spec) string {
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
		b, err := container.ParsePort(p)
		if err != nil {
			continue
		}
		spec.Ports = append(spec.Ports, b.String())
		if c.running {
			pub = append(pub, container.Published{Container: name, ContainerID: c.id, Module: c.spec.Labels[container.LabelModule],
				HostIP: "0.0.0.0", HostPort: b.HostPort, ContainerPort: b.ContainerPort, Proto: b.Proto})
		}
	}
	status := "exited"
	if c.running {
		status = "running"
	}
	imageID := "sha256:image-of-" + c.spec.Image
	return container.Observed{ID: c.id, Name: name, ImageRef: c.spec.Image, ImageID: imageID, RefImageID: imageID,
		Running: c.running, Status: status, Managed: c.spec.Labels[container.LabelManaged] == "true",
		Module: c.spec.Labels[container.LabelModule], Spec: spec, Env: maps.Clone(c.spec.Env),
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

func (f *fakeEngine) imageMissing(spec container.Spec) error {
	if f.images[spec.Image] {
		return nil
	}
	return &container.ImageMissingError{Image: spec.Image, Container: spec.Name, Host: f.host}
}

func (f *fakeEngine) Create(_ context.Context, spec container.Spec) (string, error) {
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

func (f *fakeEngine) Replace(_ context.Context, old container.Observed, spec container.Spec) (string, json.RawMessage, error) {
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

func (f *fakeEngine) Prepare(_ context.Context, spec container.Spec, as string) (string, error) {
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

// fakeFilter is the machine's packet filter in memory: a found firewall (its kind, whether it is
// active, or why it is not spoken), the meshd-marked rules in it, and meshd's own two tables.
type fakeFilter struct {
	mu        sync.Mutex
	found     netfilter.Found
	detectErr error
	// marked are the meshd-marked rules in the found firewall, by mark.
	marked map[string]netfilter.Opening
	// guard and filter are meshd's own tables; nil when not loaded.
	guard  *netfilter.GuardSpec
	filter *netfilter.FilterSpec
	// retires and restores count the calls; retireErr fails Retire.
	retires, restores int
	retireErr         error
	// leftover, when set, is what Detect reads once the found firewall is retired (what ufw
	// leaves behind in iptables reads as an iptables firewall).
	leftover *netfilter.Found
	// ops are the writes to the packet filter, in order.
	ops []string
	// kept is what KeepForBoot kept last; keeps counts its calls.
	kept  *netfilter.BootTables
	keeps int
	// stamp is what Stamp reads ("": none, every pass detects); detects counts Detect's calls.
	stamp   string
	detects int
	// reads counts the reads of the packet filter's rules and tables (Converge, Guard,
	// LoadFilter). live makes Watch act as a subscribed nftables monitor: it notes itself in the
	// driver's changes (kept in changes, for a test to note events) and ends with ctx.
	reads   int
	live    bool
	changes *netfilter.Changes
}

func newFakeFilter(found netfilter.Found) *fakeFilter {
	return &fakeFilter{found: found, marked: map[string]netfilter.Opening{}}
}

func (f *fakeFilter) Detect(context.Context) (netfilter.Found, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.detects++
	if f.detectErr != nil {
		return netfilter.Found{}, f.detectErr
	}
	return f.found, nil
}

func (f *fakeFilter) NewDriver(found netfilter.Found, _ netfilter.Private) (netfilter.Driver, error) {
	return &fakeFound{f: f, kind: found.Kind}, nil
}

func (f *fakeFilter) Guard(_ context.Context, spec netfilter.GuardSpec) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	if f.guard != nil && fmt.Sprint(*f.guard) == fmt.Sprint(spec) {
		return false, nil
	}
	f.guard = &spec
	f.ops = append(f.ops, "load guard")
	return true, nil
}

func (f *fakeFilter) RemoveGuard(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.guard != nil {
		f.ops = append(f.ops, "remove guard")
	}
	f.guard = nil
	return nil
}

func (f *fakeFilter) LoadFilter(_ context.Context, spec netfilter.FilterSpec) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	if f.filter != nil && fmt.Sprint(*f.filter) == fmt.Sprint(spec) {
		return false, nil
	}
	f.filter = &spec
	f.ops = append(f.ops, "load filter")
	return true, nil
}

func (f *fakeFilter) RemoveFilter(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.filter != nil {
		f.ops = append(f.ops, "remove filter")
	}
	f.filter = nil
	return nil
}

// Stamp is f.stamp: "" (no stamp: every pass detects again) unless a test sets one.
func (f *fakeFilter) Stamp(context.Context) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stamp
}

// Watch has no events to wait for: it ends with ctx (a live one noted subscribed meanwhile).
func (f *fakeFilter) Watch(ctx context.Context, _ time.Duration, changes *netfilter.Changes, _ func(context.Context, netfilter.Tick)) error {
	f.mu.Lock()
	if f.live {
		f.changes = changes
		changes.Subscribed(true)
		defer changes.Subscribed(false)
	}
	f.mu.Unlock()
	<-ctx.Done()
	return ctx.Err()
}

// markedSorted are the marks of the meshd-marked rules in the found firewall, sorted.
func (f *fakeFilter) markedSorted() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(maps.Keys(f.marked))
}

// Retire disables the fake's found firewall, as ufw disable does: inactive, its marked rules
// kept (in its files) but not in force.
func (f *fakeFilter) Retire(_ context.Context, found netfilter.Found) (netfilter.Retired, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.retires++
	if f.retireErr != nil {
		return netfilter.Retired{}, f.retireErr
	}
	f.found.Active = false
	if f.leftover != nil {
		f.found = *f.leftover
	}
	f.ops = append(f.ops, "retire "+string(found.Kind))
	return netfilter.Retired{Kind: found.Kind}, nil
}

func (f *fakeFilter) Restore(_ context.Context, r netfilter.Retired) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.restores++
	if r.Kind != netfilter.KindNone {
		f.found = netfilter.Found{Kind: r.Kind, Active: true}
	}
	f.ops = append(f.ops, "restore "+string(r.Kind))
	return nil
}

func (f *fakeFilter) Saved() (netfilter.Retired, error) {
	return netfilter.Retired{}, errors.New("nothing saved")
}

func (f *fakeFilter) KeepForBoot(t netfilter.BootTables) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keeps++
	if f.kept != nil && fmt.Sprint(*f.kept) == fmt.Sprint(t) {
		return false, nil
	}
	f.kept = &t
	return true, nil
}

var _ packetFilter = (*fakeFilter)(nil)

// fakeFound speaks the fake's found firewall: it makes the meshd-marked rules the declared ones.
type fakeFound struct {
	f    *fakeFilter
	kind netfilter.Kind
}

func (d *fakeFound) Kind() netfilter.Kind { return d.kind }

func (d *fakeFound) Converge(_ context.Context, desired []netfilter.Opening) (netfilter.Report, error) {
	d.f.mu.Lock()
	defer d.f.mu.Unlock()
	d.f.reads++
	rep := netfilter.Report{Kind: d.kind}
	want := map[string]bool{}
	now := time.Now().UTC()
	for _, o := range desired {
		m := o.Mark()
		want[m] = true
		if _, ok := d.f.marked[m]; !ok {
			d.f.marked[m] = o
			rep.Added++
		}
		rep.Openings = append(rep.Openings, netfilter.OpeningState{Opening: o, State: netfilter.InForce, At: now})
	}
	for m := range d.f.marked {
		if !want[m] {
			delete(d.f.marked, m)
			rep.Removed++
		}
	}
	return rep, nil
}
