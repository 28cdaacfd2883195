package containers

import (
	"maps"

	"meshd/container"
	"meshd/ctrspec"
	"meshd/report"
)

// step is what the driver does to one declared container this pass.
type step int

const (
	stepObserveHeld step = iota // held, module not taken: observed, never touched
	stepHold                    // found, module not taken: its configuration recorded, then held
	stepCreate                  // nothing there, not the host's yet: created (assigning prepares)
	stepAdopt                   // found or held, taken, already the declaration: adopted in place
	stepReplace                 // found or held, taken, differing: replaced, staged, kept aside
	stepResume                  // held, taken, a take interrupted after moving it aside: finished
	stepRecreate                // the host's, removed by something else: created again
	stepConverge                // the host's, differing from its declaration: recreated
	stepStart                   // the host's, as declared but stopped: started
	stepKeep                    // the host's, as declared and running: nothing to do
)

// claim is how a container carrying meshd's labels for its module is claimed as the host's
// before anything else is decided: it was created in an earlier life of the node, or a crash came
// between creating it and recording it.
type claim int

const (
	claimNone        claim = iota
	claimLabelled          // no record: recorded as created
	claimInterrupted       // held, taken, another id: a take interrupted before it was recorded
)

// action is the decision for one declared container, executed by driverPass.act.
type action struct {
	claim claim
	step  step
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
func decideContainer(rec *record, o container.Observed, exists bool, spec ctrspec.Spec, module string, taken bool) action {
	var a action
	state := ""
	if rec != nil {
		state = rec.State
	}
	labelled := exists && o.Managed && o.Module == module
	switch {
	case rec == nil && labelled:
		a.claim, state = claimLabelled, report.ContainerCreated
	case rec != nil && rec.State == report.ContainerHeld && taken && labelled && o.ID != rec.FoundID:
		a.claim, state = claimInterrupted, report.ContainerReplaced
	}
	if state == "" || state == report.ContainerHeld { // not the host's (yet)
		switch {
		case !taken && state == report.ContainerHeld:
			a.step = stepObserveHeld
		case !taken && exists:
			a.step = stepHold
		case !exists && rec != nil && rec.Cutover != nil: // moved aside by a take a crash cut short
			a.step = stepResume
		case !exists: // never was, or a held one was removed
			a.step = stepCreate
		default:
			a.recordFound = state == ""
			if a.diff = compare(spec, o); len(a.diff) == 0 {
				a.step, a.start = stepAdopt, !o.Running
			} else {
				a.step = stepReplace
			}
		}
		return a
	}
	// The host's: converged on the declaration.
	if !exists {
		a.step = stepRecreate
		return a
	}
	if a.diff = compare(spec, o); len(a.diff) > 0 {
		a.step = stepConverge
		return a
	}
	a.refresh = a.claim == claimNone && (rec.ID != o.ID || rec.Module != module || rec.Image != spec.Image)
	a.step = stepKeep
	if !o.Running {
		a.step = stepStart
	}
	return a
}

// leave is what becomes of a recorded container no assigned module declares.
type leave int

const (
	leaveHeld    leave = iota // held: observed, stays, never removed
	leaveStands               // adopted or replaced a found one, still there: left as it is
	leaveGone                 // adopted or replaced a found one, gone: reported removed
	leaveRemove               // created by the host, still the host's: removed, record dropped
	leaveForeign              // created by the host, something else's now: left, record dropped
	leaveForget               // created by the host, gone: record dropped
)

// decideUndeclared is the decision for a recorded container no assigned module declares: a pure
// function of its record and what the engine shows at its name.
func decideUndeclared(rec *record, o container.Observed, exists bool) leave {
	switch rec.State {
	case report.ContainerHeld:
		return leaveHeld
	case report.ContainerAdopted, report.ContainerReplaced:
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

// compare lists the real differences between the declaration and a container. A container that
// carries none of meshd's labels (a found one, or one adopted in place) is not asked to: labels
// cannot be added to a running container, and adopting it must not recreate it.
func compare(spec ctrspec.Spec, o container.Observed) []string {
	_, hasManaged := o.Labels[ctrspec.LabelManaged]
	_, hasModule := o.Labels[ctrspec.LabelModule]
	if !hasManaged && !hasModule {
		spec.Labels = maps.Clone(spec.Labels)
		delete(spec.Labels, ctrspec.LabelManaged)
		delete(spec.Labels, ctrspec.LabelModule)
	}
	return container.Diff(spec, o)
}
