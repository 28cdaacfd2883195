package agent

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"time"

	"meshd/report"
)

// How a client posts its host report over the bus while its gossip reaches no server.
const (
	// reportTick is how often the poster looks without a pass to wake it: a new report wakes
	// it at once (the host's Passed), so the tick is for gossip that stopped reaching a server
	// with the report unchanged. Once a second, not four times: a client at rest wakes for
	// little else.
	reportTick = time.Second
	// reportResend is how often an unchanged report is posted again (a server that restarted
	// keeps reports only in memory).
	reportResend = 15 * time.Second
	// reportBackoffMin and reportBackoffMax bound the wait after a failed post, doubling each
	// time: a server that is down is not asked four times a second.
	reportBackoffMin = time.Second
	reportBackoffMax = 30 * time.Second
)

// reportPoster is the client's report loop. Its clock and its post are fields so that a test can
// run an outage of minutes in no time.
type reportPoster struct {
	log *slog.Logger
	// report is the host's latest report; alive says whether gossip reaches a server (then it
	// carries the reports and the bus is not needed); post sends one report to a server's bus.
	report func() report.Report
	alive  func() bool
	post   func(context.Context, report.Report) error
	// wake, when set, receives after each pass of the host (host.Passed), so a new report is
	// posted at once rather than on the next tick; it is not heeded while backing off.
	wake <-chan struct{}
	// now and after are the clock; jitter returns a random duration in [0, d).
	now    func() time.Time
	after  func(time.Duration) <-chan time.Time
	jitter func(time.Duration) time.Duration
}

func newReportPoster(log *slog.Logger, report func() report.Report, alive func() bool, post func(context.Context, report.Report) error) *reportPoster {
	return &reportPoster{log: log, report: report, alive: alive, post: post, now: time.Now, after: time.After,
		jitter: func(d time.Duration) time.Duration { return rand.N(d) }}
}

// run posts each new report (and an unchanged one every reportResend) until ctx ends. After a
// failed post it waits with exponential backoff and jitter, half the backoff plus up to as much
// again at random (so clients do not come back in step), and warns once per outage; the first
// post that gets through after one says so.
func (p *reportPoster) run(ctx context.Context) {
	var (
		sent, at time.Time
		backoff  time.Duration // zero while posts get through
		failures int
	)
	wait := reportTick
	for {
		wake := p.wake
		if backoff != 0 {
			wake = nil
		}
		select {
		case <-ctx.Done():
			return
		case <-p.after(wait):
		case <-wake:
		}
		wait = reportTick
		rep := p.report()
		if rep.When.IsZero() || (rep.When.Equal(sent) && p.now().Sub(at) < reportResend) {
			continue
		}
		if p.alive() {
			// Gossip carries the report, signed, to the servers: the bus is the fallback only.
			backoff, failures = 0, 0
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := p.post(rctx, rep)
		cancel()
		at = p.now()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			if backoff == 0 {
				backoff = reportBackoffMin
				p.log.Warn("host report not delivered; retrying with backoff until a server answers", "err", err, "backoff_max", reportBackoffMax)
			} else {
				backoff = min(2*backoff, reportBackoffMax)
			}
			wait = backoff/2 + p.jitter(backoff/2)
			continue
		}
		if backoff != 0 {
			p.log.Info("host report delivered again", "failed_posts", failures)
			backoff, failures = 0, 0
		}
		sent = rep.When
	}
}
