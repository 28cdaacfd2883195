package fleetsim

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkFleet is issue 37's figures of a fleet: for each size (MESHD_BENCH_FLEET, default
// 100,1000 simulated nodes shaped like research 012's machine), a fresh bed of three real
// servers; the enrolment's joins/s; over a window at rest (MESHD_BENCH_FLEET_REST, default 30 s)
// the busiest server's CPU (% of a core) and the largest one's memory, and each node's gossip
// bytes a second each way; `meshd status --json` on the leader; a module assigned to every node
// until the leader's board has every node's report with it; then the leader killed: a new leader
// answering, every declaration watch that was on it moved, and a module assigned to every node
// after, in force. One iteration a size: each is minutes at 1000.
func BenchmarkFleet(b *testing.B) {
	sizes := []int{100, 1000}
	if s := os.Getenv("MESHD_BENCH_FLEET"); s != "" {
		sizes = nil
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				b.Fatalf("MESHD_BENCH_FLEET=%s: %q is not a number of nodes", s, f)
			}
			sizes = append(sizes, n)
		}
	}
	rest := 30 * time.Second
	if s := os.Getenv("MESHD_BENCH_FLEET_REST"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			b.Fatalf("MESHD_BENCH_FLEET_REST: %v", err)
		}
		rest = d
	}
	for _, n := range sizes {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for range b.N {
				benchFleet(b, n, rest)
			}
		})
	}
}

// simProfile is where the fleet's process writes its CPU profile, on the simulator's machine.
const simProfile = "/tmp/meshsim-cpu.pprof"

func benchFleet(b *testing.B, n int, rest time.Duration) {
	b.StopTimer()
	// MESHD_BENCH_PROFILE=DIR: each server's CPU profile of the run (no failover: a killed
	// leader writes none) in DIR/fleet-N-SERVER.pprof, the fleet process's in DIR/fleet-N-sim.pprof.
	cpuprof := os.Getenv("MESHD_BENCH_PROFILE")
	var extra, simExtra []string
	if cpuprof != "" {
		extra = []string{"--cpu-profile", dataDir + "/cpu.pprof"}
		simExtra = []string{"--cpu-profile", simProfile}
	}
	// MESHD_BENCH_FLEET_GOSSIP=wan relaxes the simulated nodes' own probes (Options.Profile).
	profile := cmp.Or(os.Getenv("MESHD_BENCH_FLEET_GOSSIP"), "lan")
	// MESHD_BENCH_FLEET_ENROL_ONLY=1 stops after the enrolment (its profile alone).
	enrolOnly := os.Getenv("MESHD_BENCH_FLEET_ENROL_ONLY") != ""
	// MESHD_BENCH_FLEET_BATCHES=K enrols in K steps, each while the ones before run;
	// MESHD_BENCH_FLEET_WHOLE_VIEW=1 has the nodes read the gossip view whole, as before deltas.
	batches, _ := strconv.Atoi(os.Getenv("MESHD_BENCH_FLEET_BATCHES"))
	if os.Getenv("MESHD_BENCH_FLEET_WHOLE_VIEW") != "" {
		simExtra = append(simExtra, "--whole-view")
	}
	bd, fleet := bed(b, n, profile, extra, simExtra...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	b.StartTimer()
	fig, err := Measure(ctx, bd, fleet, n, MeasureOptions{Rest: rest, Log: os.Stderr, NoFailover: cpuprof != "", EnrolOnly: enrolOnly, Batches: batches})
	if err != nil {
		b.Fatal(err)
	}
	if cpuprof != "" {
		if err := bd.Stop(ctx); err != nil {
			b.Fatal(err)
		}
		// The fleet's process writes its profile as it ends.
		if err := fleet.Close(); err != nil {
			b.Errorf("the fleet's process: %v", err)
		}
		if p, err := bd.Lab.Machine(SimMachine).ReadFile(ctx, simProfile); err != nil {
			b.Errorf("the fleet's profile: %v", err)
		} else if err := os.WriteFile(fmt.Sprintf("%s/fleet-%d-sim.pprof", cpuprof, n), p, 0o644); err != nil {
			b.Error(err)
		}
		for _, s := range Servers {
			p, err := bd.Lab.Machine(s).ReadFile(ctx, dataDir+"/cpu.pprof")
			if err == nil {
				err = os.WriteFile(fmt.Sprintf("%s/fleet-%d-%s.pprof", cpuprof, n, s), p, 0o644)
			}
			if err != nil {
				b.Errorf("%s's profile: %v", s, err)
			}
		}
	}
	ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
	b.ReportMetric(fig.Enrol.JoinsPerSecond, "joins/s")
	b.ReportMetric(ms(fig.Enrol.Tokens)/float64(n), "token-ms")
	b.ReportMetric(fig.ServerCPU, "server-cpu-pct")
	b.ReportMetric(float64(fig.ServerRSS)/1e6, "server-rss-MB")
	b.ReportMetric(fig.Traffic.OutPerNodeS, "gossip-out-B/s/node")
	b.ReportMetric(fig.Traffic.InPerNodeS, "gossip-in-B/s/node")
	b.ReportMetric(ms(fig.Status), "status-ms")
	b.ReportMetric(ms(fig.Assign.InForce), "assign-in-force-ms")
	b.ReportMetric(ms(fig.NewLeader), "new-leader-ms")
	b.ReportMetric(ms(fig.WatchBack), "watch-back-ms")
	b.ReportMetric(ms(fig.AssignAfter.InForce), "assign-after-failover-ms")
	b.ReportMetric(float64(fig.Stats.ReportBytes), "report-bytes")
	b.ReportMetric(float64(fig.Stats.MaxReceivedOthers+uint64(fig.Stats.MaxHeldOthers)+fig.Stats.MaxRelayed), "others-reports")
}
