package netfilter

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/google/nftables"
)

// Watch calls recheck when the packet filter in env changes and at least every interval,
// until ctx is done. Changes are nftables netlink events, which nft, iptables-nft and ufw over
// iptables-nft all raise, so a reload (ufw reload, nft -f /etc/nftables.conf and its flush
// ruleset) is repaired within milliseconds; the interval covers iptables-legacy, which raises
// none, and a lost event. It calls recheck once as soon as it is subscribed. recheck is typically a Driver's Converge with the desired set; a
// converge with nothing to change writes nothing, so meshd's own writes settle after one
// more call.
func Watch(ctx context.Context, env Env, interval time.Duration, recheck func(context.Context)) error {
	return WatchChanges(ctx, env, interval, nil, func(ctx context.Context, _ Tick) { recheck(ctx) })
}

// Tick says why a watch calls its recheck.
type Tick struct {
	// Timer: the interval's call. Otherwise the watch's start, its monitor's restart or an
	// event of the packet filter: something may have changed, so read it all again.
	Timer bool
}

// Changes counts what a watch's nftables monitor reported, for a caller that skips re-reading
// the packet filter while nothing changed. Its zero value reads as no monitor (never quiet).
//
// A stamp (Stamp: the ruleset's generation) alone cannot say a read saw everything: the kernel
// moves the generation when a commit begins applying its changes, so a read between the two
// sees the new generation and the old rules, and a caller that then skips on that generation
// would skip for good. The commit's events arrive only once it is applied: a caller that keeps
// the mark from before such a read and re-reads whenever the mark moved (and on every call not
// of the timer, which events cause) misses nothing.
type Changes struct {
	n    atomic.Uint64
	live atomic.Bool
}

// Mark returns the count of the monitor's events (its subscription and its loss count too) and
// whether it is subscribed now: two equal marks, both live, mean it reported nothing between.
func (c *Changes) Mark() (mark uint64, live bool) {
	if c == nil {
		return 0, false
	}
	live = c.live.Load()
	return c.n.Load(), live
}

// Seen notes one event of the monitor (a watch calls it; so can a fake of one).
func (c *Changes) Seen() {
	if c != nil {
		c.n.Add(1)
	}
}

// Subscribed notes the monitor subscribed (live) or gone; either moves the mark.
func (c *Changes) Subscribed(live bool) {
	if c != nil {
		c.n.Add(1)
		c.live.Store(live)
	}
}

// WatchChanges is Watch, saying to recheck why it is called (Tick) and counting the monitor's
// events in changes (nil: not counted).
func WatchChanges(ctx context.Context, env Env, interval time.Duration, changes *Changes, recheck func(context.Context, Tick)) error {
	if interval <= 0 {
		interval = 500 * time.Millisecond
	}
	kick := make(chan struct{}, 1)
	startMonitor := func() (func(), <-chan struct{}) {
		c, closeConn, err := env.NftConn()
		if err != nil {
			env.Logger().Warn("nftables monitor unavailable, re-checking on the timer only", "err", err)
			return func() {}, nil
		}
		mon := nftables.NewMonitor(nftables.WithMonitorEventBuffer(1024))
		events, err := c.AddMonitor(mon)
		if err != nil {
			closeConn()
			env.Logger().Warn("nftables monitor unavailable, re-checking on the timer only", "err", err)
			return func() {}, nil
		}
		done := make(chan struct{})
		changes.Subscribed(true)
		go func() {
			defer close(done)
			defer changes.Subscribed(false)
			for range events {
				changes.Seen()
				select {
				case kick <- struct{}{}:
				default:
				}
			}
		}()
		// Stopped, it reads gone at once: the goroutine above ends only once the monitor's
		// channel closes, after the watch may have returned (a caller then read a dead monitor
		// as live, and a pass at rest could trust it).
		return func() { mon.Close(); closeConn(); changes.Subscribed(false) }, done
	}
	stop, died := startMonitor()
	defer func() { stop() }()
	t := time.NewTicker(interval)
	defer t.Stop()
	recheck(ctx, Tick{}) // once at the start, with the monitor already subscribed
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-died:
			stop()
			stop, died = startMonitor()
			recheck(ctx, Tick{})
		case <-kick:
			// let a reload's burst of events finish before reading
			time.Sleep(20 * time.Millisecond)
			select {
			case <-kick:
			default:
			}
			recheck(ctx, Tick{})
		case <-t.C:
			recheck(ctx, Tick{Timer: true})
		}
	}
}
