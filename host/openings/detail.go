package openings

import (
	"errors"
	"fmt"

	"meshd/fsm"
	"meshd/netfilter"
	"meshd/report"
)

// retiredFirewall is the found firewall as the host's record of its retirement describes it:
// by the kind it was found as, retired, its configuration on disk; now is what a detection reads
// on the machine since (a disabled ufw leaves iptables rules; Docker's stay); again says that
// detection reads it active again, as the kind it was found as.
func retiredFirewall(rec *retiredRecord, now string, again bool) report.FirewallView {
	name := string(rec.Kind)
	if rec.Kind == netfilter.KindIptables && rec.State.Backend != "" {
		name += " over iptables-" + rec.State.Backend
	}
	how := "disabled, its files on disk"
	switch rec.Kind {
	case netfilter.KindNftables:
		how = "its tables saved and moved aside, its files on disk"
	case netfilter.KindIptables:
		how = "its rules saved and removed, its files on disk"
	}
	desc := name + ", retired (" + how + ")"
	if again {
		desc += "; ACTIVE AGAIN: enabled by something else since meshd retired it, it filters beside meshd's filter (retire it again by hand, or return the node with meshd adopt)"
	}
	return report.FirewallView{Kind: string(rec.Kind), Description: desc, Config: rec.State.Config, Tables: rec.State.Tables, Retired: true, Detected: now, ActiveAgain: again}
}

// Status returns the driver's part of the report as it stands now, including what the watch
// restored since the last pass.
func (d *Driver) Status() report.OpeningDetail {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.detailLocked()
}

func (d *Driver) detailLocked() report.OpeningDetail {
	out := report.OpeningDetail{Openings: []report.OpeningView{}, Applied: d.force.lastApply}
	w := d.force.want
	if w == nil {
		out.Watch = "not started"
		return out
	}
	out.Mode, out.Private = w.mode, w.privNote
	switch {
	case d.det.foundErr != nil:
		out.Firewall = report.FirewallView{Kind: "refused", Description: "not spoken", Refused: d.det.foundErr.Error()}
		if !errors.Is(d.det.foundErr, netfilter.ErrUnsupported) {
			out.Firewall.Kind, out.Firewall.Description = "unreadable", "could not be read"
		}
	default:
		out.Firewall = report.FirewallView{Kind: string(d.det.found.Kind), Description: d.det.found.String(), Config: d.det.found.Config, Tables: d.det.found.Tables}
	}
	if d.retiredNow() {
		// The record, not the detection, says what the found firewall is: retired by meshd. What
		// the detection reads now stays beside it; the derived filter and the openings were
		// decided from the detection as before (apply).
		now := out.Firewall.Description
		if out.Firewall.Refused != "" {
			now += ": " + out.Firewall.Refused
		}
		again := d.det.foundErr == nil && d.det.found.Active && d.det.found.Kind == d.flip.retired.Kind
		out.Firewall = retiredFirewall(d.flip.retired, now, again)
	}
	for _, e := range w.entries {
		v := report.OpeningView{Resource: e.res.ID(), Module: e.res.Module, Taken: e.res.Taken}
		if e.res.Opening != nil {
			v.Guarded = e.res.Opening.Guarded
			v.Opening = e.o.String()
		}
		if e.invalid != "" {
			v.State, v.Reason = report.OpeningFailed, e.invalid
		} else if m := d.force.states[e.mark]; m != nil {
			v.State, v.Since, v.RestoredAt, v.Reason, v.Through = m.state, m.since, m.restoredAt, m.reason, m.through
		}
		out.Openings = append(out.Openings, v)
	}
	table := func(name string, t tableMemory, ports []netfilter.Port) *report.TableView {
		tv := &report.TableView{Table: "inet " + name, Ports: []string{}, Since: t.since, RestoredAt: t.restoredAt}
		for _, p := range ports {
			tv.Ports = append(tv.Ports, p.String())
		}
		switch {
		case t.failed != "":
			tv.State, tv.Reason = "failed", t.failed
		case !t.restoredAt.IsZero():
			tv.State = "restored"
		case t.loaded:
			tv.State = "loaded"
		default:
			tv.State = "not loaded"
		}
		return tv
	}
	if w.mode == fsm.Converged {
		out.Filter = table(netfilter.FilterTable, d.force.filter, w.filter.MeshPorts)
	} else {
		out.Guard = table(netfilter.GuardTable, d.force.guard, w.guard.Ports)
	}
	out.Flip, out.Retired = d.flipView(d.flip.intent, d.flip.retired), retiredView(d.flip.retired)
	if d.watch.watchDone != nil {
		out.Watch = fmt.Sprintf("re-applied on every change of the packet filter and every %s", d.recheck)
	} else {
		out.Watch = "stopped: re-applied on every pass only"
	}
	return out
}
