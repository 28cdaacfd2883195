package e2e

// The lab's benchmarks (issue 18), read by cmd/meshbench: figures that need whole machines, so
// they live beside the acceptance tests and share their set-up. They are benchmarks, never
// assertions: each reports its figures with b.ReportMetric and fails only when the machine
// never got where the figure ends.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
	if out, err := meshdJoin(ctx, client, tok, "--name", "newnode", "--data-dir", "/var/lib/meshd"); err != nil {
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
// from the agent's meshd_reconcile_duration_seconds (goal under 50 ms). Last, the machine
// migrated from drafts (migrateFromDrafts): migrate-ms from the draft to all 60 containers taken
// in place, and the operator's meshd commands from genesis (commands).
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

		// Then the machine migrated from drafts (issue 38): webapp assigned (the catalogue's
		// module), every other container drafted, each module added and assigned, all 60 taken.
		if out, err := meshd(ctx, hub, "module", "assign", "hub", "webapp"); err != nil {
			b.Fatalf("assign webapp: %v\n%s", err, out)
		}
		if err := testenv.Poll(b, 30*time.Second, webappHeldUnchanged(ctx, hub)); err != nil {
			b.Fatal(err)
		}
		mig := migrateFromDrafts(ctx, b, hub, lab.MeasuredContainers-1)
		b.ReportMetric(float64((mig.toHeld+mig.takes).Microseconds())/1000, "migrate-ms")
		b.ReportMetric(float64(mig.commands+2), "commands") // and genesis, webapp's assignment
		b.Logf("measured hub migrated from drafts: %d containers in %d modules taken in place; %d operator commands from genesis; "+
			"the draft to every module held %v, the takes %v", len(mig.taken), len(mig.modules)+1, mig.commands+2, mig.toHeld, mig.takes)
		// Last: a benchmark's log is cut after a few lines, and the figures above are the point.
		if log, err := os.ReadFile(filepath.Join(hub.Dir(), "log", "meshd.log")); err == nil {
			b.Logf("the agent's log to its first report:\n%s", head(string(log), 6000))
		}
	}
}

func head(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// BenchmarkDeclarationToMachine is a take's way from the record to the machine: a module whose
// files (and, "container", whose container) were found on the node and are held, then `meshd
// module take NODE MODULE`; the figure (ms) runs from the take returning until `meshd node show
// NODE` on the hub shows the node's report with every file written as the module's and the
// container replaced and running. On the server itself (hub: its own host report, local) and on
// a client (newnode: the take reaches it as a new declaration over the bus, its report comes
// back by gossip). Each iteration takes a fresh module; ms is the median of the iterations.
func BenchmarkDeclarationToMachine(b *testing.B) {
	bin := labtest.Meshd(b)
	l := labtest.Up(b, lab.Bare())
	ctx := testenv.Context(b, 10*time.Minute)
	hub, client := l.Machine("hub"), l.Machine("newnode")
	installMeshd(ctx, b, bin, hub, client)
	agentLogsOnFailure(b, 4000, hub, client)
	if out, err := meshd(ctx, hub, hubGenesis("--adopted")...); err != nil {
		b.Fatalf("adopted genesis: %v\n%s", err, out)
	}
	installAgent(ctx, b, hub, bin)
	reporting(ctx, b, hub, "hub", time.Minute)
	tok := adoptedToken(ctx, b, hub)
	if out, err := meshdJoin(ctx, client, tok, "--name", "newnode", "--data-dir", "/var/lib/meshd"); err != nil {
		b.Fatalf("join: %v\n%s", err, out)
	}
	installAgent(ctx, b, client, bin)
	reporting(ctx, b, hub, "newnode", time.Minute)

	seq := 0
	for _, what := range []string{"files", "container"} {
		for _, on := range []*lab.Machine{hub, client} {
			b.Run(what+"/"+map[bool]string{true: "server", false: "client"}[on == hub], func(b *testing.B) {
				var took []time.Duration
				for range b.N {
					seq++
					took = append(took, takeToConverged(ctx, b, hub, on, fmt.Sprintf("b%s%d", what[:1], seq), what == "container"))
				}
				slices.Sort(took)
				b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "ms")
			})
		}
	}
}

