package e2e

// The lab's benchmarks (issue 18), read by cmd/meshbench: figures that need whole machines, so
// they live beside the acceptance tests and share their set-up. They are benchmarks, never
// assertions: each reports its figures with b.ReportMetric and fails only when the machine
// never got where the figure ends.

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"meshd/internal/labtest"
	"meshd/internal/testenv"
	"meshd/lab"
)

// benchWindow is how long an idle figure watches: MESHD_BENCH_WINDOW (a Go duration; the smoke
// run shortens it), else def.
func benchWindow(def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv("MESHD_BENCH_WINDOW")); err == nil && d > 0 {
		return d
	}
	return def
}

// scrape reads the agent's Prometheus metrics on m from its operator socket, each series by
// its full name with labels as printed.
func scrape(ctx context.Context, m *lab.Machine) (map[string]float64, error) {
	out, err := m.Exec(ctx, "curl", "-sf", "--unix-socket", "/run/meshd/meshd.sock", "http://meshd/metrics")
	if err != nil {
		return nil, fmt.Errorf("%s: metrics on /run/meshd/meshd.sock: %w: %s", m.Name, err, out)
	}
	series := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			series[line[:i]] = v
		}
	}
	return series, nil
}

// reporting waits until the record's status shows node with a host report.
func reporting(ctx context.Context, b testing.TB, on *lab.Machine, node string, within time.Duration) {
	b.Helper()
	if err := testenv.Poll(b, within, func() error {
		st, err := statusOf(ctx, on)
		if err != nil {
			return err
		}
		if st[node].ReportFrom == "" {
			return fmt.Errorf("no host report from %s yet", node)
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkAgentFootprint is the agent's cost at rest: a server (the hub, after an adopted
// genesis) and a client (newnode, joined with an adopted token) on the bare lab, each agent
// running as a machine runs it (the default 10 s safety-net pass, not the lab's 1 s), watched
// for a window of 60 s
// (MESHD_BENCH_WINDOW) once both report. CPU is the process's user+system time over the window
// as a percentage of one core, RSS its resident memory at the window's end, both from the
// agent's own process metrics. Goal: a client under 0.5 % of a core and 40 MB.
func BenchmarkAgentFootprint(b *testing.B) {
	bin := labtest.Meshd(b)
	l := labtest.Up(b, lab.Bare())
	ctx := testenv.Context(b, 5*time.Minute+benchWindow(time.Minute))
	hub, client := l.Machine("hub"), l.Machine("newnode")
	installMeshd(ctx, b, bin, hub, client)
	agentLogsOnFailure(b, 4000, hub, client)
	if out, err := meshd(ctx, hub, hubGenesis("--adopted")...); err != nil {
		b.Fatalf("adopted genesis: %v\n%s", err, out)
	}
	atRest := []string{"agent", "--data-dir", "/var/lib/meshd", "--docker-host", labDocker}
	// MESHD_BENCH_PROFILE=DIR: each agent writes a CPU profile of its run, copied to
	// DIR/server.prof and DIR/client.prof at the end (how docs/performance.md profiled them).
	profDir := os.Getenv("MESHD_BENCH_PROFILE")
	if profDir != "" {
		atRest = append(atRest, "--cpu-profile", "/var/lib/meshd/cpu.prof")
	}
	if err := hub.InstallAgent(ctx, bin, atRest...); err != nil {
		b.Fatal(err)
	}
	if err := testenv.Poll(b, 30*time.Second, func() error { _, err := statusOf(ctx, hub); return err }); err != nil {
		b.Fatalf("the hub's agent never answered: %v", err)
	}
	tok := adoptedToken(ctx, b, hub)
	if out, err := meshd(ctx, client, "join", tok, "--name", "newnode", "--data-dir", "/var/lib/meshd"); err != nil {
		b.Fatalf("join: %v\n%s", err, out)
	}
	if err := client.InstallAgent(ctx, bin, atRest...); err != nil {
		b.Fatal(err)
	}
	reporting(ctx, b, hub, "hub", time.Minute)
	reporting(ctx, b, hub, "newnode", time.Minute)
	time.Sleep(5 * time.Second) // past the join's own burst: the figure is the agents at rest

	window := benchWindow(time.Minute)
	for range b.N {
		before := map[string]map[string]float64{}
		for _, m := range []*lab.Machine{hub, client} {
			s, err := scrape(ctx, m)
			if err != nil {
				b.Fatal(err)
			}
			before[m.Name] = s
		}
		time.Sleep(window)
		for _, who := range []struct {
			m    *lab.Machine
			role string
		}{{hub, "server"}, {client, "client"}} {
			after, err := scrape(ctx, who.m)
			if err != nil {
				b.Fatal(err)
			}
			cpu := (after["process_cpu_seconds_total"] - before[who.m.Name]["process_cpu_seconds_total"]) / window.Seconds() * 100
			rss := after["process_resident_memory_bytes"] / (1 << 20)
			b.ReportMetric(cpu, who.role+"-cpu-pct")
			b.ReportMetric(rss, who.role+"-rss-MB")
			b.Logf("%s agent (%s) over %v: %.2f %% of a core, %.1f MB resident", who.role, who.m.Name, window, cpu, rss)
		}
	}
	if profDir != "" {
		copyProfile(b, hub, filepath.Join(profDir, "server.prof"))
		copyProfile(b, client, filepath.Join(profDir, "client.prof"))
	}
}

// copyProfile stops m's agent (its --cpu-profile is complete only then) and copies the profile
// to path.
func copyProfile(b testing.TB, m *lab.Machine, path string) {
	ctx := testenv.Context(b, time.Minute)
	if err := m.StopService(ctx, "meshd"); err != nil {
		b.Fatal(err)
	}
	prof, err := m.ReadFile(ctx, "/var/lib/meshd/cpu.prof")
	if err == nil {
		err = os.WriteFile(path, prof, 0o644)
	}
	if err != nil {
		b.Fatal(err)
	}
}

// BenchmarkMeasuredNode is the measured control-node (research 012) adopted: the lab's
// measured hub (60 containers, 54 incoming and 52 forwarding allow rules in a found nftables
// ruleset, 12 synced files), the predecessor's control stopped, then `meshd genesis --adopted`
// and the agent started, until the record shows the hub's first host report (to-report-ms;
// goal under 3 s). Then a window of the agent's passes with nothing to do (a pass every
// second): noop-pass-ms is their mean, each pass the sum of its resource kinds' parts, read
// from the agent's meshd_reconcile_duration_seconds (goal under 50 ms).
func BenchmarkMeasuredNode(b *testing.B) {
	bin := labtest.Meshd(b)
	sc, err := lab.Measured(lab.MeasuredContainers, lab.MeasuredFull)
	if err != nil {
		b.Fatal(err)
	}
	l := labtest.Up(b, sc)
	ctx := testenv.Context(b, 6*time.Minute)
	hub := l.Machine("hub")
	agentLogsOnFailure(b, 4000, hub)
	installMeshd(ctx, b, bin, hub)
	for _, u := range lab.MeasuredControl {
		if err := hub.StopService(ctx, u); err != nil {
			b.Fatal(err)
		}
	}
	for range b.N {
		began := time.Now()
		if out, err := meshd(ctx, hub, hubGenesis("--adopted", "--port", "registry=5001", "--port", "broker.management=15673")...); err != nil {
			b.Fatalf("adopted genesis on the measured machine: %v\n%s", err, out)
		}
		genesis := time.Since(began)
		args := agentArgs()
		if profDir := os.Getenv("MESHD_BENCH_PROFILE"); profDir != "" {
			args = append(args, "--cpu-profile", "/var/lib/meshd/cpu.prof")
			b.Cleanup(func() { copyProfile(b, hub, filepath.Join(profDir, "measured.prof")) })
		}
		if err := hub.InstallAgent(ctx, bin, args...); err != nil {
			b.Fatal(err)
		}
		reporting(ctx, b, hub, "hub", time.Minute)
		toReport := time.Since(began)
		b.ReportMetric(float64(toReport.Microseconds())/1000, "to-report-ms")
		b.ReportMetric(float64(genesis.Microseconds())/1000, "genesis-ms")
		b.Logf("measured hub: genesis --adopted took %v; its first host report was in the record %v after genesis began", genesis, toReport)
		if log, err := os.ReadFile(filepath.Join(hub.Dir(), "log", "meshd.log")); err == nil {
			b.Logf("the agent's log to its first report:\n%s", head(string(log), 6000))
		}

		// The foundation's containers come up after the first report; the no-op window starts
		// once the passes find nothing to do (no pass has failed a resource since, either).
		time.Sleep(15 * time.Second)
		before, err := scrape(ctx, hub)
		if err != nil {
			b.Fatal(err)
		}
		time.Sleep(benchWindow(20 * time.Second))
		after, err := scrape(ctx, hub)
		if err != nil {
			b.Fatal(err)
		}
		var took, passes, failed float64
		kinds := map[string]float64{}
		for k, v := range after {
			switch {
			case strings.HasPrefix(k, "meshd_reconcile_duration_seconds_sum"):
				took += v - before[k]
				kinds[strings.TrimPrefix(k, "meshd_reconcile_duration_seconds_sum")] = v - before[k]
			case strings.HasPrefix(k, "meshd_reconcile_duration_seconds_count"):
				passes = max(passes, v-before[k]) // every kind is observed once a pass
			case strings.HasPrefix(k, "meshd_reconcile_errors_total"):
				failed += v - before[k]
			}
		}
		if passes == 0 {
			b.Fatal("the measured hub's agent made no pass in the window")
		}
		b.ReportMetric(took/passes*1000, "noop-pass-ms")
		for k, v := range kinds {
			b.Logf("measured hub: %s %.1f ms a pass", k, v/passes*1000)
		}
		b.Logf("measured hub: %.0f passes in the window, %.1f ms each on average, %.0f resource failures", passes, took/passes*1000, failed)
	}
}

func head(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
