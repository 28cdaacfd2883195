package containers

// A take of a found or held container, staged (see "A take is staged" in the package doc):
// prepare (the new container created, not started, under ctrStagedName: a missing image or a
// refused configuration stops the take with nothing touched), record the cutover, then cut over.
// Everything the cutover can do while the found container still serves is done first — its
// restart policy set to "no", moved aside under AsideName (a running container can be renamed),
// the new one moved into the declared name — so that what serves nothing is only the stop of the
// found container and the start of the new one. A cutover that fails puts back what was found:
// the new container removed, the found one renamed back and started if it ran. The replaced
// container stays stopped under its moved-aside name until the operator removes it.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"meshd/container"
	"meshd/ctrspec"
	"meshd/host/pass"
	"meshd/report"
)

// take replaces a found or held container with spec's, staged. o is the found container at the
// declared name; nil when an interrupted take already moved it aside (rec.Cutover says where).
// It is one function, longer than most, because it is one ordered sequence whose every step
// after the recorded cutover shares the same put-back: split up, the order and what each failure
// undoes would no longer read in one place.
func (p *driverPass) take(ctx context.Context, view report.ContainerView, spec ctrspec.Spec, o *container.Observed, rec *record) (report.ContainerView, error) {
	name := spec.Name
	stage := stagedName(name)
	held := func() report.ContainerView {
		if o != nil {
			p.observeHeld(&view, rec, *o, true)
		} else {
			p.viewFromRecord(&view, rec)
		}
		return view
	}
	// Prepare: a staged container an interrupted take left goes first.
	if err := p.d.eng.Remove(ctx, stage); err != nil {
		return held(), fmt.Errorf("container %s: take not prepared, nothing touched: removing the staged %s an earlier take left: %w", name, stage, err)
	}
	newID, err := p.d.eng.Prepare(ctx, spec, stage)
	if err != nil {
		return held(), fmt.Errorf("container %s: take not prepared, nothing touched: %w", name, err)
	}
	p.out.Changes++
	p.d.crash("take.container.after-prepare")

	cut := rec.Cutover
	if o != nil {
		wasRunning, restart, raw := o.Running, o.Spec.Restart, o.Raw
		if cut != nil && cut.OldID == o.ID { // a crash came before it was moved aside (its restart policy may be "no" already)
			wasRunning, restart, raw = wasRunning || cut.WasRunning, cut.Restart, cut.Replaced
		}
		cut = &cutover{OldID: o.ID, WasRunning: wasRunning, Replaced: raw, Aside: report.AsideName(name, o.ID), Restart: restart}
	}
	cut.StagedID = newID
	rec.Cutover = cut
	if err := p.put(name, rec); err != nil {
		return held(), errors.Join(fmt.Errorf("container %s: take not cut over: %w", name, err), p.d.eng.Remove(ctx, newID))
	}
	p.d.crash("take.container.after-record-cutover")

	// Cut over.
	movedAside := o == nil
	fail := func(step string, err error) (report.ContainerView, error) {
		cause := fmt.Errorf("container %s: take failed at %s: %w", name, step, err)
		key := takeKey(spec, cut.OldID)
		if rec.TakeFailedFor != key {
			rec.TakeFailures = 0
		}
		rec.TakeFailedFor, rec.TakeFailures, rec.TakeFailedAt, rec.TakeFailed = key, rec.TakeFailures+1, p.d.now().UTC(), cause.Error()
		if back := p.putBack(ctx, name, rec, movedAside); back != nil {
			return held(), errors.Join(cause, back)
		}
		until, _ := takeWaits(rec, key, p.d.now())
		return held(), fmt.Errorf("%w; the found container %s is back as it was; the take is tried again from %s",
			cause, report.Short(cut.OldID), until.Format(time.RFC3339))
	}
	if o != nil {
		// While the found container still serves: its restart policy, its name.
		if report.RestartOf(cut.Restart) != ctrspec.RestartNo {
			if err := p.d.eng.SetRestart(ctx, o.ID, ctrspec.RestartNo); err != nil {
				return fail("setting the found container's restart policy to no", err)
			}
		}
		if err := p.d.eng.Rename(ctx, o.ID, cut.Aside); err != nil {
			return fail("moving the found container aside to "+cut.Aside, err)
		}
		movedAside = true
		p.d.crash("take.container.after-move-aside")
	}
	if err := p.d.eng.Rename(ctx, newID, name); err != nil {
		return fail("moving the new container into place", err)
	}
	p.d.crash("take.container.after-move-new")
	// The swap: from here until the new container started, nothing serves. Stopping one already
	// stopped (a take a crash interrupted) is not an error.
	swap := time.Now()
	if err := p.d.eng.Stop(ctx, cut.OldID); err != nil {
		return fail("stopping the found container", err)
	}
	p.d.crash("take.container.after-stop")
	if err := p.d.eng.Start(ctx, name); err != nil {
		return fail("starting the new container", err)
	}
	gap := time.Since(swap)
	p.out.Changes++
	now := time.Now().UTC()
	rec.State, rec.ID, rec.Image, rec.Module, rec.At = report.ContainerReplaced, newID, spec.Image, view.Module, now
	rec.Replaced, rec.ReplacedAt, rec.ReplacedID, rec.Aside, rec.Cutover = cut.Replaced, now, cut.OldID, cut.Aside, nil
	rec.AsideRestart = cut.Restart
	rec.TakeFailedFor, rec.TakeFailures, rec.TakeFailedAt, rec.TakeFailed = "", 0, time.Time{}, ""
	if err := p.put(name, rec); err != nil {
		return view, err
	}
	p.d.cut[view.Module] = append(p.d.cut[view.Module], name)
	p.d.log.Info("container taken: the found one is kept stopped aside", "container", name, "module", view.Module,
		"id", report.Short(newID), "aside", cut.Aside, "swap", gap.Round(time.Millisecond))
	view.Action = "replaced"
	return p.settle(ctx, view, rec)
}

