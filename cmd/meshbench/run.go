package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Options says what to run.
type Options struct {
	Count int
	Sizes string
	Long  bool
	Log   io.Writer // the benchmarks' own output goes here as it runs (nil: nowhere)
	// Suites overrides the packages and benchmarks run (tests use a small one).
	Suites []Suite
	// Only, when set, runs the suites whose benchmark regexp (Suite.Bench) matches it, each
	// narrowed to the benchmarks Only names: "AgentFootprint" runs BenchmarkAgentFootprint
	// alone, not the others of its suite.
	Only string
}

// Suite is one `go test -bench` invocation.
type Suite struct {
	Package string
	Bench   string // -bench regexp
	// Benchtime and Runs, when set, replace -benchtime and the run count for this suite: the
	// drift figure's timer-only side takes seconds an iteration.
	Benchtime string
	Runs      int
	// Env is added to the benchmarks' environment (the smoke run shortens a window with it).
	Env []string
}

// DefaultSuites are the benchmarks docs/performance.md explains.
var DefaultSuites = []Suite{
	{Package: "./netfilter/firewall/", Bench: "^BenchmarkOpenings$"},
	{Package: "./host/", Bench: "^BenchmarkNoOpPass$"},
	{Package: "./fsm/", Bench: "^BenchmarkCompose$"},
	{Package: "./gossip/", Bench: "^(BenchmarkVerifyReport|BenchmarkReportSpread)$"},
	{Package: "./host/", Bench: "^BenchmarkDriftDetection$", Benchtime: "8x", Runs: 1},
	{Package: "./cmd/meshd/", Bench: "^BenchmarkTunnelDriftDetection$", Benchtime: "8x", Runs: 1},
	{Package: "./agent/", Bench: "^BenchmarkOperatorCommit$", Benchtime: "200x"},
	// A fleet of 30 members at rest for 10 s, then one killed: 20 s a run.
	{Package: "./gossip/", Bench: "^BenchmarkFleetAtRest$", Benchtime: "1x", Runs: 3},
	// Its yardstick takes seconds a look at 1000 nodes.
	{Package: "./agent/", Bench: "^BenchmarkHostEventsTick$", Benchtime: "3x", Runs: 3},
	// The board's look, the page's nodes and a node's gossip view, each beside the way before.
	{Package: "./agent/", Bench: "^(BenchmarkBoardLook|BenchmarkPageNodes|BenchmarkGossipViewAnswer)$", Benchtime: "10x", Runs: 3},
	// One command and the watches' composes on 100 and 1000 nodes; the yardstick (before issue
	// 37) takes about 10 s a command at 1000.
	{Package: "./fsm/", Bench: "^BenchmarkComposeFleet$", Benchtime: "2x", Runs: 3},
	// The lab's figures: whole machines, a minute or more each, so one run; each is itself an
	// average over its window.
	{Package: "./e2e/", Bench: "^(BenchmarkAgentFootprint|BenchmarkMeasuredNode)$", Benchtime: "1x", Runs: 1},
	{Package: "./e2e/", Bench: "^BenchmarkDeclarationToMachine$", Benchtime: "3x", Runs: 1},
	// A tunnel changes hands once a lab, a container is taken once: one lab, one run each.
	{Package: "./e2e/", Bench: "^(BenchmarkTunnelTakeover|BenchmarkTunnelTakeoverRealHub|BenchmarkTakeOutage)$", Benchtime: "1x", Runs: 1},
	// A fleet of 100 then 1000 simulated nodes against three real servers (fleetsim): a bed a
	// size, minutes at 1000, so one run.
	{Package: "./fleetsim/", Bench: "^BenchmarkFleet$", Benchtime: "1x", Runs: 1},
	// The package upgraded on a systemd hub (lab/systemd): two machines, one upgrade a run.
	{Package: "./lab/systemd/", Bench: "^BenchmarkSystemdHubUpgrade$", Benchtime: "1x", Runs: 1},
}

