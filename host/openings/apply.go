package openings

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"meshd/fsm"
	"meshd/netfilter"
	"meshd/report"
)

// detect reads the found firewall and keeps a driver for it, rebuilt when its kind, its backend
// or the private network changes (the driver remembers since when each opening is in force).
func (d *Driver) detect(ctx context.Context, priv netfilter.Private) {
	// The stamp is read before the firewall: a change while Detect reads moves the stamp past
	// the one kept, so the next pass detects again.
	d.det.stamp = d.pf.Stamp(ctx)
	f, err := d.pf.Detect(ctx)
	d.det.detected, d.det.redetect = true, false
	if err != nil {
		if d.det.foundErr == nil || d.det.foundErr.Error() != err.Error() {
			d.log.Warn("found firewall not spoken", "err", err)
		}
		d.det.found, d.det.foundErr, d.det.fw, d.det.fwKey = netfilter.Found{}, err, nil, ""
		return
	}
	d.det.foundErr = nil
	key := fmt.Sprintf("%s|%s|%s|%s", f.Kind, f.Backend, priv.Interface, priv.Range)
	if d.det.fw == nil || key != d.det.fwKey {
		fw, err := d.pf.NewDriver(f, priv)
		if err != nil {
			d.det.found, d.det.foundErr, d.det.fw, d.det.fwKey = f, err, nil, ""
			return
		}
		if d.det.fwKey != "" {
			d.log.Info("found firewall changed", "found", f.String())
			// The new driver learns what was in force, so what it puts back reads restored.
			if r, ok := fw.(netfilter.Rememberer); ok {
				since := map[string]time.Time{}
				for mark, m := range d.force.states {
					if m.state == report.OpeningInForce || m.state == report.OpeningRestored {
						since[mark] = m.since
					}
				}
				r.Remember(since)
			}
		}
		d.det.fw, d.det.fwKey = fw, key
	}
	d.det.found = f
}

// plan is what a pass does to the packet filter, decided before anything is done.
type plan struct {
	// refused, when set, fails every opening: the found firewall is not spoken or not read.
	refused string
	// throughFound: the openings go through the found firewall, as meshd-marked rules.
	throughFound bool
	// filter: meshd's derived filter is loaded (then the guard removed); otherwise the guard is
	// loaded (and the derived filter removed).
	filter bool
}

// decideOpenings is the opening kind's decision: a pure function of the node's mode and the
// firewall found (or why it could not be spoken). On an adopted node the found firewall carries
// every opening and meshd loads only the guard; on a converged node the derived filter carries
// them, and the found firewall too while it is still active.
func decideOpenings(mode fsm.Mode, found netfilter.Found, foundErr error) plan {
	plan := plan{filter: mode == fsm.Converged}
	switch {
	case foundErr != nil:
		// The refusal names the firewall (ErrUnsupported's text ends the sentence); the next pass
		// detects again.
		plan.refused = foundErr.Error()
		if !errors.Is(foundErr, netfilter.ErrUnsupported) {
			plan.refused = "the found firewall could not be read: " + plan.refused
		}
	case mode == fsm.Converged && (!found.Active || found.Kind == netfilter.KindNone):
		// retired or nothing there: meshd's filter alone carries the openings
	default:
		plan.throughFound = true
	}
	return plan
}

// applied is what one application of the desired state did: each failed opening's reason by
// mark, what carries the others, and the found firewall's report.
type applied struct {
	changes int
	failed  map[string]string
	through []string
	rep     netfilter.Report
	repOK   bool
}

// restState is what an application that left every opening and meshd's table in force read
// just before it began: the watch's monitor mark, the packet filter's stamp, and whether a
// retired found firewall was on record. While all three read the same and the desired state is
// the one it applied, the machine is as it left it.
type restState struct {
	valid   bool
	mark    uint64
	stamp   string
	key     string
	retired bool
}

// atRest says whether an application may be skipped: nothing it depends on moved since one that
// left everything in force (restState). Never for the watch's calls caused by an event, its
// start or its monitor's restart (tick.Timer false), nor without a live monitor: the stamp
// alone can move before a commit's changes are visible (netfilter.Changes), and only the
// commit's events, which come once they are, say the read that saw the stamp was late.
func (d *Driver) atRest(w *desiredOpenings, mark uint64, live bool, stamp string, pass bool) bool {
	r := d.memo.rest
	if !r.valid || !live || stamp == "" || r.mark != mark || r.stamp != stamp || r.key != w.key ||
		d.det.redetect || !d.det.detected || r.retired != d.retiredNow() {
		return false
	}
	// A pass also removes the other mode's table the first time (the watch never does).
	return !pass || (w.mode == fsm.Converged && !d.force.guardMaybe) || (w.mode != fsm.Converged && !d.force.filterMaybe)
}

func (d *Driver) retiredNow() bool { return d.flip.retired != nil && d.flip.retired.Retired != nil }

