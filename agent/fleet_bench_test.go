package agent

import (
	"fmt"
	"testing"
	"time"

	"meshd/fsm"
)

// BenchmarkHostEventsTick is one look of the leader's host-events loop over N = 100 and 1000
// enrolled nodes, each with a lab-shaped report (fleetReport), side by side:
//   - every-report is the loop as it was before it worked on changes (commit 4cd2969): each
//     node's report looked up through a copy of every report (gossip.Reports()[node]),
//     decoded, and its conditions compared with the record's, every tick;
//   - unchanged is today's look at a fleet where no report changed since the last;
//   - changed-N/10 is today's look after a tenth of the reports changed: a fleet's second at rest
//     (each node publishes its report again every publishInterval, 10 s).
func BenchmarkHostEventsTick(b *testing.B) {
	for _, n := range []int{100, 1000} {
		benchHostEventsTick(b, n)
	}
}

func benchHostEventsTick(b *testing.B, n int) {
	b.Run(fmt.Sprintf("N=%d/every-report", n), func(b *testing.B) {
		fl, rec, feed, _ := fleetOf(b, n)
		b.ResetTimer()
		for range b.N {
			everyReportTick(b, fl, rec, feed)
		}
		b.ReportMetric(float64(len(feed.last[fleetNode(0)].Payload)), "report-bytes")
	})
	b.Run(fmt.Sprintf("N=%d/unchanged", n), func(b *testing.B) {
		fl, rec, _, _ := fleetOf(b, n)
		look := hostEventsLook{self: "hub"}
		look.due(rec, fl, 1)
		b.ResetTimer()
		for range b.N {
			look.due(rec, fl, 1)
		}
	})
	b.Run(fmt.Sprintf("N=%d/changed-%d", n, n/10), func(b *testing.B) {
		fl, rec, feed, _ := fleetOf(b, n)
		look := hostEventsLook{self: "hub"}
		look.due(rec, fl, 1)
		now := time.Now()
		b.ResetTimer()
		for i := range b.N {
			b.StopTimer()
			for j := range n / 10 {
				feed.put(b, fleetReport(fleetNode((i*n/10+j)%n), now.Add(time.Duration(i)*time.Second), false))
			}
			b.StartTimer()
			look.due(rec, fl, 1)
		}
	})
}

// everyReportTick is the host-events tick as it was at commit 4cd2969, kept here as the
// benchmark's yardstick: every node's report looked up through a copy of every report, decoded,
// and its conditions compared with the record's.
func everyReportTick(b *testing.B, fl *fleet, rec *fsm.FSM, feed *feedFake) {
	var names []string
	rec.Read(func(r *fsm.Record, _ uint64) { names = r.NodeNames() })
	due := 0
	for _, name := range names {
		gr, ok := feed.all()[name]
		if !ok {
			continue
		}
		rep, err := decodeReport(gr.Payload)
		if err != nil {
			b.Fatal(err)
		}
		now := hostConditions(rep)
		rec.Read(func(r *fsm.Record, _ uint64) {
			if !fsm.SameConditions(now, r.StandingConditions(name)) {
				due++
			}
		})
	}
	if due != 0 {
		b.Fatalf("%d due on a fleet at rest", due)
	}
}