// Bench is one benchmark's runs.
type Bench struct {
	Runs     []float64 `json:"runs_ns"` // ns/op of each run
	MedianNs float64   `json:"median_ns"`
	Allocs   float64   `json:"allocs_per_op,omitempty"`
	Bytes    float64   `json:"bytes_per_op,omitempty"`
	// Metrics are the benchmark's own figures (b.ReportMetric), unit -> each run's value;
	// Medians their medians.
	Metrics map[string][]float64 `json:"metrics,omitempty"`
	Medians map[string]float64   `json:"metric_medians,omitempty"`
}

// Figure is one line of the table: a meshd figure, what an operator's way took in the same
// run, their ratio, and the goal the issue set for it.
type Figure struct {
	Key     string  `json:"key"`
	What    string  `json:"what"`
	MeshdMs float64 `json:"meshd_ms,omitempty"`
	// Value and Unit are a figure that is not a time (a share of a core, megabytes).
	Value  float64 `json:"value,omitempty"`
	Unit   string  `json:"unit,omitempty"`
	VsMs   float64 `json:"versus_ms,omitempty"`
	Versus string  `json:"versus,omitempty"`
	Ratio  float64 `json:"ratio,omitempty"` // versus / meshd: how many times faster meshd is
	Goal   string  `json:"goal,omitempty"`
	Met    *bool   `json:"met,omitempty"`
	// When is set on a figure merged into an earlier run's results (Merge): the run it is from.
	When time.Time `json:"when,omitzero"`
}

// Results is what a run found, as written to bench/results.json.
type Results struct {
	When    time.Time        `json:"when"`
	Machine string           `json:"machine"`
	Count   int              `json:"count"`
	Sizes   string           `json:"sizes"`
	Figures []Figure         `json:"figures"`
	Benches map[string]Bench `json:"benchmarks"`
	// Updates are the later runs merged in (Merge), each with the figures it replaced.
	Updates []Update `json:"updates,omitempty"`
}

// Update is a later run of some of the benchmarks merged into the results.
type Update struct {
	When    time.Time `json:"when"`
	Machine string    `json:"machine"`
	Count   int       `json:"count"`
	Only    string    `json:"only"`
	Figures []string  `json:"figures"`
}

// Merge puts a run of some benchmarks (Options.Only) into earlier results: each figure it
// measured replaces the earlier one (marked with its run's time), the others stay as they were.
func (r *Results) Merge(later *Results, only string) {
	up := Update{When: later.When, Machine: later.Machine, Count: later.Count, Only: only}
	for _, f := range later.Figures {
		f.When = later.When
		up.Figures = append(up.Figures, f.Key)
		i := slices.IndexFunc(r.Figures, func(g Figure) bool { return g.Key == f.Key })
		if i >= 0 {
			r.Figures[i] = f
		} else {
			r.Figures = append(r.Figures, f)
		}
	}
	if r.Benches == nil {
		r.Benches = map[string]Bench{}
	}
	for k, b := range later.Benches {
		r.Benches[k] = b
	}
	r.Updates = append(r.Updates, up)
}

