package host

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
// Taking a module (and every module on a converged node) converges its containers. A found or
// held container whose configuration already is the declaration is adopted in place — recorded
// as meshd's and never recreated (ADR 0078's adoption of the foundation as modules, keyed on the
// running container); meshd's labels, which cannot be added to a running container, are not
// asked of it. Any other found or held container is replaced, staged (ctrtake.go): the new one
// prepared first, the found one stopped and kept aside under NAME.meshd-replaced-<short id>, its
// configuration kept in the records; a cutover that fails puts it back. From then on a container is meshd's: it is compared with the declaration on every
// pass and recreated only on a real difference; removed by hand it is created again; stopped it
// is started.
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
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"meshd/container"
	"meshd/fsm"
)

// Container states as the records and the report name them.
const (
	// ContainerHeld is a found container kept exactly as it is until its module is taken.
	ContainerHeld = "held"
	// ContainerCreated is a container the host created where nothing was found.
	ContainerCreated = "created"
	// ContainerAdopted is a found container that already was the declaration when its module was
	// taken: meshd's from then on, never recreated for it.
	ContainerAdopted = "adopted"
	// ContainerReplaced is the declared container put in the place of a found one at take.
	ContainerReplaced = "replaced"
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
	Create(ctx context.Context, spec container.Spec) (id string, err error)
	// Replace puts spec's container in the place of old, checking the image first and putting
	// old back when the new one cannot start; replaced is old's configuration. It recreates the
	// host's own containers; a take is staged with Prepare, Stop and Rename instead.
	Replace(ctx context.Context, old container.Observed, spec container.Spec) (id string, replaced json.RawMessage, err error)
	// Prepare creates spec's container under the name as, not started; a missing image is a
	// container.ErrImageMissing and touches nothing.
	Prepare(ctx context.Context, spec container.Spec, as string) (id string, err error)
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

// ContainerDriver converges the container resources of a node through one Docker engine. Make it
// once per agent: it survives the engine going away and coming back.
type ContainerDriver struct {
	eng engine
	log *slog.Logger
	// crash is the armed crash point's check (see the package doc): SIGKILL in production when
	// CrashEnv names the point; the unit tests put a panic in its place.
	crash func(point string)
	// cut are the containers a take cut over in the last pass, by module, for StepBack.
	cut map[string][]string
	// now is the clock a failed cutover's wait is read on (tests move it on).
	now func() time.Time
}

// NewContainerDriver returns the container kind's driver on eng; log nil means slog.Default().
func NewContainerDriver(eng *container.Engine, log *slog.Logger) *ContainerDriver {
	return newContainerDriver(eng, log)
}

func newContainerDriver(eng engine, log *slog.Logger) *ContainerDriver {
	if log == nil {
		log = slog.Default()
	}
	c := newCrasher(log)
	return &ContainerDriver{eng: eng, log: log, crash: c.reach, now: time.Now}
}

// Kind is fsm.KindContainer.
func (d *ContainerDriver) Kind() string { return fsm.KindContainer }

// ContainerReport is the container kind's part of the host report (Report.Kinds["container"]).
type ContainerReport struct {
	// Engine is the engine's address; Reachable says whether it answered this pass, EngineError
	// why not.
	Engine      string `json:"engine"`
	Reachable   bool   `json:"reachable"`
	EngineError string `json:"engine_error,omitempty"`
	// Containers are the declared containers and those the records still know (held, or left
	// after their module was unassigned), sorted by name.
	Containers []ContainerView `json:"containers"`
	// Published is every port published by every running container on the machine, meshd's or
	// not, sorted by host port: what the converge preview lists.
	Published []PublishedPort `json:"published"`
}

// ContainerView is one container as the host sees it.
type ContainerView struct {
	Name   string `json:"name"`
	Module string `json:"module"`
	// State is held, created, adopted or replaced; "" for a declared container not there yet
	// (its failure is in the report's errors).
	State   string `json:"state,omitempty"`
	ID      string `json:"id,omitempty"`
	Image   string `json:"image,omitempty"`
	Running bool   `json:"running"`
	// Ports are what it publishes now, "hostip:hostport->containerport/proto".
	Ports []string `json:"ports,omitempty"`
	// Changed is set on a held container whose id or configuration is not what was recorded when
	// it was found, and on a container of meshd's that had to be converged back this pass;
	// Reason says how (ChangedBySomethingElse or RemovedBySomethingElse, and the differences).
	Changed bool   `json:"changed,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// Action is what this pass did to it: created, started, recreated, adopted, replaced, removed.
	Action string    `json:"action,omitempty"`
	Since  time.Time `json:"since,omitzero"`
	// Unassigned is true once no assigned module declares it (held or left: never removed).
	Unassigned bool `json:"unassigned,omitempty"`
	// OriginalKept says the found container's configuration is in the record store
	// (Host.ContainerOriginal).
	OriginalKept bool `json:"original_kept,omitempty"`
	// Aside is the name the container a take replaced is kept under, stopped, until the
	// operator removes it: stepping back is renaming it back and starting it.
	Aside string `json:"aside,omitempty"`
	// Config is a held container's configuration as a module would declare it, for the take's
	// preview.
	Config *container.Spec `json:"config,omitempty"`
}

// PublishedPort is one port a container publishes on the machine.
type PublishedPort struct {
	Container     string `json:"container"`
	ContainerID   string `json:"container_id"`
	Module        string `json:"module,omitempty"`
	State         string `json:"state,omitempty"` // the host's state of it; "" when not the mesh's
	HostIP        string `json:"host_ip"`
	HostPort      uint16 `json:"host_port"`
	ContainerPort uint16 `json:"container_port"`
	Proto         string `json:"proto"`
}

// containerRecord is what the driver remembers of one container name.
type containerRecord struct {
	Module string    `json:"module"`
	State  string    `json:"state"`
	ID     string    `json:"id"`
	Image  string    `json:"image"`
	At     time.Time `json:"at"`
	// What was found at the name, kept from before anything happened to it.
	FoundID      string          `json:"found_id,omitempty"`
	FoundImage   string          `json:"found_image,omitempty"`
	FoundImageID string          `json:"found_image_id,omitempty"`
	FoundSpec    *container.Spec `json:"found_spec,omitempty"`
	FoundAt      time.Time       `json:"found_at,omitzero"`
	Original     json.RawMessage `json:"original,omitempty"`
	// Replaced is the configuration of the container a take replaced, as the engine gave it just
	// before it was stopped.
	Replaced   json.RawMessage `json:"replaced,omitempty"`
	ReplacedAt time.Time       `json:"replaced_at,omitzero"`
	// ReplacedID and Aside are the container a take replaced and the name it is kept under,
	// stopped (ctrAsideName), until the operator removes it.
	ReplacedID string `json:"replaced_id,omitempty"`
	Aside      string `json:"aside,omitempty"`
	// AsideRestart is the restart policy the aside container had; it is kept with "no".
	AsideRestart string `json:"aside_restart,omitempty"`
	// Cutover is a take under way: committed before the found container is stopped, dropped
	// when the new one runs or the found one is back. A pass after a crash finishes it.
	Cutover *ctrCutover `json:"cutover,omitempty"`
	// A cutover that failed and was put back is not tried again on every pass, for it stops the
	// found container each time: TakeFailures in a row for the same declaration and found
	// container (TakeFailedFor, takeKey), the last at TakeFailedAt, why in TakeFailed.
	TakeFailedFor string    `json:"take_failed_for,omitempty"`
	TakeFailures  int       `json:"take_failures,omitempty"`
	TakeFailedAt  time.Time `json:"take_failed_at,omitzero"`
	TakeFailed    string    `json:"take_failed,omitempty"`
}

// ctrCutover is what a take in progress must remember to finish or to put back what was found.
type ctrCutover struct {
	// OldID is the container being replaced; WasRunning whether it ran before the take stopped
	// it; Replaced its configuration just before.
	OldID      string          `json:"old_id"`
	WasRunning bool            `json:"was_running"`
	Replaced   json.RawMessage `json:"replaced,omitempty"`
	// Restart is its restart policy, set to "no" while it is kept aside (so a reboot does not
	// start it beside its replacement) and given back when it is put back.
	Restart string `json:"restart,omitempty"`
	// Aside is the name it is moved to; StagedID the new container, prepared under
	// ctrStagedName.
	Aside    string `json:"aside"`
	StagedID string `json:"staged_id"`
}

// ctrStagedName is the temporary name a take prepares the new container under while the found
// one holds the declared name.
func ctrStagedName(name string) string { return name + ".meshd-new" }

// ctrAsideName is the name a container replaced by a take is kept under, stopped.
func ctrAsideName(name, id string) string { return name + ".meshd-replaced-" + ctrShort(id) }

// ctrPass is one pass of the driver.
type ctrPass struct {
	d    *ContainerDriver
	recs *Records
	// records are the driver's records, read at the pass's start and kept up to date by put.
	records map[string]*containerRecord
	out     Outcome
	rep     *ContainerReport
}

// Reconcile converges the declared containers (see the package's container rules above). It is
// the pass's one ordered sequence — records, one look at the engine, each declared container
// decided (decideContainer) and acted on, then what no module declares any more — each step a
// call; kept in one place so the order reads at once.
func (d *ContainerDriver) Reconcile(ctx context.Context, pass Pass) Outcome {
	rep := &ContainerReport{Engine: d.eng.Host(), Containers: []ContainerView{}, Published: []PublishedPort{}}
	records := map[string]*containerRecord{}
	p := &ctrPass{d: d, recs: pass.Records, rep: rep, records: records}
	p.out.Detail = rep
	d.cut = map[string][]string{}

	if pass.Records == nil {
		p.failAll(pass.Resources, errors.New("no record store given to the container driver"))
		return p.out
	}
	if err := loadCtrRecords(pass.Records, records); err != nil {
		p.failAll(pass.Resources, err)
		return p.out
	}

	// One look at the whole machine first: it tells whether the engine answers at all.
	pub, err := d.eng.Published(ctx)
	if err != nil {
		rep.EngineError = err.Error()
		rep.Reachable = !errors.Is(err, container.ErrEngineUnreachable)
		if !rep.Reachable {
			p.failAll(pass.Resources, err)
			p.reportFromRecords(records, pass.Resources)
			return p.out
		}
	} else {
		rep.Reachable = true
	}

	declared := map[string]string{}
	var fresh []freshCtr
	mode := fsm.Adopted
	if pass.Declaration != nil {
		mode = pass.Declaration.Mode
	}
	for _, r := range pass.Resources {
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
		spec := ctrSpecOf(r)
		if err := spec.Validate(); err != nil {
			p.fail(r.ID(), r.Module, err)
			continue
		}
		taken := r.Taken || mode == fsm.Converged
		if records[name] == nil {
			// Nothing recorded and nothing at the name: created below, with the pass's other
			// such containers at once (the decision for them is always ctrCreate).
			if _, exists, err := p.d.eng.Inspect(ctx, name); err == nil && !exists {
				fresh = append(fresh, freshCtr{id: r.ID(), module: r.Module, spec: spec})
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
	for _, name := range ctrRecordNames(records) {
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
	slices.SortFunc(rep.Containers, func(a, b ContainerView) int { return strings.Compare(a.Name, b.Name) })

	p.published(ctx, pub)
	return p.out
}

// loadCtrRecords reads the driver's records into records, by container name.
func loadCtrRecords(recs *Records, records map[string]*containerRecord) error {
	keys, err := recs.Keys()
	if err != nil {
		return err
	}
	for _, k := range keys {
		b, _, err := recs.Get(k)
		if err != nil {
			return err
		}
		var r containerRecord
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("container record %s: %w", k, err)
		}
		records[k] = &r
	}
	return nil
}

// published reports every published port on the machine, read again when this pass changed the
// engine so the report is current, each with the host's state of its container.
func (p *ctrPass) published(ctx context.Context, pub []container.Published) {
	if p.rep.Reachable && p.out.Changes > 0 {
		if again, err := p.d.eng.Published(ctx); err == nil {
			pub = again
		}
	}
	for _, x := range pub {
		pp := PublishedPort{Container: x.Container, ContainerID: x.ContainerID, Module: x.Module,
			HostIP: x.HostIP, HostPort: x.HostPort, ContainerPort: x.ContainerPort, Proto: x.Proto}
		if rec := p.records[x.Container]; rec != nil && (rec.ID == x.ContainerID || rec.State == ContainerHeld && rec.FoundID == x.ContainerID) {
			pp.Module, pp.State = rec.Module, rec.State
		}
		p.rep.Published = append(p.rep.Published, pp)
	}
}

// ctrStep is what the driver does to one declared container this pass.
type ctrStep int

const (
	ctrObserveHeld ctrStep = iota // held, module not taken: observed, never touched
	ctrHold                       // found, module not taken: its configuration recorded, then held
	ctrCreate                     // nothing there, not the host's yet: created (assigning prepares)
	ctrAdopt                      // found or held, taken, already the declaration: adopted in place
	ctrReplace                    // found or held, taken, differing: replaced, staged, kept aside
	ctrResume                     // held, taken, a take interrupted after moving it aside: finished
	ctrRecreate                   // the host's, removed by something else: created again
	ctrConverge                   // the host's, differing from its declaration: recreated
	ctrStart                      // the host's, as declared but stopped: started
	ctrKeep                       // the host's, as declared and running: nothing to do
)

// ctrClaim is how a container carrying meshd's labels for its module is claimed as the host's
// before anything else is decided: it was created in an earlier life of the node, or a crash came
// between creating it and recording it.
type ctrClaim int

const (
	claimNone        ctrClaim = iota
	claimLabelled             // no record: recorded as created
	claimInterrupted          // held, taken, another id: a take interrupted before it was recorded
)

// ctrAction is the decision for one declared container, executed by ctrPass.act.
type ctrAction struct {
	claim ctrClaim
	step  ctrStep
	// recordFound: a found container with no record, taken, has its configuration recorded
	// before it is adopted or replaced.
	recordFound bool
	// start: an adopted container that is stopped is started.
	start bool
	// refresh: the host's record no longer names the container's id, module or image.
	refresh bool
	// diff are the differences that make a replace or a recreate.
	diff []string
}

// decideContainer is the container kind's decision (see the rules at the top of this file): a
// pure function of the record (nil when there is none), what the engine shows at the name
// (exists false when nothing), the declaration and whether its module is taken (every module is
// on a converged node).
func decideContainer(rec *containerRecord, o container.Observed, exists bool, spec container.Spec, module string, taken bool) ctrAction {
	var a ctrAction
	state := ""
	if rec != nil {
		state = rec.State
	}
	labelled := exists && o.Managed && o.Module == module
	switch {
	case rec == nil && labelled:
		a.claim, state = claimLabelled, ContainerCreated
	case rec != nil && rec.State == ContainerHeld && taken && labelled && o.ID != rec.FoundID:
		a.claim, state = claimInterrupted, ContainerReplaced
	}
	if state == "" || state == ContainerHeld { // not the host's (yet)
		switch {
		case !taken && state == ContainerHeld:
			a.step = ctrObserveHeld
		case !taken && exists:
			a.step = ctrHold
		case !exists && rec != nil && rec.Cutover != nil: // moved aside by a take a crash cut short
			a.step = ctrResume
		case !exists: // never was, or a held one was removed
			a.step = ctrCreate
		default:
			a.recordFound = state == ""
			if a.diff = ctrCompare(spec, o); len(a.diff) == 0 {
				a.step, a.start = ctrAdopt, !o.Running
			} else {
				a.step = ctrReplace
			}
		}
		return a
	}
	// The host's: converged on the declaration.
	if !exists {
		a.step = ctrRecreate
		return a
	}
	if a.diff = ctrCompare(spec, o); len(a.diff) > 0 {
		a.step = ctrConverge
		return a
	}
	a.refresh = a.claim == claimNone && (rec.ID != o.ID || rec.Module != module || rec.Image != spec.Image)
	a.step = ctrKeep
	if !o.Running {
		a.step = ctrStart
	}
	return a
}

// one reconciles one declared container and returns how it stands: it looks, decides, then acts.
func (p *ctrPass) one(ctx context.Context, module string, spec container.Spec, taken bool, rec *containerRecord) (ContainerView, error) {
	view := ContainerView{Name: spec.Name, Module: module}
	o, exists, err := p.d.eng.Inspect(ctx, spec.Name)
	if err != nil {
		p.viewFromRecord(&view, rec)
		return view, err
	}
	a := decideContainer(rec, o, exists, spec, module, taken)
	if rec, err = p.claim(ctx, a.claim, module, spec, o, rec); err != nil {
		return view, err
	}
	return p.act(ctx, a, view, spec, o, exists, rec)
}

// claim records a labelled container as the host's, as decided.
func (p *ctrPass) claim(ctx context.Context, c ctrClaim, module string, spec container.Spec, o container.Observed, rec *containerRecord) (*containerRecord, error) {
	now := time.Now().UTC()
	switch c {
	case claimLabelled:
		rec = &containerRecord{Module: module, State: ContainerCreated, ID: o.ID, Image: spec.Image, At: now}
		p.d.log.Info("container carrying meshd's labels recorded as the host's", "container", spec.Name, "module", module, "id", ctrShort(o.ID))
	case claimInterrupted:
		if c := rec.Cutover; c != nil {
			// A take moves the found container aside while it still serves and stops it last:
			// interrupted in between, it is running aside and holds the ports the new one needs.
			if err := p.d.eng.Stop(ctx, c.OldID); err != nil {
				return rec, fmt.Errorf("container %s: finishing an interrupted take: stopping the found container %s aside: %w", spec.Name, c.Aside, err)
			}
		}
		rec.State, rec.ID, rec.Image, rec.Module, rec.At = ContainerReplaced, o.ID, spec.Image, module, now
		if c := rec.Cutover; c != nil { // the new one was in place; what it replaced stays aside, stopped
			rec.Replaced, rec.ReplacedAt, rec.ReplacedID, rec.Aside, rec.Cutover = c.Replaced, now, c.OldID, c.Aside, nil
			rec.AsideRestart = c.Restart
		}
	default:
		return rec, nil
	}
	return rec, p.put(spec.Name, rec)
}

// act executes the decision for one declared container.
func (p *ctrPass) act(ctx context.Context, a ctrAction, view ContainerView, spec container.Spec, o container.Observed, exists bool, rec *containerRecord) (ContainerView, error) {
	name, module := spec.Name, view.Module
	switch a.step {
	case ctrObserveHeld:
		p.observeHeld(&view, rec, o, exists)
		return view, nil
	case ctrHold: // its configuration recorded before anything else, then held
		rec, err := p.recordFound(name, module, o)
		if err != nil {
			return view, err
		}
		p.d.log.Info("found container held", "container", name, "module", module, "id", ctrShort(o.ID), "image", o.ImageRef)
		p.observeHeld(&view, rec, o, true)
		return view, nil
	case ctrCreate:
		return p.create(ctx, view, spec, rec)
	case ctrAdopt, ctrReplace:
		if a.recordFound {
			var err error
			if rec, err = p.recordFound(name, module, o); err != nil {
				return view, err
			}
		}
		if a.step == ctrAdopt {
			return p.adopt(ctx, view, spec, o, rec, a.start)
		}
		if until, wait := takeWaits(rec, takeKey(spec, o.ID), p.d.now()); wait {
			p.observeHeld(&view, rec, o, true)
			return view, fmt.Errorf("container %s: the take waits until %s after %d failed cutover(s), the found container running on; the last: %s",
				name, until.Format(time.RFC3339), rec.TakeFailures, rec.TakeFailed)
		}
		p.d.log.Info("taking a found container: replacing it", "container", name, "module", module, "id", ctrShort(o.ID), "differences", strings.Join(a.diff, "; "))
		return p.take(ctx, view, spec, &o, rec)
	case ctrResume:
		return p.resume(ctx, view, spec, rec)
	case ctrRecreate:
		return p.recreate(ctx, view, spec, rec)
	case ctrConverge:
		return p.converge(ctx, view, spec, o, rec, a.diff)
	}
	// ctrStart, ctrKeep
	if a.refresh {
		rec.ID, rec.Module, rec.Image = o.ID, module, spec.Image
		if err := p.put(name, rec); err != nil {
			return view, err
		}
	}
	if a.step == ctrStart {
		if err := p.d.eng.Start(ctx, name); err != nil {
			return p.viewOf(view, rec, o), err
		}
		p.out.Changes++
		p.d.log.Info("container was stopped: started", "container", name, "module", module, "id", ctrShort(o.ID))
		view.Action = "started"
		return p.settle(ctx, view, rec)
	}
	return p.viewOf(view, rec, o), nil
}

// create creates a declared container where nothing is, not yet the host's; a held one's record
// keeps what was found.
func (p *ctrPass) create(ctx context.Context, view ContainerView, spec container.Spec, rec *containerRecord) (ContainerView, error) {
	id, err := p.d.eng.Create(ctx, spec)
	if err != nil {
		return view, err
	}
	return p.created(ctx, view, spec, rec, id)
}

// freshCtr is a declared container with no record and nothing at its name: the pass creates it.
type freshCtr struct {
	id, module string
	spec       container.Spec
}

// createAll creates the pass's fresh containers at once (the engine creates and starts each in
// its own time: the foundation's three on a new server, a module's several on assignment), then
// records each in order. Only the engine's calls run side by side; the records, the report and
// the outcome are written by this goroutine alone.
func (p *ctrPass) createAll(ctx context.Context, fresh []freshCtr) {
	ids, errs := make([]string, len(fresh)), make([]error, len(fresh))
	var wg sync.WaitGroup
	for i, f := range fresh {
		wg.Go(func() { ids[i], errs[i] = p.d.eng.Create(ctx, f.spec) })
	}
	wg.Wait()
	for i, f := range fresh {
		view := ContainerView{Name: f.spec.Name, Module: f.module}
		err := errs[i]
		if err == nil {
			view, err = p.created(ctx, view, f.spec, nil, ids[i])
		}
		if err != nil {
			p.fail(f.id, f.module, err)
		}
		p.rep.Containers = append(p.rep.Containers, view)
	}
}

// created records a container create just made (id) as the host's and reports it.
func (p *ctrPass) created(ctx context.Context, view ContainerView, spec container.Spec, rec *containerRecord, id string) (ContainerView, error) {
	p.out.Changes++
	now := time.Now().UTC()
	nr := &containerRecord{Module: view.Module, State: ContainerCreated, ID: id, Image: spec.Image, At: now}
	if rec != nil {
		nr = rec
		nr.State, nr.ID, nr.Image, nr.Module, nr.At = ContainerReplaced, id, spec.Image, view.Module, now
	}
	if err := p.put(spec.Name, nr); err != nil {
		return view, err
	}
	view.Action = "created"
	return p.settle(ctx, view, nr)
}

// adopt makes a found or held container that already is the declaration the host's, in place.
func (p *ctrPass) adopt(ctx context.Context, view ContainerView, spec container.Spec, o container.Observed, rec *containerRecord, start bool) (ContainerView, error) {
	name, module := spec.Name, view.Module
	rec.State, rec.ID, rec.Image, rec.Module, rec.At = ContainerAdopted, o.ID, spec.Image, module, time.Now().UTC()
	if err := p.put(name, rec); err != nil {
		return view, err
	}
	p.d.log.Info("found container adopted in place: it already is the declaration", "container", name, "module", module, "id", ctrShort(o.ID))
	view.Action = "adopted"
	if start {
		if err := p.d.eng.Start(ctx, name); err != nil {
			return p.viewOf(view, rec, o), err
		}
		p.out.Changes++
		view.Action = "adopted, started"
	}
	return p.settle(ctx, view, rec)
}

// recreate creates again a container of the host's that something else removed.
func (p *ctrPass) recreate(ctx context.Context, view ContainerView, spec container.Spec, rec *containerRecord) (ContainerView, error) {
	id, err := p.d.eng.Create(ctx, spec)
	if err != nil {
		view.Changed, view.Reason = true, RemovedBySomethingElse
		p.viewFromRecord(&view, rec)
		return view, err
	}
	p.out.Changes++
	p.d.log.Warn("container removed by something else: created again", "container", spec.Name, "module", view.Module, "id", ctrShort(id))
	rec.ID, rec.Image, rec.Module = id, spec.Image, view.Module
	if err := p.put(spec.Name, rec); err != nil {
		return view, err
	}
	view.Action, view.Changed, view.Reason = "recreated", true, RemovedBySomethingElse
	return p.settle(ctx, view, rec)
}

// converge recreates a container of the host's that differs from its declaration.
func (p *ctrPass) converge(ctx context.Context, view ContainerView, spec container.Spec, o container.Observed, rec *containerRecord, diff []string) (ContainerView, error) {
	reason := ChangedBySomethingElse + ": " + strings.Join(diff, "; ")
	p.d.log.Warn("container differs from its declaration: recreating it", "container", spec.Name, "module", view.Module, "id", ctrShort(o.ID), "differences", strings.Join(diff, "; "))
	id, _, err := p.d.eng.Replace(ctx, o, spec)
	if err != nil {
		v := p.viewOf(view, rec, o)
		v.Changed, v.Reason = true, reason
		return v, err
	}
	p.out.Changes++
	rec.ID, rec.Image, rec.Module = id, spec.Image, view.Module
	if err := p.put(spec.Name, rec); err != nil {
		return view, err
	}
	view.Action, view.Changed, view.Reason = "recreated", true, reason
	return p.settle(ctx, view, rec)
}

// settle fills the view from the engine after this pass changed the container.
func (p *ctrPass) settle(ctx context.Context, view ContainerView, rec *containerRecord) (ContainerView, error) {
	o, exists, err := p.d.eng.Inspect(ctx, view.Name)
	if err != nil || !exists {
		p.viewFromRecord(&view, rec)
		return view, nil // what was done is done; the next pass looks again
	}
	return p.viewOf(view, rec, o), nil
}

// ctrLeave is what becomes of a recorded container no assigned module declares.
type ctrLeave int

const (
	leaveHeld    ctrLeave = iota // held: observed, stays, never removed
	leaveStands                  // adopted or replaced a found one, still there: left as it is
	leaveGone                    // adopted or replaced a found one, gone: reported removed
	leaveRemove                  // created by the host, still the host's: removed, record dropped
	leaveForeign                 // created by the host, something else's now: left, record dropped
	leaveForget                  // created by the host, gone: record dropped
)

// decideUndeclared is the decision for a recorded container no assigned module declares: a pure
// function of its record and what the engine shows at its name.
func decideUndeclared(rec *containerRecord, o container.Observed, exists bool) ctrLeave {
	switch rec.State {
	case ContainerHeld:
		return leaveHeld
	case ContainerAdopted, ContainerReplaced:
		if exists {
			return leaveStands
		}
		return leaveGone
	}
	// A container someone else has since put at the name is not the host's to remove.
	switch {
	case exists && (o.ID == rec.ID || o.Managed && o.Module == rec.Module):
		return leaveRemove
	case exists:
		return leaveForeign
	}
	return leaveForget
}

// undeclared handles a recorded container no assigned module declares.
func (p *ctrPass) undeclared(ctx context.Context, name string, rec *containerRecord) (*ContainerView, error) {
	view := ContainerView{Name: name, Module: rec.Module, Unassigned: true}
	o, exists, err := p.d.eng.Inspect(ctx, name)
	if err != nil {
		p.viewFromRecord(&view, rec)
		return &view, err
	}
	switch decideUndeclared(rec, o, exists) {
	case leaveHeld:
		p.observeHeld(&view, rec, o, exists)
		return &view, nil
	case leaveStands: // it stands where a found one stood: left as it is, what was found kept
		v := p.viewOf(view, rec, o)
		return &v, nil
	case leaveGone:
		p.viewFromRecord(&view, rec)
		view.Changed, view.Reason = true, RemovedBySomethingElse
		return &view, nil
	case leaveRemove:
		if err := p.d.eng.Remove(ctx, name); err != nil {
			return &view, fmt.Errorf("container %s, created for a module no longer assigned, cannot be removed: %w", name, err)
		}
		p.out.Changes++
		p.d.log.Info("container removed: created for a module no longer assigned", "container", name, "module", rec.Module, "id", ctrShort(o.ID))
	case leaveForeign:
		p.d.log.Warn("container created for a module no longer assigned was replaced by something else; left as it is",
			"container", name, "module", rec.Module, "id", ctrShort(o.ID))
	}
	if err := p.recs.Delete(name); err != nil {
		return &view, err
	}
	delete(p.records, name)
	p.out.Changes++
	return nil, nil
}

// recordFound durably records a found container's configuration before anything else happens
// to it, as held.
func (p *ctrPass) recordFound(name, module string, o container.Observed) (*containerRecord, error) {
	now := time.Now().UTC()
	spec := o.Spec
	rec := &containerRecord{Module: module, State: ContainerHeld, ID: o.ID, Image: o.ImageRef, At: now,
		FoundID: o.ID, FoundImage: o.ImageRef, FoundImageID: o.ImageID, FoundSpec: &spec, FoundAt: now, Original: o.Raw}
	if err := p.put(name, rec); err != nil {
		return nil, err
	}
	return rec, nil
}

// observeHeld reports a held container, and whether something else changed it.
func (p *ctrPass) observeHeld(view *ContainerView, rec *containerRecord, o container.Observed, exists bool) {
	view.State, view.Since, view.OriginalKept = ContainerHeld, rec.FoundAt, len(rec.Original) > 0
	if !exists {
		p.viewFromRecord(view, rec)
		view.State = ContainerHeld
		view.Changed, view.Reason = true, RemovedBySomethingElse
		return
	}
	*view = p.viewOf(*view, rec, o)
	cfg := o.Spec
	view.Config = &cfg
	var what []string
	if o.ID != rec.FoundID {
		what = append(what, fmt.Sprintf("container id %s, recorded %s", ctrShort(o.ID), ctrShort(rec.FoundID)))
	} else if rec.FoundImageID != "" && o.ImageID != rec.FoundImageID {
		what = append(what, fmt.Sprintf("image id %s, recorded %s", ctrShort(o.ImageID), ctrShort(rec.FoundImageID)))
	}
	if rec.FoundSpec != nil {
		o.RefImageID = "" // a tag moved on the engine is not a change of the container
		what = append(what, container.Diff(*rec.FoundSpec, o)...)
	}
	if len(what) > 0 {
		view.Changed, view.Reason = true, ChangedBySomethingElse+": "+strings.Join(what, "; ")
	}
}

func (p *ctrPass) viewOf(view ContainerView, rec *containerRecord, o container.Observed) ContainerView {
	view.ID, view.Image, view.Running = o.ID, o.ImageRef, o.Running
	view.Ports = nil
	for _, x := range o.Ports {
		view.Ports = append(view.Ports, fmt.Sprintf("%s->%d/%s", ctrHostPort(x.HostIP, x.HostPort), x.ContainerPort, x.Proto))
	}
	if rec != nil {
		view.State, view.Aside = rec.State, rec.Aside
		view.OriginalKept = len(rec.Original) > 0 || len(rec.Replaced) > 0
		if view.Since.IsZero() {
			view.Since = rec.At
			if rec.State == ContainerHeld {
				view.Since = rec.FoundAt
			}
		}
	}
	return view
}

func (p *ctrPass) viewFromRecord(view *ContainerView, rec *containerRecord) {
	if rec == nil {
		return
	}
	view.State, view.ID, view.Image, view.Aside = rec.State, rec.ID, rec.Image, rec.Aside
	view.OriginalKept = len(rec.Original) > 0 || len(rec.Replaced) > 0
	view.Since = rec.At
	if rec.State == ContainerHeld {
		view.ID, view.Image, view.Since = rec.FoundID, rec.FoundImage, rec.FoundAt
	}
}

// reportFromRecords fills the report from the records alone, when the engine cannot be asked.
func (p *ctrPass) reportFromRecords(records map[string]*containerRecord, rs []fsm.Resource) {
	seen := map[string]bool{}
	for _, r := range rs {
		if r.Container == nil || seen[r.Container.Name] {
			continue
		}
		seen[r.Container.Name] = true
		v := ContainerView{Name: r.Container.Name, Module: r.Module}
		p.viewFromRecord(&v, records[r.Container.Name])
		p.rep.Containers = append(p.rep.Containers, v)
	}
	for _, name := range ctrRecordNames(records) {
		if !seen[name] {
			v := ContainerView{Name: name, Module: records[name].Module, Unassigned: true}
			p.viewFromRecord(&v, records[name])
			p.rep.Containers = append(p.rep.Containers, v)
		}
	}
	slices.SortFunc(p.rep.Containers, func(a, b ContainerView) int { return strings.Compare(a.Name, b.Name) })
}

func (p *ctrPass) put(name string, rec *containerRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := p.recs.Put(name, b); err != nil {
		return err
	}
	p.records[name] = rec
	p.out.Changes++
	return nil
}

func (p *ctrPass) fail(resource, module string, err error) {
	p.out.Errors = append(p.out.Errors, ResourceError{Resource: resource, Module: module, Reason: err.Error()})
}

func (p *ctrPass) failAll(rs []fsm.Resource, err error) {
	for _, r := range rs {
		p.fail(r.ID(), r.Module, err)
	}
}

// ctrSpecOf is the container a resource declares, with meshd's labels for its module.
func ctrSpecOf(r fsm.Resource) container.Spec {
	c := r.Container
	labels := maps.Clone(c.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, container.ManagedLabels(r.Module))
	s := container.Spec{Name: c.Name, Image: c.Image, Env: c.Env, Ports: c.Ports, Volumes: c.Volumes,
		Restart: c.Restart, Labels: labels}
	if len(c.Command) > 0 {
		s.Cmd = slices.Clone(c.Command)
	}
	return s
}

// ctrCompare lists the real differences between the declaration and a container. A container that
// carries none of meshd's labels (a found one, or one adopted in place) is not asked to: labels
// cannot be added to a running container, and adopting it must not recreate it.
func ctrCompare(spec container.Spec, o container.Observed) []string {
	_, hasManaged := o.Labels[container.LabelManaged]
	_, hasModule := o.Labels[container.LabelModule]
	if !hasManaged && !hasModule {
		spec.Labels = maps.Clone(spec.Labels)
		delete(spec.Labels, container.LabelManaged)
		delete(spec.Labels, container.LabelModule)
	}
	return container.Diff(spec, o)
}

func ctrRecordNames(records map[string]*containerRecord) []string {
	return slices.Sorted(maps.Keys(records))
}

func ctrHostPort(ip string, port uint16) string {
	if strings.Contains(ip, ":") {
		return fmt.Sprintf("[%s]:%d", ip, port)
	}
	if ip == "" {
		ip = "0.0.0.0"
	}
	return fmt.Sprintf("%s:%d", ip, port)
}

func ctrShort(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// ContainerOriginal returns what the container driver recorded of a container it found at name:
// its configuration when found (the engine's inspect JSON) and, once a take replaced it, the
// configuration of the container replaced (taken just before it was stopped; nil if none).
func (h *Host) ContainerOriginal(name string) (original, replaced json.RawMessage, err error) {
	b, ok, err := (&Records{s: h.st, kind: []byte(fsm.KindContainer)}).Get(name)
	if err != nil {
		return nil, nil, err
	}
	if !ok {
		return nil, nil, fmt.Errorf("no record of a container %s on this node", name)
	}
	var rec containerRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, nil, fmt.Errorf("container record %s: %w", name, err)
	}
	if len(rec.Original) == 0 && len(rec.Replaced) == 0 {
		return nil, nil, fmt.Errorf("container %s was created by the host; nothing was found there", name)
	}
	return rec.Original, rec.Replaced, nil
}
