package netfilter

import (
	"context"
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
	if interval <= 0 {
		interval = 500 * time.Millisecond
	}
	kick := make(chan struct{}, 1)
	startMonitor := func() (func(), <-chan struct{}) {
		c, closeConn, err := env.nftConn()
		if err != nil {
			env.log().Warn("nftables monitor unavailable, re-checking on the timer only", "err", err)
			return func() {}, nil
		}
		mon := nftables.NewMonitor(nftables.WithMonitorEventBuffer(1024))
		events, err := c.AddMonitor(mon)
		if err != nil {
			closeConn()
			env.log().Warn("nftables monitor unavailable, re-checking on the timer only", "err", err)
			return func() {}, nil
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range events {
				select {
				case kick <- struct{}{}:
				default:
				}
			}
		}()
		return func() { mon.Close(); closeConn() }, done
	}
	stop, died := startMonitor()
	defer func() { stop() }()
	t := time.NewTicker(interval)
	defer t.Stop()
	recheck(ctx) // once at the start, with the monitor already subscribed
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-died:
			stop()
			stop, died = startMonitor()
			recheck(ctx)
		case <-kick:
			// let a reload's burst of events finish before reading
			time.Sleep(20 * time.Millisecond)
			select {
			case <-kick:
			default:
			}
			recheck(ctx)
		case <-t.C:
			recheck(ctx)
		}
	}
}
