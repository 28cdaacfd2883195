package agent

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"meshd/report"
)

// A two-minute outage of the servers' bus, on a fake clock: the client used to post every 250 ms
// with a warning each time (480 of each). Now it backs off exponentially with jitter up to 30 s,
// warns once, and says once when the report gets through again; then it is back to its tick.
func TestReportPostBacksOffAndWarnsOncePerOutage(t *testing.T) {
	var logs syncBuffer
	now := time.Unix(1_700_000_000, 0)
	outageEnd := now.Add(2 * time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var waits []time.Duration
	posts, delivered := 0, 0
	p := newReportPoster(slog.New(slog.NewTextHandler(&logs, nil)),
		func() report.Report { return report.Report{When: outageEnd.Add(-time.Hour)} },
		func() bool { return false },
		func(context.Context, report.Report) error {
			posts++
			if now.Before(outageEnd) {
				return errors.New("server 192.0.2.1:7070: connection refused")
			}
			delivered++
			if delivered == 2 { // the resend after reportResend: enough seen
				cancel()
			}
			return nil
		})
	p.now = func() time.Time { return now }
	p.after = func(d time.Duration) <-chan time.Time {
		waits = append(waits, d)
		now = now.Add(d)
		ch := make(chan time.Time, 1)
		ch <- now
		return ch
	}
	p.run(ctx)

	warns := strings.Count(logs.String(), "host report not delivered")
	again := strings.Count(logs.String(), "host report delivered again")
	t.Logf("%d posts over a 2-minute outage; waits %v", posts, waits[:min(len(waits), 14)])
	if warns != 1 || again != 1 {
		t.Fatalf("warned %d times and said delivered again %d times, want once each:\n%s", warns, again, logs.String())
	}
	if posts > 15 {
		t.Fatalf("%d posts during a 2-minute outage: no backoff", posts)
	}
	// The waits after each failure: within [b/2, b) of a backoff doubling from 1 s to 30 s.
	b := reportBackoffMin
	failed := 0
	for i := 1; i < len(waits) && failed < posts-delivered; i++ {
		if waits[i] == reportTick {
			continue
		}
		if waits[i] < b/2 || waits[i] >= b {
			t.Fatalf("wait %d after failure %d is %s, want in [%s, %s)", i, failed+1, waits[i], b/2, b)
		}
		failed++
		b = min(2*b, reportBackoffMax)
	}
	if b != reportBackoffMax {
		t.Fatalf("the backoff never reached its cap of %s", reportBackoffMax)
	}
	if last := waits[len(waits)-1]; last != reportTick {
		t.Fatalf("after delivery the client waits %s, want its tick %s again", last, reportTick)
	}
}