// apply brings the packet filter to d.force.want and records each opening's state; it returns what
// it changed. Called with d.mu held, by a pass (tick zero, fromWatch false) or by the watch. A pass
// or the watch's timer over a machine at rest (atRest) reads the monitor's mark and the stamp and
// nothing else: the openings, guard and filter stay as the last application recorded them.
func (d *Driver) apply(ctx context.Context, fromWatch bool, tick netfilter.Tick) int {
	w := d.force.want
	now := time.Now().UTC()
	d.force.lastApply = now
	// The mark before the stamp: an event after it moves the mark, whatever the stamp read.
	mark, live := d.memo.changes.Mark()
	stamp := d.pf.Stamp(ctx)
	if (!fromWatch || tick.Timer) && d.atRest(w, mark, live, stamp, !fromWatch) {
		return 0
	}
	d.memo.rest = restState{}
	sameWant := d.force.applied == w.key
	d.force.applied = w.key
	if d.det.redetect || !d.det.detected {
		d.detect(ctx, w.priv)
	}
	plan := decideOpenings(w.mode, d.det.found, d.det.foundErr)
	if w.mode == fsm.Converged && d.flip.retired != nil && d.flip.retired.Retired != nil {
		// meshd retired the found firewall: what is left of it (ufw's jumps, Docker's hooks into
		// it) is not a firewall to open ports in; meshd's filter alone carries the openings.
		plan.throughFound, plan.refused = false, ""
	}
	res := &applied{failed: map[string]string{}}
	if plan.refused != "" {
		for _, e := range w.entries {
			res.failed[e.mark] = plan.refused
		}
	}
	if plan.throughFound {
		d.throughFound(ctx, w, res)
	}
	if plan.filter {
		d.loadFilter(ctx, w, res, fromWatch, sameWant, now)
	} else {
		d.loadGuard(ctx, w, res, fromWatch, sameWant, now)
	}
	d.recordStates(w, res, now)
	which := "guard:"
	if plan.filter {
		which = "filter:"
	}
	if live && stamp != "" && len(res.failed) == 0 && d.allInForce() && d.force.bootKept == which+w.key {
		d.memo.rest = restState{valid: true, mark: mark, stamp: stamp, key: w.key, retired: d.retiredNow()}
	}
	return res.changes
}

// allInForce says whether every opening and meshd's table are in force as last recorded.
func (d *Driver) allInForce() bool {
	for _, m := range d.force.states {
		if m.state == report.OpeningFailed {
			return false
		}
	}
	return d.force.guard.failed == "" && d.force.filter.failed == "" && d.det.foundErr == nil
}

// throughFound makes the found firewall's meshd-marked rules the declared openings.
func (d *Driver) throughFound(ctx context.Context, w *desiredOpenings, res *applied) {
	r, err := d.det.fw.Converge(ctx, w.openings)
	if err != nil {
		reason := fmt.Sprintf("found firewall %s: %v", d.det.found.Kind, err)
		for _, e := range w.entries {
			res.failed[e.mark] = reason
		}
		d.det.redetect = true // it may have changed kind under us
		return
	}
	res.rep, res.repOK = r, true
	res.changes += r.Added + r.Removed
	res.through = append(res.through, "found "+string(d.det.found.Kind))
}

// loadFilter loads the derived filter on a converged node, then removes the guard.
func (d *Driver) loadFilter(ctx context.Context, w *desiredOpenings, res *applied, fromWatch, sameWant bool, now time.Time) {
	wrote, err := d.pf.LoadFilter(ctx, w.filter)
	d.force.filterMaybe = true
	d.recordTable(&d.force.filter, wrote, err, sameWant, now)
	if wrote {
		res.changes++
		if !fromWatch && d.flip.intent != nil && d.flip.intent.To == fsm.Converged {
			d.crash("flip.after-filter")
		}
	}
	if err != nil {
		for _, e := range w.entries {
			if res.failed[e.mark] == "" {
				res.failed[e.mark] = fmt.Sprintf("the derived filter (nftables table inet %s) is not loaded: %v", netfilter.FilterTable, err)
			}
		}
		return
	}
	res.through = append([]string{"meshd filter"}, res.through...)
	spec := w.filter
	d.keepForBoot(w.key, netfilter.BootTables{Filter: &spec})
	if d.force.guardMaybe && !fromWatch {
		if err := d.pf.RemoveGuard(ctx); err != nil {
			d.log.Warn("remove the guard on a converged node", "err", err)
			return
		}
		if d.force.guard.loaded {
			res.changes++
		}
		d.force.guardMaybe, d.force.guard = false, tableMemory{}
	}
}