// selectSuites are the suites Only picks, each narrowed to the benchmarks it names.
func selectSuites(suites []Suite, only string) ([]Suite, error) {
	if only == "" {
		return suites, nil
	}
	re, err := regexp.Compile(only)
	if err != nil {
		return nil, fmt.Errorf("--only: %w", err)
	}
	var out []Suite
	for _, s := range suites {
		if re.MatchString(s.Bench) {
			s.Bench = "^Benchmark(" + only + ")$"
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--only %q matches no benchmark suite", only)
	}
	return out, nil
}

// benchLine is one result line of `go test -bench`: name-GOMAXPROCS, iterations, then
// "value unit" pairs (ns/op, B/op, allocs/op and the benchmark's own metrics).
var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+((?:\s+[\d.e+-]+ \S+)+)\s*$`)

// Run runs every suite Count times (one iteration each for the side-by-side figures, which
// are seconds long; Go picks the iterations of the micro-benchmarks) and gathers the figures.
func Run(o Options) (*Results, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	suites := o.Suites
	if suites == nil {
		suites = DefaultSuites
	}
	suites, err = selectSuites(suites, o.Only)
	if err != nil {
		return nil, err
	}
	res := &Results{When: time.Now().UTC(), Machine: machine(), Count: o.Count, Sizes: o.Sizes, Benches: map[string]Bench{}}
	for _, s := range suites {
		count := o.Count
		if s.Runs > 0 {
			count = s.Runs
		}
		args := []string{"test", "-run", "^$", "-bench", s.Bench, "-benchmem", "-count", strconv.Itoa(count), s.Package}
		switch {
		case s.Benchtime != "":
			args = append(args[:len(args)-1], "-benchtime", s.Benchtime, s.Package)
		case strings.Contains(s.Package, "netfilter"):
			args = append(args[:len(args)-1], "-benchtime", "1x", s.Package)
		}
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "MESHD_BENCH_N="+o.Sizes)
		if o.Long {
			cmd.Env = append(cmd.Env, "MESHD_BENCH_LONG=1")
		}
		cmd.Env = append(cmd.Env, s.Env...)
		var out bytes.Buffer
		cmd.Stdout = &out
		if o.Log != nil {
			cmd.Stdout = io.MultiWriter(&out, o.Log)
			cmd.Stderr = o.Log
		}
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("go %s: %w (its output says why)", strings.Join(args, " "), err)
		}
		parse(out.Bytes(), res.Benches)
	}
	for name, b := range res.Benches {
		b.MedianNs = median(b.Runs)
		for unit, v := range b.Metrics {
			if b.Medians == nil {
				b.Medians = map[string]float64{}
			}
			b.Medians[unit] = median(v)
		}
		res.Benches[name] = b
	}
	res.Figures = figures(res.Benches, sizes(o.Sizes))
	return res, nil
}

func parse(out []byte, into map[string]Bench) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		b := into[m[1]]
		f := strings.Fields(m[2])
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			switch unit := f[i+1]; unit {
			case "ns/op":
				b.Runs = append(b.Runs, v)
			case "B/op":
				b.Bytes = v
			case "allocs/op":
				b.Allocs = v
			default:
				if b.Metrics == nil {
					b.Metrics = map[string][]float64{}
				}
				b.Metrics[unit] = append(b.Metrics[unit], v)
			}
		}
		into[m[1]] = b
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func sizes(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// figures turns the benchmarks into the table's lines, with the goals issue 18 set; one line per
// figure in the table's order, so it stays one list.
func figures(b map[string]Bench, ns []string) []Figure {
	ms := func(name string) (float64, bool) {
		x, ok := b[name]
		return x.MedianNs / 1e6, ok && len(x.Runs) > 0
	}
	var fs []Figure
	for _, kind := range []string{"nftables", "iptables", "ufw"} {
		by := map[string]string{"nftables": "`nft add rule` per rule", "iptables": "`iptables -A` per rule", "ufw": "`ufw allow` per port"}[kind]
		for _, n := range ns {
			pre := "BenchmarkOpenings/" + kind + "/"
			m, ok := ms(pre + "meshd/" + n)
			if !ok {
				continue
			}
			f := Figure{Key: "openings." + kind + "." + n, What: n + " openings through a found " + kind, MeshdMs: m}
			if v, ok := ms(pre + "by-hand/" + n); ok {
				f.VsMs, f.Versus, f.Ratio = v, by, v/m
			}
			switch {
			case kind == "nftables" && n == "1000":
				f.Goal = "≤ 100 ms"
				f.Met = boolp(m <= 100)
			case kind == "ufw" && f.Ratio > 0:
				f.Goal = "≥ 10× faster"
				f.Met = boolp(f.Ratio >= 10)
			}
			fs = append(fs, f)
			if kind == "nftables" {
				if v, ok := ms(pre + "nft-f/" + n); ok {
					fs = append(fs, Figure{Key: "openings.nftables." + n + ".vs_nft_f", What: n + " openings vs the same rules in one `nft -f`", MeshdMs: m, VsMs: v, Versus: "one `nft -f`", Ratio: v / m})
				}
			}
			if v, ok := ms(pre + "recheck/" + n); ok {
				fs = append(fs, Figure{Key: "recheck." + kind + "." + n, What: "a pass with " + n + " openings in place, nothing to do (" + kind + ")", MeshdMs: v})
			}
			if v, ok := ms(pre + "restore/" + n); ok {
				fs = append(fs, Figure{Key: "restore." + kind + "." + n, What: "found " + kind + " reloaded to " + n + " openings back in force", MeshdMs: v, Goal: "< 500 ms", Met: boolp(v < 500)})
			}
		}
	}
	for _, n := range []string{"10", "50", "100", "200"} {
		x, ok := b["BenchmarkReportSpread/"+n]
		if !ok || x.Medians["ms-to-all"] == 0 {
			continue
		}
		m, model := x.Medians["ms-to-all"], x.Medians["model-ms"]
		fs = append(fs, Figure{Key: "gossip.spread." + n, What: "a changed host report reaching all " + n + " members", MeshdMs: m,
			VsMs: model, Versus: "memberlist's epidemic model", Ratio: model / m})
	}
	fs = append(fs, changeFigures(ms)...)
	if w, ok := b["BenchmarkDriftDetection/watch"]; ok && w.Medians["p50-ms"] > 0 {
		f := Figure{Key: "drift.file.p50", What: "a held file rewritten until the report says so, p50", MeshdMs: w.Medians["p50-ms"], Goal: "≤ 1 s"}
		f.Met = boolp(f.MeshdMs <= 1000)
		worst := Figure{Key: "drift.file.max", What: "a held file rewritten until the report says so, max", MeshdMs: w.Medians["max-ms"], Goal: "≤ 1 s"}
		worst.Met = boolp(worst.MeshdMs <= 1000)
		if t, ok := b["BenchmarkDriftDetection/timer"]; ok && t.Medians["p50-ms"] > 0 {
			f.VsMs, f.Versus, f.Ratio = t.Medians["p50-ms"], "the 10 s timer alone", t.Medians["p50-ms"]/f.MeshdMs
			worst.VsMs, worst.Versus, worst.Ratio = t.Medians["max-ms"], "the 10 s timer alone", t.Medians["max-ms"]/worst.MeshdMs
		}
		fs = append(fs, f, worst)
	}
	// The tunnel's figures stand beside the same timer alone: a pass on the timer is the same
	// loop whatever the kind drifted, so the file benchmark's timer side is the tunnel's too.
	timer, hasTimer := b["BenchmarkDriftDetection/timer"]
	for _, way := range []string{"down", "removed"} {
		x, ok := b["BenchmarkTunnelDriftDetection/"+way]
		if !ok || x.Medians["p50-ms"] == 0 {
			continue
		}
		for _, q := range []string{"p50", "max"} {
			f := Figure{Key: "drift.tunnel." + way + "." + q, What: "meshd0 " + map[string]string{"down": "taken down", "removed": "removed"}[way] +
				" by hand until it is up again, " + q, MeshdMs: x.Medians[q+"-ms"], Goal: "≤ 1 s"}
			f.Met = boolp(f.MeshdMs <= 1000)
			if hasTimer && timer.Medians[q+"-ms"] > 0 {
				f.VsMs, f.Versus, f.Ratio = timer.Medians[q+"-ms"], "the 10 s timer alone", timer.Medians[q+"-ms"]/f.MeshdMs
			}
			fs = append(fs, f)
		}
	}
	for _, n := range []string{"1", "3"} {
		x, ok := b["BenchmarkOperatorCommit/meshd/"+n]
		if !ok || x.Medians["p50-ms"] == 0 {
			continue
		}
		e := b["BenchmarkOperatorCommit/etcd/"+n]
		servers := map[string]string{"1": "one server", "3": "three servers"}[n]
		for _, q := range []string{"p50", "p99"} {
			f := Figure{Key: "raft.commit." + n + "." + q, What: "an operator command committed, " + servers + ", " + q, MeshdMs: x.Medians[q+"-ms"]}
			if v := e.Medians[q+"-ms"]; v > 0 {
				f.VsMs, f.Versus, f.Ratio = v, "etcd put, "+n+" member(s)", v/f.MeshdMs
			}
			fs = append(fs, f)
		}
	}
	if x, ok := b["BenchmarkFleetAtRest/30"]; ok && x.Medians["client-Bps"] > 0 {
		fs = append(fs,
			Figure{Key: "gossip.at_rest.30.client", What: "gossip a client sends, 30 members (3 servers), a 5 KB report a second each", Value: x.Medians["client-Bps"] / 1000, Unit: "kB/s"},
			Figure{Key: "gossip.at_rest.30.server", What: "gossip a server sends, the same fleet", Value: x.Medians["server-Bps"] / 1000, Unit: "kB/s"},
			Figure{Key: "gossip.at_rest.30.cpu", What: "the same fleet's CPU, a member", Value: x.Medians["cpu-pct-member"], Unit: "% of a core"},
			Figure{Key: "gossip.at_rest.30.failed", What: "a killed client until every member marks it failed", MeshdMs: x.Medians["failed-ms"]})
	}
	if x, ok := b["BenchmarkAgentFootprint"]; ok && x.Medians["client-rss-MB"] > 0 {
		for _, role := range []string{"client", "server"} {
			cpu := Figure{Key: "footprint." + role + ".cpu", What: "a " + role + " agent at rest: CPU over the window", Value: x.Medians[role+"-cpu-pct"], Unit: "% of a core"}
			rss := Figure{Key: "footprint." + role + ".rss", What: "a " + role + " agent at rest: resident memory", Value: x.Medians[role+"-rss-MB"], Unit: "MB"}
			if role == "client" {
				cpu.Goal, cpu.Met = "< 0.5 %", boolp(cpu.Value < 0.5)
				rss.Goal, rss.Met = "< 40 MB", boolp(rss.Value < 40)
			}
			fs = append(fs, cpu, rss)
		}
	}
	for _, what := range []string{"files", "container"} {
		for _, on := range []string{"server", "client"} {
			x, ok := b["BenchmarkDeclarationToMachine/"+what+"/"+on]
			if !ok || x.Medians["ms"] == 0 {
				continue
			}
			how := map[string]string{"server": "on the server itself", "client": "on a client, over the bus"}[on]
			fs = append(fs, Figure{Key: "declaration.take." + what + "." + on, What: "module take to the node reporting it converged (" + what + "), " + how, MeshdMs: x.Medians["ms"]})
		}
	}
	if x, ok := b["BenchmarkMeasuredNode"]; ok && x.Medians["to-report-ms"] > 0 {
		r := Figure{Key: "measured.genesis_to_report", What: "measured control-node: genesis --adopted to its first host report", MeshdMs: x.Medians["to-report-ms"], Goal: "< 3 s"}
		r.Met = boolp(r.MeshdMs < 3000)
		p := Figure{Key: "measured.noop_pass", What: "measured control-node: a pass with nothing to do", MeshdMs: x.Medians["noop-pass-ms"], Goal: "< 50 ms"}
		p.Met = boolp(p.MeshdMs < 50)
		fs = append(fs, r, p)
		if x.Medians["migrate-ms"] > 0 {
			fs = append(fs, Figure{Key: "measured.drafts_to_taken", What: fmt.Sprintf("measured control-node: module draft to all 60 containers taken in place (%.0f operator commands from genesis)", x.Medians["commands"]),
				MeshdMs: x.Medians["migrate-ms"]})
		}
	}
	// A gap of 0 is a figure (no probe call failed), so these are read whenever measured.
	if x, ok := b["BenchmarkTunnelTakeover"]; ok && len(x.Metrics["gap-ms"]) > 0 {
		f := Figure{Key: "tunnel.takeover.gap", What: fmt.Sprintf("the longest gap a peer sees while the hub's tunnel changes hands (a call every %.0f ms)", x.Medians["every-ms"]),
			MeshdMs: x.Medians["gap-ms"], Goal: "< 500 ms"}
		f.Met = boolp(f.MeshdMs < 500)
		fs = append(fs, f)
	}
	// Issue 27's real hub: the hub's takeover and a spoke's own, separate figures.
	if x, ok := b["BenchmarkTunnelTakeoverRealHub"]; ok && len(x.Metrics["hub-gap-ms"]) > 0 {
		for _, w := range []struct{ key, unit, what string }{
			{"hub", "hub-gap-ms", "the hub's tunnel changes hands"},
			{"spoke", "spoke-gap-ms", "a spoke's own tunnel changes hands (the worse of peer1, no ListenPort, and peer2, full tunnel)"},
		} {
			f := Figure{Key: "tunnel.takeover.gap.realhub." + w.key,
				What:    fmt.Sprintf("on the real hub (preshared keys, dual stack, a site, rules by interface), the longest gap a probe sees while %s (a call every %.0f ms)", w.what, x.Medians["every-ms"]),
				MeshdMs: x.Medians[w.unit], Goal: "< 500 ms"}
			f.Met = boolp(f.MeshdMs < 500)
			fs = append(fs, f)
		}
	}
	if x, ok := b["BenchmarkSystemdHubUpgrade"]; ok && len(x.Metrics["gap-ms"]) > 0 {
		f := Figure{Key: "upgrade.gap", What: fmt.Sprintf("the longest gap a peer sees through the hub's tunnel while its package is upgraded (a call every %.0f ms)", x.Medians["every-ms"]),
			MeshdMs: x.Medians["gap-ms"], Goal: "≤ 500 ms"}
		f.Met = boolp(f.MeshdMs <= 500)
		fs = append(fs, f)
	}
	if x, ok := b["BenchmarkTakeOutage"]; ok && len(x.Metrics["outage-ms"]) > 0 {
		what := fmt.Sprintf("the longest gap a probe sees through a container's take (a call every %.0f ms)", x.Medians["every-ms"])
		if sw := x.Medians["swap-ms"]; sw > 0 {
			what += fmt.Sprintf("; the agent's swap %.0f ms", sw)
		}
		fs = append(fs, Figure{Key: "take.outage", What: what, MeshdMs: x.Medians["outage-ms"]})
	}
	fs = append(fs, fleetFigures(b)...)
	if v, ok := ms("BenchmarkNoOpPass"); ok {
		fs = append(fs, Figure{Key: "reconcile.noop.40files", What: fmt.Sprintf("a host pass with nothing to do, 40 files (%.0f allocs)", b["BenchmarkNoOpPass"].Allocs), MeshdMs: v})
	}
	for _, n := range []int{100, 1000} {
		for _, c := range []struct{ key, bench, what string }{
			{"assign_all", "assign-all", "a module assigned to all %d nodes (module.assign.many)"},
			{"assign_one", "assign-one", "a module assigned to one of %d nodes"},
		} {
			pre := fmt.Sprintf("BenchmarkComposeFleet/N=%d/%s/", n, c.bench)
			after, ok := ms(pre + "after")
			before, ok2 := ms(pre + "before")
			if !ok || !ok2 {
				continue
			}
			fs = append(fs, Figure{Key: fmt.Sprintf("fsm.command.%d.%s", n, c.key), What: fmt.Sprintf(c.what, n) + " and the declaration watches' composes",
				MeshdMs: after, VsMs: before, Versus: "before issue 37: nothing kept, every watch composing", Ratio: before / after})
		}
	}
	if v, ok := ms("BenchmarkCompose"); ok {
		fs = append(fs, Figure{Key: "fsm.compose", What: "compose one node's declaration from the record", MeshdMs: v})
	}
	if v, ok := ms("BenchmarkVerifyReport"); ok {
		fs = append(fs, Figure{Key: "gossip.verify_report", What: "verify one signed host report", MeshdMs: v})
	}
	return fs
}

func boolp(b bool) *bool { return &b }

// Table prints the figures, one line each.
func (r *Results) Table(w io.Writer) {
	fmt.Fprintf(w, "meshd benchmarks — %s, %d run(s) each, median; %s\n\n", r.When.Format(time.RFC3339), r.Count, r.Machine)
	fmt.Fprintf(w, "%-34s %12s %12s  %-26s %9s  %s\n", "FIGURE", "MESHD", "VERSUS", "(WAY)", "RATIO", "GOAL")
	for _, f := range r.Figures {
		vs, ratio, goal := "", "", f.Goal
		if f.Versus != "" {
			vs, ratio = fmtMs(f.VsMs), fmt.Sprintf("%.1f×", f.Ratio)
		}
		if f.Met != nil {
			goal += map[bool]string{true: " met", false: " MISSED"}[*f.Met]
		}
		value := fmtMs(f.MeshdMs)
		if f.Unit != "" {
			value = fmt.Sprintf("%.2f %s", f.Value, f.Unit)
		}
		fmt.Fprintf(w, "%-34s %12s %12s  %-26s %9s  %s\n", f.Key, value, vs, f.Versus, ratio, goal)
	}
}

func fmtMs(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%.2f s", v/1000)
	case v >= 1:
		return fmt.Sprintf("%.1f ms", v)
	default:
		return fmt.Sprintf("%.0f µs", v*1000)
	}
}

// JSON is the results as bench/results.json holds them.
func (r *Results) JSON() []byte {
	b, _ := json.MarshalIndent(r, "", "  ")
	return append(b, '\n')
}

// Write writes the results to path, relative to the module root when not absolute.
func (r *Results) Write(path string) error {
	if !filepath.IsAbs(path) {
		root, err := moduleRoot()
		if err != nil {
			return err
		}
		path = filepath.Join(root, path)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, r.JSON(), 0o644)
}

// ReadResults reads results written by Write (a relative path is under the module root).
func ReadResults(path string) (*Results, error) {
	if !filepath.IsAbs(path) {
		root, err := moduleRoot()
		if err != nil {
			return nil, err
		}
		path = filepath.Join(root, path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Results
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &r, nil
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" || strings.TrimSpace(string(out)) == os.DevNull {
		return "", fmt.Errorf("run meshbench inside the meshd module (go env GOMOD: %v)", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out))), nil
}

func machine() string {
	host, _ := os.Hostname()
	cpu := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				cpu = strings.TrimSpace(l[strings.Index(l, ":")+1:])
				break
			}
		}
	}
	return fmt.Sprintf("%s, %d cores (%s), %s", host, runtime.NumCPU(), cpu, runtime.Version())
}

// changeFigures are a server's looks that work on what changed (issue 37), at 100 and 1000
// nodes: each at rest and after some changed, beside the same look as it was before (its
// benchmark's yardstick).
func changeFigures(ms func(string) (float64, bool)) []Figure {
	looks := []struct{ bench, yard, changed, key, what, versus string }{
		{"BenchmarkHostEventsTick", "every-report", "changed-%d", "fleet.host_events", "the leader's host-events look", "decode every report"},
		{"BenchmarkBoardLook", "whole", "changed-%d", "fleet.board", "a look at the board", "every row built again"},
		{"BenchmarkPageNodes", "whole", "changed-%d", "fleet.page", "the status page's nodes for a render", "every node composed and previewed"},
		{"BenchmarkGossipViewAnswer", "every-call", "changed", "fleet.gossip_view", "a node's gossip view answered", "the view composed and sent whole"},
	}
	var fs []Figure
	for _, l := range looks {
		for _, n := range []int{100, 1000} {
			pre := fmt.Sprintf("%s/N=%d/", l.bench, n)
			yard, ok := ms(pre + l.yard)
			if !ok {
				continue
			}
			changed, count := l.changed, "the view changed"
			if strings.Contains(changed, "%d") {
				changed, count = fmt.Sprintf(changed, n/10), fmt.Sprintf("%d changed", n/10)
			}
			if v, ok := ms(pre + "unchanged"); ok {
				fs = append(fs, Figure{Key: fmt.Sprintf("%s.%d", l.key, n), What: fmt.Sprintf("%s, %d nodes, none changed", l.what, n),
					MeshdMs: v, VsMs: yard, Versus: l.versus, Ratio: yard / v})
			}
			if v, ok := ms(pre + changed); ok {
				fs = append(fs, Figure{Key: fmt.Sprintf("%s.%d.changed", l.key, n), What: fmt.Sprintf("%s, %d nodes, %s", l.what, n, count),
					MeshdMs: v, VsMs: yard, Versus: l.versus, Ratio: yard / v})
			}
		}
	}
	// A node's view after one join: the change since its view beside the whole view again.
	for _, n := range []int{100, 1000} {
		pre := fmt.Sprintf("BenchmarkGossipViewAnswer/N=%d/", n)
		whole, ok1 := ms(pre + "join-whole")
		delta, ok2 := ms(pre + "join-delta")
		if ok1 && ok2 {
			fs = append(fs, Figure{Key: fmt.Sprintf("fleet.gossip_view.%d.join", n), What: fmt.Sprintf("a node's gossip view after one join, %d nodes: the change since its view", n),
				MeshdMs: delta, VsMs: whole, Versus: "the whole view sent again", Ratio: whole / delta})
		}
	}
	return fs
}

// fleetFigures are BenchmarkFleet's, at each size it ran; the goals are issue 37's, at 1000.
func fleetFigures(b map[string]Bench) []Figure {
	var fs []Figure
	for _, n := range []string{"100", "1000", "5000"} {
		x, ok := b["BenchmarkFleet/"+n]
		if !ok || len(x.Metrics["joins/s"]) == 0 {
			continue
		}
		at1000 := n == "1000"
		for _, f := range []struct {
			key, unit, what, goal string
			ms                    bool
			met                   func(float64) bool
		}{
			{"joins", "joins/s", "enrolments a second", "≥ 20 joins/s", false, func(v float64) bool { return v >= 20 }},
			{"server_cpu", "server-cpu-pct", "the busiest server's CPU at rest, % of a core", "≤ 5 %", false, func(v float64) bool { return v <= 5 }},
			{"server_rss", "server-rss-MB", "the largest server's memory at rest, MB", "≤ 300 MB", false, func(v float64) bool { return v <= 300 }},
			{"status", "status-ms", "`meshd status --json` on the leader", "≤ 300 ms", true, func(v float64) bool { return v <= 300 }},
			{"assign_in_force", "assign-in-force-ms", "a module assigned to every node until each reports it in force", "≤ 10 s", true, func(v float64) bool { return v <= 10000 }},
			{"new_leader", "new-leader-ms", "the leader killed until a new leader answers", "≤ 5 s", true, func(v float64) bool { return v <= 5000 }},
			{"watch_back", "watch-back-ms", "the leader killed until every declaration watch on it is on another server", "≤ 5 s", true, func(v float64) bool { return v <= 5000 }},
			{"gossip_out", "gossip-out-B/s/node", "gossip bytes a node sends a second", "", false, nil},
		} {
			v := x.Medians[f.unit]
			fig := Figure{Key: "fleet." + n + "." + f.key, What: n + " simulated nodes: " + f.what}
			if f.ms {
				fig.MeshdMs = v
			} else {
				fig.Value, fig.Unit = v, f.unit
			}
			if at1000 && f.met != nil {
				fig.Goal, fig.Met = f.goal, boolp(f.met(v))
			}
			fs = append(fs, fig)
		}
	}
	return fs
}
