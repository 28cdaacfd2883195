package openings

// The flip on the machine (ADR 0100's last step), carried out by the opening driver: a node's
// declaration names a pending flip (fsm.Declaration.Flip) and asks for its mode.
//
// To converged: the derived filter is loaded first (apply, as on any converged pass), then the
// found firewall is retired by disabling it, never flushing it (firewall.Retire): the
// retirement is recorded in the host's record store before it starts and again, with what
// Restore needs, once it is done. To adopted (the return): the retired firewall is restored from
// that record first (firewall.Restore: ufw enabled from its files, the found nftables tables
// loaded from their dumps), then the pass loads the guard and unloads the filter. Each order
// keeps the machine at least as closed as either firewall alone; never open.
//
// The driver reports the flip done (report.OpeningDetail.Flip) once the machine is in the declared
// mode's state, and a server then records the node in its new mode. A process killed anywhere in
// between finds the same declaration after a restart and finishes: every step is checked against
// the machine and its record, not remembered.

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"meshd/fsm"
	"meshd/host/pass"
	"meshd/netfilter"
	"meshd/report"
)

// retiredKey is the opening driver's record of the found firewall it retired.
const retiredKey = "retired"

// retiredRecord is what the host keeps of a retirement, from before it starts.
type retiredRecord struct {
	Kind  netfilter.Kind `json:"kind"`
	Found string         `json:"found"`
	// State is the found firewall as Detect read it when the retirement began.
	State netfilter.Found `json:"state"`
	At    time.Time       `json:"at"`
	// Retired is what firewall.Retire returned; nil while the retirement is under way (a
	// process killed then left it recorded and not finished).
	Retired *netfilter.Retired `json:"retired,omitempty"`
}

func loadRetired(recs *pass.Records) (*retiredRecord, error) {
	if recs == nil {
		return nil, nil
	}
	b, ok, err := recs.Get(retiredKey)
	if err != nil || !ok {
		return nil, err
	}
	var r retiredRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("the host's record of the retired firewall is unreadable: %w", err)
	}
	return &r, nil
}

func putRetired(recs *pass.Records, r retiredRecord) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return recs.Put(retiredKey, b)
}

// retireFound retires the found firewall on a node a pending flip converges, once the derived
// filter is in force. A converged node with no flip pending has its found firewall left as it is
// (an operator who enabled it again by hand meant it), and one meshd retired is not retired again
// (what ufw leaves behind when disabled can read as another firewall). A retirement that was
// interrupted is finished in the terms it was begun. Called with d.mu held, after apply.
func (d *Driver) retireFound(ctx context.Context, recs *pass.Records) (int, error) {
	if d.flip.intent == nil || d.flip.intent.To != fsm.Converged || !d.force.filter.loaded || recs == nil {
		return 0, nil
	}
	rec, err := loadRetired(recs)
	if err != nil || (rec != nil && rec.Retired != nil) {
		return 0, err
	}
	found := d.det.found
	switch {
	case rec != nil && (rec.Kind == netfilter.KindNftables || rec.Kind == netfilter.KindIptables) && !(found.Kind == rec.Kind && found.Active):
		// Its tables (or its iptables rules) are gone: netfilter saved them before it removed them.
		saved, err := d.pf.Saved()
		if err != nil {
			return 0, fmt.Errorf("finish the interrupted retirement of %s: %w", rec.Found, err)
		}
		rec.Retired = &saved
		return 1, putRetired(recs, *rec)
	case rec != nil:
		found = rec.State
	case d.det.foundErr != nil || !found.Active || found.Kind == netfilter.KindNone:
		return 0, nil
	}
	if err := putRetired(recs, retiredRecord{Kind: found.Kind, Found: found.String(), State: found, At: time.Now().UTC()}); err != nil {
		return 0, fmt.Errorf("record the retirement of the found firewall (%s): %w", found, err)
	}
	d.crash("flip.before-retire")
	r, err := d.pf.Retire(ctx, found)
	if err != nil {
		return 0, fmt.Errorf("retire the found firewall (%s): %w", found, err)
	}
	done := retiredRecord{Kind: found.Kind, Found: found.String(), State: found, At: time.Now().UTC(), Retired: &r}
	if err := putRetired(recs, done); err != nil {
		return 1, fmt.Errorf("record the retired firewall (%s): %w", found, err)
	}
	d.flip.retired = &done
	d.crash("flip.after-retire")
	d.log.Info("found firewall retired: disabled, its configuration kept", "found", found.String())
	d.det.redetect = true
	d.detect(ctx, d.force.want.priv)
	return 1, nil
}

