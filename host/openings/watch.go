package openings

import (
	"context"

	"meshd/netfilter"
)

func (d *Driver) startWatch(passCtx context.Context) {
	wctx, cancel := context.WithCancel(context.WithoutCancel(passCtx))
	stop := context.AfterFunc(passCtx, cancel)
	done := make(chan struct{})
	d.mu.Lock()
	if d.watch.watchDone != nil || d.watch.closed {
		d.mu.Unlock()
		stop()
		cancel()
		return
	}
	d.watch.watchCancel, d.watch.watchDone = cancel, done
	d.mu.Unlock()
	go func() {
		defer close(done)
		defer stop()
		_ = d.pf.Watch(wctx, d.recheck, &d.memo.changes, d.recheckNow)
		d.mu.Lock()
		if d.watch.watchDone == done {
			d.watch.watchCancel, d.watch.watchDone = nil, nil
		}
		d.mu.Unlock()
		cancel()
	}()
}

// recheckNow is the watch's callback: the last desired state, applied again (on the timer, only
// if something moved: apply).
func (d *Driver) recheckNow(ctx context.Context, tick netfilter.Tick) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.force.want == nil || d.watch.closed || ctx.Err() != nil {
		return
	}
	if n := d.apply(ctx, true, tick); n > 0 {
		d.log.Info("packet filter changed under meshd: desired openings re-applied", "changes", n)
	}
	// What moved may be the found firewall itself (ufw enabled or disabled, a ruleset loaded):
	// detected again after the openings are back in force, not before, so a restoration waits
	// for no detection; a pass follows only when the detection reads something else.
	if tick.Timer || d.watch.wake == nil {
		return
	}
	if s := d.pf.Stamp(ctx); s != "" && s != d.det.stamp {
		before := d.foundSig()
		d.detect(ctx, d.force.want.priv)
		if d.foundSig() != before {
			d.watch.wake()
		}
	}
}

// foundSig is what a detection read, as the report says it.
func (d *Driver) foundSig() string {
	if d.det.foundErr != nil {
		return "error: " + d.det.foundErr.Error()
	}
	return d.det.found.String()
}

// WatchDrift lets the watch wake a pass (host.driftSource) until ctx ends.
func (d *Driver) WatchDrift(ctx context.Context, touched func(names ...string)) {
	d.mu.Lock()
	d.watch.wake = touched
	d.mu.Unlock()
	<-ctx.Done()
	d.mu.Lock()
	d.watch.wake = nil
	d.mu.Unlock()
}
