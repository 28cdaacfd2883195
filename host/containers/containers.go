package containers

// The container kind: declared containers converged through one Docker engine, with ADR 0100's
// words applied to them exactly as the file kind applies them to files.
//
// Found means a container at a declared name with no record in this driver's records and not
// carrying meshd's labels for the declaring module. On an adopted node, for a module not taken,
// a found container is held: its configuration (the engine's inspect JSON) is recorded first, it
// is never touched, and it is reported held; one whose id or configuration changes while held is
// reported "changed by something else". A declared container that is not there is created
// (assigning prepares), with meshd's labels.
//
// Taking a module (and every module on a converged node) converges its containers. A found or held
// container whose configuration already is the declaration is adopted in place — recorded as
// meshd's and never recreated (ADR 0078's adoption of the foundation as modules, keyed on the
// running container); meshd's labels, which cannot be added to a running container, are not asked
// of it. Any other found or held container is replaced, staged (ctrtake.go): the new one prepared
// first, the found one stopped and kept aside under NAME.meshd-replaced-<short id>, its
// configuration kept in the records; a cutover that fails puts it back. From then on a container is
// meshd's: it is compared with the declaration on every pass and recreated only on a real
// difference; removed by hand it is created again; stopped it is started.
//
// A container the host created for a module no longer assigned is removed; a held one stays,
// never removed; one adopted or that replaced a found one stays, as files that replaced a found
// one do.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"meshd/catalogue"
	"meshd/container"
	"meshd/ctrspec"
	"meshd/fsm"
	"meshd/host/pass"
	"meshd/report"
)

// engine is what the container driver needs of a container engine, in the driver's terms:
// *container.Engine is the real one; the unit tests put an in-memory fake in its place.
type engine interface {
	// Host is the engine's address, named in the report and in every error.
	Host() string
	// Inspect observes the container named name; found is false when there is none. An engine
	// that does not answer gives an error matching container.ErrEngineUnreachable.
	Inspect(ctx context.Context, name string) (o container.Observed, found bool, err error)
	// Create creates and starts spec's container; a missing image is a
	// container.ErrImageMissing.
	Create(ctx context.Context, spec ctrspec.Spec) (id string, err error)
	// Replace puts spec's container in the place of old, checking the image first and putting
	// old back when the new one cannot start; replaced is old's configuration. It recreates the
	// host's own containers; a take is staged with Prepare, Stop and Rename instead.
	Replace(ctx context.Context, old container.Observed, spec ctrspec.Spec) (id string, replaced json.RawMessage, err error)
	// Prepare creates spec's container under the name as, not started; a missing image is a
	// container.ErrImageMissing and touches nothing.
	Prepare(ctx context.Context, spec ctrspec.Spec, as string) (id string, err error)
	// Stop stops, Rename renames, Start starts and Remove removes a container by its exact name
	// or its id; Remove of one that is not there is not an error.
	Stop(ctx context.Context, ref string) error
	Rename(ctx context.Context, ref, to string) error
	// SetRestart gives a container a restart policy ("no", "always", ...).
	SetRestart(ctx context.Context, ref, restart string) error
	Start(ctx context.Context, name string) error
	Remove(ctx context.Context, name string) error
	// Published is every port every running container publishes on the machine.
	Published(ctx context.Context) ([]container.Published, error)
}

var _ engine = (*container.Engine)(nil)

// Driver converges the container resources of a node through one Docker engine. Make it
// once per agent: it survives the engine going away and coming back.
type Driver struct {
	eng engine
	log *slog.Logger
	// crash is the armed crash point's check (see the package doc): SIGKILL in production when
	// pass.CrashEnv names the point; the unit tests put a panic in its place.
	crash func(point string)
	// cut are the containers a take cut over in the last pass, by module, for StepBack.
	cut map[string][]string
	// now is the clock a failed cutover's wait is read on (tests move it on).
	now func() time.Time
}

// New returns the container kind's driver on eng; log nil means slog.Default().
func New(eng *container.Engine, log *slog.Logger) *Driver {
	return newDriver(eng, log)
}

func newDriver(eng engine, log *slog.Logger) *Driver {
	if log == nil {
		log = slog.Default()
	}
	c := pass.NewCrasher(log)
	return &Driver{eng: eng, log: log, crash: c.Reach, now: time.Now}
}

// Kind is fsm.KindContainer.
func (d *Driver) Kind() string { return fsm.KindContainer }

// driverPass is one pass of the driver.
type driverPass struct {
	d    *Driver
	recs *pass.Records
	// records are the driver's records, read at the pass's start and kept up to date by put.
	records map[string]*record
	out     pass.Outcome
	rep     *report.ContainerReport
	own     pass.Own
}