// resume finishes a take a crash cut short after the found container was moved aside; if it is
// not there either (something removed it), the declaration is simply created.
func (p *driverPass) resume(ctx context.Context, view report.ContainerView, spec ctrspec.Spec, rec *record) (report.ContainerView, error) {
	o, exists, err := p.d.eng.Inspect(ctx, rec.Cutover.Aside)
	if err != nil {
		p.viewFromRecord(&view, rec)
		return view, err
	}
	if exists && o.ID == rec.Cutover.OldID {
		p.d.log.Warn("finishing a take a crash interrupted", "container", spec.Name, "aside", rec.Cutover.Aside)
		return p.take(ctx, view, spec, nil, rec)
	}
	rec.Cutover = nil
	return p.create(ctx, view, spec, rec)
}

// putBack undoes a cutover: the new container removed, the found one renamed back and started if
// it ran, the record held again. Every step is tried; what fails is named.
func (p *driverPass) putBack(ctx context.Context, name string, rec *record, movedAside bool) error {
	ctx = context.WithoutCancel(ctx)
	cut := rec.Cutover
	var errs []error
	if err := p.d.eng.Remove(ctx, cut.StagedID); err != nil {
		errs = append(errs, fmt.Errorf("removing the new container %s: %w", report.Short(cut.StagedID), err))
	}
	if movedAside {
		if err := p.d.eng.Rename(ctx, cut.OldID, name); err != nil {
			errs = append(errs, fmt.Errorf("renaming the found container back from %s: %w", cut.Aside, err))
		}
	}
	if report.RestartOf(cut.Restart) != ctrspec.RestartNo {
		if err := p.d.eng.SetRestart(ctx, cut.OldID, cut.Restart); err != nil {
			errs = append(errs, fmt.Errorf("giving the found container its restart policy %s back: %w", cut.Restart, err))
		}
	}
	if cut.WasRunning {
		if err := p.d.eng.Start(ctx, cut.OldID); err != nil {
			errs = append(errs, fmt.Errorf("starting the found container %s again: %w", report.Short(cut.OldID), err))
		}
	}
	p.out.Changes++
	if len(errs) > 0 {
		return fmt.Errorf("container %s: putting back what was found failed (its record keeps the take under way): %w", name, errors.Join(errs...))
	}
	rec.Cutover = nil
	if err := p.put(name, rec); err != nil {
		return err
	}
	p.d.log.Warn("take failed: the found container is back", "container", name, "id", report.Short(cut.OldID))
	return nil
}

// StepBack puts back, for module, what the containers its take cut over in the last pass
// replaced: the host calls it when the take's file cutover fails after the containers'.
func (d *Driver) StepBack(ctx context.Context, ps pass.Pass, module string) error {
	records := map[string]*record{}
	if err := loadRecords(ps.Records, records); err != nil {
		return err
	}
	p := &driverPass{d: d, recs: ps.Records, records: records}
	var errs []error
	for _, name := range d.cut[module] {
		rec := records[name]
		if rec == nil || rec.State != report.ContainerReplaced || rec.Aside == "" {
			continue
		}
		rec.Cutover = &cutover{OldID: rec.ReplacedID, WasRunning: true, Replaced: rec.Replaced, Aside: rec.Aside, StagedID: rec.ID, Restart: rec.AsideRestart}
		if err := p.putBack(ctx, name, rec, true); err != nil {
			errs = append(errs, err)
			continue
		}
		for _, r := range ps.Resources { // the take waits before it stops the found one again
			if r.Container != nil && r.Container.Name == name {
				key := takeKey(report.SpecOf(r), rec.ReplacedID)
				if rec.TakeFailedFor != key {
					rec.TakeFailures = 0
				}
				rec.TakeFailedFor, rec.TakeFailures, rec.TakeFailedAt = key, rec.TakeFailures+1, d.now().UTC()
				rec.TakeFailed = fmt.Sprintf("container %s: stepped back: a file of module %s could not be written", name, module)
			}
		}
		rec.State, rec.ID, rec.Image, rec.At = report.ContainerHeld, rec.ReplacedID, rec.FoundImage, time.Now().UTC()
		rec.Replaced, rec.ReplacedAt, rec.ReplacedID, rec.Aside, rec.AsideRestart = nil, time.Time{}, "", "", ""
		if err := p.put(name, rec); err != nil {
			errs = append(errs, err)
		}
	}
	delete(d.cut, module)
	return errors.Join(errs...)
}

// takeKey names what a take replaces with what: a failed cutover's wait holds while both stay.
func takeKey(spec ctrspec.Spec, foundID string) string {
	b, _ := json.Marshal(spec)
	return pass.HashOf(append(b, foundID...))
}

// takeWaits says whether a take of a container whose cutover failed before waits still: 30 s
// after the first failure, doubling with each, at most 30 minutes; a new declaration or another
// found container does not wait.
func takeWaits(rec *record, key string, now time.Time) (until time.Time, wait bool) {
	if rec == nil || rec.TakeFailures == 0 || rec.TakeFailedFor != key {
		return time.Time{}, false
	}
	d := 30 * time.Second
	for i := 1; i < rec.TakeFailures && d < 30*time.Minute; i++ {
		d *= 2
	}
	d = min(d, 30*time.Minute)
	until = rec.TakeFailedAt.Add(d)
	return until, now.Before(until)
}
