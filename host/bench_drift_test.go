package host

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
	"time"

	"meshd/fsm"
	"meshd/host/hosttest"
	"meshd/host/pass"
	"meshd/report"
)

// BenchmarkDriftDetection is issue 20's figure: a held file rewritten by something else, until
// the host's report says so. Each iteration rewrites it at a random moment of the timer's cycle
// and measures the time to the report; p50-ms and max-ms are over the iterations.
//
//	watch  the loop as the agent runs it: the drift watches, the timer at its 10 s default
//	timer  the watches off, the timer alone (every release before issue 20): up to a whole
//	       interval, half of one on average; each iteration takes seconds, so run it with a
//	       small -benchtime (cmd/meshbench runs 8x)
func BenchmarkDriftDetection(b *testing.B) {
	for _, way := range []string{"watch", "timer"} {
		b.Run(way, func(b *testing.B) {
			bd := hosttest.NewBed(b)
			bd.Place(hosttest.AppConf, hosttest.PredecessorContent)
			h, err := Open(Config{DataDir: bd.Data, Seal: hosttest.Seal, Root: bd.Root, Logger: hosttest.Log(), Interval: DefaultInterval})
			if err != nil {
				b.Fatal(err)
			}
			h.timerOnly = way == "timer"
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			decls := make(chan *fsm.Declaration, 1)
			go func() { defer close(done); _ = h.Run(ctx, decls) }()
			defer func() { cancel(); <-done; h.Close() }()
			decls <- hosttest.Decl(fsm.Adopted, hosttest.File("webapp", hosttest.AppConf, hosttest.MeshContent, false))
			if !waitReport(h, time.Minute, func(rep report.Report) bool { return hosttest.HeldOf(rep, hosttest.AppConf) != nil }) {
				b.Fatal("the found file was never reported held")
			}
			// The timer's phase is random against the rewrite: wait up to an interval (watch:
			// up to 200 ms, past the watches' least gap between passes) before each.
			phase := h.interval
			if way == "watch" {
				phase = 200 * time.Millisecond
			}
			var took []time.Duration
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				time.Sleep(rand.N(phase))
				b.StartTimer()
				content := fmt.Appendf(nil, "rewritten by the predecessor, %d\n", i)
				at := time.Now()
				if err := os.WriteFile(bd.At(hosttest.AppConf), content, 0o644); err != nil {
					b.Fatal(err)
				}
				if !waitReport(h, 2*h.interval, func(rep report.Report) bool {
					hf := hosttest.HeldOf(rep, hosttest.AppConf)
					return hf != nil && hf.CurrentHash == pass.HashOf(content)
				}) {
					b.Fatalf("rewrite %d not in the report within %v", i, 2*h.interval)
				}
				took = append(took, time.Since(at))
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(took[len(took)-1].Microseconds())/1000, "max-ms")
		})
	}
}

// waitReport polls the report every millisecond until ok or within has passed.
func waitReport(h *Host, within time.Duration, ok func(report.Report) bool) bool {
	deadline := time.Now().Add(within)
	for !ok(h.Report()) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}