// Reconcile converges the declared containers (see the package's container rules above). It is
// the pass's one ordered sequence — records, one look at the engine, each declared container
// decided (decideContainer) and acted on, then what no module declares any more — each step a
// call; kept in one place so the order reads at once.
func (d *Driver) Reconcile(ctx context.Context, ps pass.Pass) pass.Outcome {
	rep := &report.ContainerReport{Engine: d.eng.Host(), Containers: []report.ContainerView{}, Published: []report.PublishedPort{}}
	records := map[string]*record{}
	p := &driverPass{d: d, recs: ps.Records, rep: rep, records: records, own: ps.Own}
	p.out.Detail = rep
	d.cut = map[string][]string{}

	if ps.Records == nil {
		p.failAll(ps.Resources, errors.New("no record store given to the container driver"))
		return p.out
	}
	if err := loadRecords(ps.Records, records); err != nil {
		p.failAll(ps.Resources, err)
		return p.out
	}

	// One look at the whole machine first: it tells whether the engine answers at all.
	pub, err := d.eng.Published(ctx)
	if err != nil {
		rep.EngineError = err.Error()
		rep.Reachable = !errors.Is(err, container.ErrEngineUnreachable)
		if !rep.Reachable {
			p.failAll(ps.Resources, err)
			p.reportFromRecords(records, ps.Resources)
			return p.out
		}
	} else {
		rep.Reachable = true
	}

	declared := map[string]string{}
	var fresh []toCreate
	mode := fsm.Adopted
	if ps.Declaration != nil {
		mode = ps.Declaration.Mode
	}
	for _, r := range ps.Resources {
		if ctx.Err() != nil {
			break
		}
		if r.Container == nil {
			p.fail(r.ID(), r.Module, errors.New("a container resource without a container"))
			continue
		}
		name := r.Container.Name
		if other, dup := declared[name]; dup {
			p.fail(r.ID(), r.Module, fmt.Errorf("container %s is declared also by module %s; one module a name", name, other))
			continue
		}
		declared[name] = r.Module
		spec := report.SpecOf(r)
		if err := spec.Validate(); err != nil {
			p.fail(r.ID(), r.Module, err)
			continue
		}
		if err := p.ownMount(r, spec); err != nil {
			p.fail(r.ID(), r.Module, err)
			continue
		}
		taken := r.Taken || mode == fsm.Converged
		if records[name] == nil {
			// Nothing recorded and nothing at the name: created below, with the pass's other
			// such containers at once (the decision for them is always stepCreate).
			if _, exists, err := p.d.eng.Inspect(ctx, name); err == nil && !exists {
				fresh = append(fresh, toCreate{id: r.ID(), module: r.Module, spec: spec})
				continue
			}
		}
		view, err := p.one(ctx, r.Module, spec, taken, records[name])
		if err != nil {
			p.fail(r.ID(), r.Module, err)
		}
		rep.Containers = append(rep.Containers, view)
	}
	if ctx.Err() == nil {
		p.createAll(ctx, fresh)
	}
	// What the records know that no module declares any more.
	for _, name := range recordNames(records) {
		if _, ok := declared[name]; ok || ctx.Err() != nil {
			continue
		}
		rec := records[name]
		view, err := p.undeclared(ctx, name, rec)
		if err != nil {
			p.fail(fsm.KindContainer+":"+name, rec.Module, err)
		}
		if view != nil {
			rep.Containers = append(rep.Containers, *view)
		}
	}
	slices.SortFunc(rep.Containers, func(a, b report.ContainerView) int { return strings.Compare(a.Name, b.Name) })

	p.published(ctx, pub)
	return p.out
}

// published reports every published port on the machine, read again when this pass changed the
// engine so the report is current, each with the host's state of its container.
func (p *driverPass) published(ctx context.Context, pub []container.Published) {
	if p.rep.Reachable && p.out.Changes > 0 {
		if again, err := p.d.eng.Published(ctx); err == nil {
			pub = again
		}
	}
	for _, x := range pub {
		pp := report.PublishedPort{Container: x.Container, ContainerID: x.ContainerID, Module: x.Module,
			HostIP: x.HostIP, HostPort: x.HostPort, ContainerPort: x.ContainerPort, Proto: x.Proto}
		if rec := p.records[x.Container]; rec != nil && (rec.ID == x.ContainerID || rec.State == report.ContainerHeld && rec.FoundID == x.ContainerID) {
			pp.Module, pp.State = rec.Module, rec.State
		}
		p.rep.Published = append(p.rep.Published, pp)
	}
}

func (p *driverPass) fail(resource, module string, err error) {
	p.out.Errors = append(p.out.Errors, report.ResourceError{Resource: resource, Module: module, Reason: err.Error()})
}

func (p *driverPass) failAll(rs []fsm.Resource, err error) {
	for _, r := range rs {
		p.fail(r.ID(), r.Module, err)
	}
}

// engineEvents is what the container driver's drift watch needs of an engine:
// *container.Engine has it; the unit tests' fake does not, and is then watched by the timer only.
type engineEvents interface {
	WatchContainers(ctx context.Context, changed func(names ...string)) error
}

// WatchDrift follows the engine's container events (host.driftSource).
func (d *Driver) WatchDrift(ctx context.Context, touched func(names ...string)) {
	if ev, ok := d.eng.(engineEvents); ok {
		_ = ev.WatchContainers(ctx, touched)
	}
}

// ownMount refuses a container that mounts one of meshd's own paths on this machine, and, for a
// confined module, one that mounts a path leading outside the module's own places (Own.Confine):
// the engine follows a mount's symlinks on the machine, so where the path leads there is judged,
// not how it is written.
func (p *driverPass) ownMount(r fsm.Resource, spec ctrspec.Spec) error {
	for _, v := range spec.Volumes {
		src, _, _ := strings.Cut(v, ":")
		if catalogue.NamedVolume(src) { // the engine's, not a path on the machine
			continue
		}
		if err := p.own.Refuse("a mount of", r.Module, src); err != nil {
			return err
		}
		if r.Confined {
			if err := p.own.Confine("/", "a mount of", r.Module, src); err != nil {
				return err
			}
		}
	}
	return nil
}