// keepForBoot keeps the table just loaded for the next boot (netfilter.BootTables), once per
// desired state: a pass with nothing to do neither reads nor writes the kept copy. A failure is
// logged and tried again by the next pass; the openings themselves are in force either way.
func (d *Driver) keepForBoot(key string, t netfilter.BootTables) {
	which := "guard:"
	if t.Filter != nil {
		which = "filter:"
	}
	if d.force.bootKept == which+key {
		return
	}
	wrote, err := d.pf.KeepForBoot(t)
	if err != nil {
		d.log.Warn("keep meshd's table for the next boot", "err", err)
		return
	}
	if wrote {
		d.log.Info("kept meshd's table for the next boot", "table", strings.TrimSuffix(which, ":"))
	}
	d.force.bootKept = which + key
}

// loadGuard loads the guard on an adopted node, then removes the derived filter.
func (d *Driver) loadGuard(ctx context.Context, w *desiredOpenings, res *applied, fromWatch, sameWant bool, now time.Time) {
	wrote, err := d.pf.Guard(ctx, w.guard)
	d.force.guardMaybe = true
	d.recordTable(&d.force.guard, wrote, err, sameWant, now)
	if wrote {
		res.changes++
		if !fromWatch && d.flip.intent != nil && d.flip.intent.To == fsm.Adopted {
			d.crash("return.after-guard")
		}
	}
	if err != nil {
		for _, e := range w.entries {
			if e.res.Opening != nil && e.res.Opening.Guarded && res.failed[e.mark] == "" {
				res.failed[e.mark] = fmt.Sprintf("the guard (nftables table inet %s) is not loaded: %v", netfilter.GuardTable, err)
			}
		}
	} else {
		spec := w.guard
		d.keepForBoot(w.key, netfilter.BootTables{Guard: &spec})
	}
	if d.force.filterMaybe && !fromWatch {
		if err := d.pf.RemoveFilter(ctx); err != nil {
			d.log.Warn("remove the derived filter on an adopted node", "err", err)
			return
		}
		if d.force.filter.loaded {
			res.changes++
		}
		d.force.filterMaybe, d.force.filter = false, tableMemory{}
	}
}

// recordStates notes each declared opening's state after an application, and forgets the
// openings no longer declared.
func (d *Driver) recordStates(w *desiredOpenings, res *applied, now time.Time) {
	byMark := map[string]netfilter.OpeningState{}
	if res.repOK {
		for _, s := range res.rep.Openings {
			byMark[s.Opening.Mark()] = s
		}
	}
	keep := map[string]bool{}
	for _, e := range w.entries {
		if e.invalid != "" {
			continue
		}
		keep[e.mark] = true
		m := d.force.states[e.mark]
		if m == nil {
			m = &memory{}
			d.force.states[e.mark] = m
		}
		s, reported := byMark[e.mark]
		switch {
		case res.failed[e.mark] != "":
			m.state, m.reason, m.since, m.through = report.OpeningFailed, res.failed[e.mark], time.Time{}, ""
		case reported && s.State == netfilter.Failed:
			m.state, m.reason, m.since, m.through = report.OpeningFailed, fmt.Sprintf("found firewall %s: %s", d.det.found.Kind, s.Reason), time.Time{}, ""
		default:
			d.inForce(m, w.mode, s, reported, strings.Join(res.through, " and "), now)
		}
	}
	for k := range d.force.states {
		if !keep[k] {
			delete(d.force.states, k)
		}
	}
}

// inForce notes an opening in force: since when, and when it was last restored (by the found
// firewall's driver, s when reported, or by the derived filter loaded again).
func (d *Driver) inForce(m *memory, mode fsm.Mode, s netfilter.OpeningState, reported bool, through string, now time.Time) {
	wasFailed := m.state == report.OpeningFailed || m.state == ""
	m.state, m.reason, m.through = report.OpeningInForce, "", through
	if reported {
		m.reason = s.Reason // what it rests on, e.g. "the found ruleset does not filter this path"
		if s.State == netfilter.Restored {
			m.restoredAt = s.At
		}
		if m.since.IsZero() || s.State == netfilter.Restored || wasFailed {
			m.since = s.At
		}
	}
	if mode == fsm.Converged && d.force.filter.loaded {
		if !d.force.filter.restoredAt.IsZero() && d.force.filter.restoredAt.After(m.restoredAt) && !wasFailed {
			m.restoredAt = d.force.filter.restoredAt
		}
		if m.since.IsZero() || wasFailed {
			m.since = now
		}
	}
	if m.since.IsZero() {
		m.since = now
	}
	if !m.restoredAt.IsZero() {
		m.state = report.OpeningRestored
	}
}

// recordTable notes what loading one of meshd's own tables did: loaded since when, restored when
// it had to be written again though nothing desired changed.
func (d *Driver) recordTable(t *tableMemory, wrote bool, err error, sameWant bool, now time.Time) {
	if err != nil {
		t.loaded, t.failed, t.since = false, err.Error(), time.Time{}
		return
	}
	if wrote && t.loaded && sameWant {
		t.restoredAt = now
	}
	if !t.loaded || t.since.IsZero() {
		t.since = now
	}
	t.loaded, t.failed = true, ""
}