// takeToConverged adds module mod (three files, and a container when withCtr), leaves what it
// declares on node as a predecessor would (other content, another container of that name),
// assigns it (held), takes it and returns how long after the take returned the hub showed the
// node's report with the module converged.
func takeToConverged(ctx context.Context, b *testing.B, hub, node *lab.Machine, mod string, withCtr bool) time.Duration {
	b.Helper()
	manifest := "name: " + mod + "\nfiles:\n"
	var paths []string
	for i := range 3 {
		p := fmt.Sprintf("/etc/%s/%d.conf", mod, i) // the module's own place
		paths = append(paths, p)
		manifest += fmt.Sprintf("  - path: %s\n    content: \"meshd's %d\\n\"\n    mode: \"0644\"\n", p, i)
		if err := node.WriteFile(ctx, p, []byte("the predecessor's\n"), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	if withCtr {
		manifest += "containers:\n  - name: " + mod + "\n    image: lab/echo:1\n    env: {GREETING: meshd}\n"
		if out, err := node.Docker(ctx, "run", "-d", "--name", mod, "-e", "GREETING=predecessor", "lab/echo:1"); err != nil {
			b.Fatalf("the predecessor's container %s: %v %s", mod, err, out)
		}
	}
	if err := hub.WriteFile(ctx, "/root/"+mod+".yaml", []byte(manifest), 0o644); err != nil {
		b.Fatal(err)
	}
	for _, args := range [][]string{{"module", "add", "/root/" + mod + ".yaml"}, {"module", "assign", node.Name, mod}} {
		if out, err := meshd(ctx, hub, args...); err != nil {
			b.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	if err := testenv.Poll(b, time.Minute, func() error { return moduleState(ctx, hub, node.Name, mod, paths, withCtr, false) }); err != nil {
		b.Fatalf("before the take: %v", err)
	}
	if out, err := meshd(ctx, hub, "module", "take", node.Name, mod, "--no-wait"); err != nil {
		b.Fatalf("take %s on %s: %v\n%s", mod, node.Name, err, out)
	}
	taken := time.Now()
	if err := testenv.Poll(b, time.Minute, func() error { return moduleState(ctx, hub, node.Name, mod, paths, withCtr, true) }); err != nil {
		b.Fatalf("after the take: %v", err)
	}
	return time.Since(taken)
}

// moduleState says (nil) whether node's last report, as the hub shows it, has module mod held
// (converged false: every file and the container found and held) or converged (every file
// written as the module's, none held, the container replaced by meshd's and running).
func moduleState(ctx context.Context, hub *lab.Machine, node, mod string, paths []string, withCtr, converged bool) error {
	out, err := meshd(ctx, hub, "node", "show", node, "--json")
	if err != nil {
		return fmt.Errorf("node show %s: %v", node, err)
	}
	var v struct {
		Report *struct {
			Held    []struct{ Path, Module string } `json:"held"`
			Written []struct{ Path, Module string } `json:"written"`
			Kinds   struct {
				Container struct {
					Containers []struct {
						Name, Module, State string
						Running             bool
					} `json:"containers"`
				} `json:"container"`
			} `json:"kinds"`
		} `json:"report"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.Report == nil {
		return fmt.Errorf("node show %s --json: no report (%v)", node, err)
	}
	count := func(list []struct{ Path, Module string }) int {
		n := 0
		for _, f := range list {
			if f.Module == mod && slices.Contains(paths, f.Path) {
				n++
			}
		}
		return n
	}
	held, written := count(v.Report.Held), count(v.Report.Written)
	state := ""
	for _, c := range v.Report.Kinds.Container.Containers {
		if c.Name == mod && c.Module == mod {
			state = c.State
			if converged && !c.Running {
				state += " (not running)"
			}
		}
	}
	switch {
	case !converged && held != len(paths):
		return fmt.Errorf("%s on %s: %d of %d files held", mod, node, held, len(paths))
	case !converged && withCtr && state != "held":
		return fmt.Errorf("%s on %s: container %q, want held", mod, node, state)
	case converged && (written != len(paths) || held != 0):
		return fmt.Errorf("%s on %s: %d of %d files written, %d still held", mod, node, written, len(paths), held)
	case converged && withCtr && state != "replaced" && state != "created" && state != "adopted":
		return fmt.Errorf("%s on %s: container %q, want replaced", mod, node, state)
	}
	return nil
}
