package containers

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"meshd/container"
	"meshd/ctrspec"
	"meshd/report"
)

// one reconciles one declared container and returns how it stands: it looks, decides, then acts.
func (p *driverPass) one(ctx context.Context, module string, spec ctrspec.Spec, taken bool, rec *record) (report.ContainerView, error) {
	view := report.ContainerView{Name: spec.Name, Module: module}
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
func (p *driverPass) claim(ctx context.Context, c claim, module string, spec ctrspec.Spec, o container.Observed, rec *record) (*record, error) {
	now := time.Now().UTC()
	switch c {
	case claimLabelled:
		rec = &record{Module: module, State: report.ContainerCreated, ID: o.ID, Image: spec.Image, At: now}
		p.d.log.Info("container carrying meshd's labels recorded as the host's", "container", spec.Name, "module", module, "id", report.Short(o.ID))
	case claimInterrupted:
		if c := rec.Cutover; c != nil {
			// A take moves the found container aside while it still serves and stops it last:
			// interrupted in between, it is running aside and holds the ports the new one needs.
			if err := p.d.eng.Stop(ctx, c.OldID); err != nil {
				return rec, fmt.Errorf("container %s: finishing an interrupted take: stopping the found container %s aside: %w", spec.Name, c.Aside, err)
			}
		}
		rec.State, rec.ID, rec.Image, rec.Module, rec.At = report.ContainerReplaced, o.ID, spec.Image, module, now
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
func (p *driverPass) act(ctx context.Context, a action, view report.ContainerView, spec ctrspec.Spec, o container.Observed, exists bool, rec *record) (report.ContainerView, error) {
	name, module := spec.Name, view.Module
	switch a.step {
	case stepObserveHeld:
		p.observeHeld(&view, rec, o, exists)
		return view, nil
	case stepHold: // its configuration recorded before anything else, then held
		rec, err := p.recordFound(name, module, o)
		if err != nil {
			return view, err
		}
		p.d.log.Info("found container held", "container", name, "module", module, "id", report.Short(o.ID), "image", o.ImageRef)
		p.observeHeld(&view, rec, o, true)
		return view, nil
	case stepCreate:
		return p.create(ctx, view, spec, rec)
	case stepAdopt, stepReplace:
		if a.recordFound {
			var err error
			if rec, err = p.recordFound(name, module, o); err != nil {
				return view, err
			}
		}
		if a.step == stepAdopt {
			return p.adopt(ctx, view, spec, o, rec, a.start)
		}
		if until, wait := takeWaits(rec, takeKey(spec, o.ID), p.d.now()); wait {
			p.observeHeld(&view, rec, o, true)
			return view, fmt.Errorf("container %s: the take waits until %s after %d failed cutover(s), the found container running on; the last: %s",
				name, until.Format(time.RFC3339), rec.TakeFailures, rec.TakeFailed)
		}
		p.d.log.Info("taking a found container: replacing it", "container", name, "module", module, "id", report.Short(o.ID), "differences", strings.Join(a.diff, "; "))
		return p.take(ctx, view, spec, &o, rec)
	case stepResume:
		return p.resume(ctx, view, spec, rec)
	case stepRecreate:
		return p.recreate(ctx, view, spec, rec)
	case stepConverge:
		return p.converge(ctx, view, spec, o, rec, a.diff)
	}
	// stepStart, stepKeep
	if a.refresh {
		rec.ID, rec.Module, rec.Image = o.ID, module, spec.Image
		if err := p.put(name, rec); err != nil {
			return view, err
		}
	}
	if a.step == stepStart {
		if err := p.d.eng.Start(ctx, name); err != nil {
			return p.viewOf(view, rec, o), err
		}
		p.out.Changes++
		p.d.log.Info("container was stopped: started", "container", name, "module", module, "id", report.Short(o.ID))
		view.Action = "started"
		return p.settle(ctx, view, rec)
	}
	return p.viewOf(view, rec, o), nil
}

// create creates a declared container where nothing is, not yet the host's; a held one's record
// keeps what was found.
func (p *driverPass) create(ctx context.Context, view report.ContainerView, spec ctrspec.Spec, rec *record) (report.ContainerView, error) {
	id, err := p.d.eng.Create(ctx, spec)
	if err != nil {
		return view, err
	}
	return p.created(ctx, view, spec, rec, id)
}

// toCreate is a declared container with no record and nothing at its name: the pass creates it.
type toCreate struct {
	id, module string
	spec       ctrspec.Spec
}

// createAll creates the pass's fresh containers at once (the engine creates and starts each in
// its own time: the foundation's three on a new server, a module's several on assignment), then
// records each in order. Only the engine's calls run side by side; the records, the report and
// the outcome are written by this goroutine alone.
func (p *driverPass) createAll(ctx context.Context, fresh []toCreate) {
	ids, errs := make([]string, len(fresh)), make([]error, len(fresh))
	var wg sync.WaitGroup
	for i, f := range fresh {
		wg.Go(func() { ids[i], errs[i] = p.d.eng.Create(ctx, f.spec) })
	}
	wg.Wait()
	for i, f := range fresh {
		view := report.ContainerView{Name: f.spec.Name, Module: f.module}
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
func (p *driverPass) created(ctx context.Context, view report.ContainerView, spec ctrspec.Spec, rec *record, id string) (report.ContainerView, error) {
	p.out.Changes++
	now := time.Now().UTC()
	nr := &record{Module: view.Module, State: report.ContainerCreated, ID: id, Image: spec.Image, At: now}
	if rec != nil {
		nr = rec
		nr.State, nr.ID, nr.Image, nr.Module, nr.At = report.ContainerReplaced, id, spec.Image, view.Module, now
	}
	if err := p.put(spec.Name, nr); err != nil {
		return view, err
	}
	view.Action = "created"
	return p.settle(ctx, view, nr)
}

// adopt makes a found or held container that already is the declaration the host's, in place.
func (p *driverPass) adopt(ctx context.Context, view report.ContainerView, spec ctrspec.Spec, o container.Observed, rec *record, start bool) (report.ContainerView, error) {
	name, module := spec.Name, view.Module
	rec.State, rec.ID, rec.Image, rec.Module, rec.At = report.ContainerAdopted, o.ID, spec.Image, module, time.Now().UTC()
	if err := p.put(name, rec); err != nil {
		return view, err
	}
	p.d.log.Info("found container adopted in place: it already is the declaration", "container", name, "module", module, "id", report.Short(o.ID))
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
func (p *driverPass) recreate(ctx context.Context, view report.ContainerView, spec ctrspec.Spec, rec *record) (report.ContainerView, error) {
	id, err := p.d.eng.Create(ctx, spec)
	if err != nil {
		view.Changed, view.Reason = true, report.RemovedBySomethingElse
		p.viewFromRecord(&view, rec)
		return view, err
	}
	p.out.Changes++
	p.d.log.Warn("container removed by something else: created again", "container", spec.Name, "module", view.Module, "id", report.Short(id))
	rec.ID, rec.Image, rec.Module = id, spec.Image, view.Module
	if err := p.put(spec.Name, rec); err != nil {
		return view, err
	}
	view.Action, view.Changed, view.Reason = "recreated", true, report.RemovedBySomethingElse
	return p.settle(ctx, view, rec)
}

// converge recreates a container of the host's that differs from its declaration.
func (p *driverPass) converge(ctx context.Context, view report.ContainerView, spec ctrspec.Spec, o container.Observed, rec *record, diff []string) (report.ContainerView, error) {
	reason := report.ChangedBySomethingElse + ": " + strings.Join(diff, "; ")
	p.d.log.Warn("container differs from its declaration: recreating it", "container", spec.Name, "module", view.Module, "id", report.Short(o.ID), "differences", strings.Join(diff, "; "))
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
func (p *driverPass) settle(ctx context.Context, view report.ContainerView, rec *record) (report.ContainerView, error) {
	o, exists, err := p.d.eng.Inspect(ctx, view.Name)
	if err != nil || !exists {
		p.viewFromRecord(&view, rec)
		return view, nil // what was done is done; the next pass looks again
	}
	return p.viewOf(view, rec, o), nil
}

// undeclared handles a recorded container no assigned module declares.
func (p *driverPass) undeclared(ctx context.Context, name string, rec *record) (*report.ContainerView, error) {
	view := report.ContainerView{Name: name, Module: rec.Module, Unassigned: true}
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
		view.Changed, view.Reason = true, report.RemovedBySomethingElse
		return &view, nil
	case leaveRemove:
		if err := p.d.eng.Remove(ctx, name); err != nil {
			return &view, fmt.Errorf("container %s, created for a module no longer assigned, cannot be removed: %w", name, err)
		}
		p.out.Changes++
		p.d.log.Info("container removed: created for a module no longer assigned", "container", name, "module", rec.Module, "id", report.Short(o.ID))
	case leaveForeign:
		p.d.log.Warn("container created for a module no longer assigned was replaced by something else; left as it is",
			"container", name, "module", rec.Module, "id", report.Short(o.ID))
	}
	if err := p.recs.Delete(name); err != nil {
		return &view, err
	}
	delete(p.records, name)
	p.out.Changes++
	return nil, nil
}
