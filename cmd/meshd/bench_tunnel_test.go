package main

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"meshd/fsm"
	"meshd/internal/testenv"
	"meshd/report"
)

// BenchmarkTunnelDriftDetection is issue 20's figure for the tunnel: the mesh's interface on an
// adopted server, taken down by hand (down) or removed by hand (removed), until it is up again
// as `ip` reads it. The agent runs as an operator runs it (its own network namespace, the device
// in its own process) with a 10-minute timer, so each figure is the link watch's. Each iteration
// waits a random moment up to 200 ms first (past the watches' least gap between passes);
// p50-ms and max-ms are over the iterations. The timer alone is the host's
// BenchmarkDriftDetection/timer: the same loop, whatever the kind.
func BenchmarkTunnelDriftDetection(b *testing.B) {
	for _, way := range []string{"down", "removed"} {
		b.Run(way, func(b *testing.B) {
			n := newNode(b)
			n.genesis("--adopted")
			n.startAgent("--docker-host", noDocker, "--reconcile-interval", "10m")
			up := func() bool {
				s, errs := tunnelState(n, "hub")
				return s == report.TunnelMeshUp && len(errs) == 0 && linkUpIn(n.netns, fsm.MeshInterface) == ""
			}
			deadline := time.Now().Add(30 * time.Second)
			for !up() {
				if time.Now().After(deadline) {
					b.Fatal("meshd0 never came up on the hub")
				}
				time.Sleep(50 * time.Millisecond)
			}
			act := []string{"link", "set", fsm.MeshInterface, "down"}
			if way == "removed" {
				act = []string{"link", "del", fsm.MeshInterface}
			}
			var took []time.Duration
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				time.Sleep(rand.N(200 * time.Millisecond))
				b.StartTimer()
				at := time.Now()
				testenv.Run(b, append([]string{"ip", "-n", n.netns}, act...)...)
				for linkUpIn(n.netns, fsm.MeshInterface) != "" {
					if time.Since(at) > 20*time.Second {
						b.Fatalf("%s %d: meshd0 not up again within 20s", way, i)
					}
					time.Sleep(2 * time.Millisecond)
				}
				took = append(took, time.Since(at))
				b.StopTimer()
				for !up() { // the pass that raised it has reported, before the next iteration
					if time.Since(at) > 20*time.Second {
						b.Fatalf("%s %d: the hub's report never said mesh-up again", way, i)
					}
					time.Sleep(10 * time.Millisecond)
				}
				b.StartTimer()
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(took[len(took)-1].Microseconds())/1000, "max-ms")
		})
	}
}