// restoreFound gives the retired firewall back on an adopted node, before the pass loads the
// guard and unloads the filter. Called with d.mu held, before apply.
func (d *Driver) restoreFound(ctx context.Context, recs *pass.Records) (int, error) {
	rec, err := loadRetired(recs)
	if err != nil || rec == nil {
		return 0, err
	}
	r := rec.Retired
	if r == nil {
		// Killed while retiring: what netfilter saved before it removed anything, else the kind
		// alone (ufw needs nothing more to be enabled again).
		if saved, err := d.pf.Saved(); err == nil && saved.Kind == rec.Kind {
			r = &saved
		} else {
			r = &netfilter.Retired{Kind: rec.Kind}
		}
	}
	if err := d.pf.Restore(ctx, *r); err != nil {
		return 0, fmt.Errorf("restore the retired firewall (%s): %w", rec.Found, err)
	}
	d.crash("return.after-restore")
	if err := recs.Delete(retiredKey); err != nil {
		return 1, fmt.Errorf("forget the retired firewall (%s) once restored: %w", rec.Found, err)
	}
	d.log.Info("retired firewall restored from its configuration", "found", rec.Found)
	d.det.redetect = true
	return 1, nil
}

// flipView says whether the machine is in the pending flip's state.
func (d *Driver) flipView(f *fsm.FlipIntent, rec *retiredRecord) *report.FlipView {
	if f == nil {
		return nil
	}
	v := &report.FlipView{To: f.To, Since: f.Since}
	retired := rec != nil && rec.Retired != nil
	switch {
	case d.det.foundErr != nil && !(f.To == fsm.Converged && retired):
		v.Waiting = "the found firewall could not be read: " + d.det.foundErr.Error()
	case f.To == fsm.Converged && !d.force.filter.loaded:
		v.Waiting = "the derived filter is not loaded"
		if d.force.filter.failed != "" {
			v.Waiting += ": " + d.force.filter.failed
		}
	case f.To == fsm.Converged && !retired && d.det.found.Active && d.det.found.Kind != netfilter.KindNone:
		v.Waiting = "the found firewall is still active: " + d.det.found.String()
	case f.To == fsm.Adopted && rec != nil:
		v.Waiting = "the retired firewall is not restored yet: " + rec.Found
	case f.To == fsm.Adopted && !d.force.guard.loaded:
		v.Waiting = "the guard is not loaded"
	case f.To == fsm.Adopted && d.force.filterMaybe:
		v.Waiting = "the derived filter is still loaded"
	default:
		v.Done = true
	}
	return v
}

func retiredView(rec *retiredRecord) *report.RetiredView {
	if rec == nil {
		return nil
	}
	v := &report.RetiredView{Kind: string(rec.Kind), Found: rec.Found, At: rec.At}
	switch rec.Kind {
	case netfilter.KindUFW:
		v.Restore = "`ufw --force enable`: ufw reloads its rules from /etc/ufw"
	case netfilter.KindNftables:
		v.Restore = "its tables loaded again from the dumps saved at the retirement"
	case netfilter.KindIptables:
		v.Restore = "its rules appended again, in their order, and its closed policies closed again, from what was saved at the retirement"
	default:
		v.Restore = "nothing to restore"
	}
	if rec.Retired == nil {
		v.Restore += " (the retirement was interrupted; the next converged pass finishes it)"
	}
	return v
}

// crash SIGKILLs the process when point is the armed crash point (pass.CrashEnv).
func (d *Driver) crash(point string) {
	if d.crasher != nil {
		d.crasher.Reach(point)
	}
}
