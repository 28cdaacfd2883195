package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"meshd/internal/testenv"
)

// The harness's smoke run (N=10, one run each) so `make bench` cannot rot: it runs the
// openings benchmarks on the lab and a micro-benchmark, and every figure it promises for N=10
// is in the table and in the JSON, with a ratio where an operator's way was measured beside it.
func TestSmokeRun(t *testing.T) {
	testenv.RequireRoot(t, "the openings benchmarks run on lab namespaces", "nft", "iptables", "ufw", "dockerd", "etcd")
	res, err := Run(Options{Count: 1, Sizes: "10", Suites: []Suite{
		{Package: "./netfilter/firewall/", Bench: "^BenchmarkOpenings$"},
		{Package: "./fsm/", Bench: "^BenchmarkCompose$"},
		{Package: "./agent/", Bench: "^BenchmarkOperatorCommit$", Benchtime: "20x"},
		{Package: "./e2e/", Bench: "^BenchmarkAgentFootprint$", Benchtime: "1x", Env: []string{"MESHD_BENCH_WINDOW=5s"}},
		{Package: "./e2e/", Bench: "^BenchmarkDeclarationToMachine/files/client$", Benchtime: "1x"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Figure{}
	for _, f := range res.Figures {
		got[f.Key] = f
	}
	for _, k := range []string{"openings.nftables.10", "openings.iptables.10", "openings.ufw.10", "openings.nftables.10.vs_nft_f",
		"recheck.nftables.10", "recheck.ufw.10", "restore.nftables.10", "restore.iptables.10", "restore.ufw.10", "fsm.compose",
		"declaration.take.files.client", "raft.commit.1.p50", "raft.commit.1.p99", "raft.commit.3.p50", "raft.commit.3.p99"} {
		f, ok := got[k]
		if !ok || f.MeshdMs <= 0 {
			t.Errorf("figure %s missing or zero: %+v", k, f)
		}
	}
	for _, k := range []string{"footprint.client.cpu", "footprint.client.rss", "footprint.server.rss"} {
		if f, ok := got[k]; !ok || f.Value <= 0 || f.Unit == "" {
			t.Errorf("figure %s missing or zero: %+v", k, f)
		}
	}
	if f := got["openings.ufw.10"]; f.Ratio <= 0 || f.Met == nil {
		t.Errorf("ufw openings have no ratio against `ufw allow` per port: %+v", f)
	} else {
		t.Logf("ufw, 10 openings: meshd %.1f ms, ufw allow per port %.1f ms: %.1f× (goal ≥ 10×)", f.MeshdMs, f.VsMs, f.Ratio)
	}
	if f := got["raft.commit.3.p50"]; f.VsMs <= 0 || f.Versus == "" {
		t.Errorf("Raft commit with three servers has no etcd beside it: %+v", f)
	}
	var table strings.Builder
	res.Table(&table)
	if !strings.Contains(table.String(), "openings.ufw.10") || !strings.Contains(table.String(), "`ufw allow` per port") {
		t.Errorf("table:\n%s", table.String())
	}
	out := filepath.Join(t.TempDir(), "results.json")
	if err := res.Write(out); err != nil {
		t.Fatal(err)
	}
	var back Results
	b, _ := os.ReadFile(out)
	if err := json.Unmarshal(b, &back); err != nil || len(back.Figures) != len(res.Figures) {
		t.Fatalf("results.json does not read back: %v", err)
	}
}

func TestParse(t *testing.T) {
	out := "goos: linux\nBenchmarkOpenings/ufw/meshd/10-2   \t       1\t 108439338 ns/op\t  1024 B/op\t  12 allocs/op\n" +
		"BenchmarkOpenings/ufw/meshd/10-2   \t       1\t 100000000 ns/op\nBenchmarkCompose-2 \t 5000\t 2400 ns/op\n" +
		"BenchmarkReportSpread/10-2  \t 3\t 324807240 ns/op\t 400.0 model-ms\t 324.7 ms-to-all\nPASS\n"
	b := map[string]Bench{}
	parse([]byte(out), b)
	if r := b["BenchmarkOpenings/ufw/meshd/10"].Runs; len(r) != 2 || r[0] != 108439338 {
		t.Fatalf("runs %v", r)
	}
	if b["BenchmarkCompose"].Runs[0] != 2400 {
		t.Fatalf("compose %v", b["BenchmarkCompose"])
	}
	if v := b["BenchmarkReportSpread/10"].Metrics["ms-to-all"]; len(v) != 1 || v[0] != 324.7 {
		t.Fatalf("spread metrics %v", b["BenchmarkReportSpread/10"].Metrics)
	}
	fleet := "BenchmarkComposeFleet/N=100/assign-all/before-2 \t 2\t 86256805 ns/op\t 101.0 composes/op\n" +
		"BenchmarkComposeFleet/N=100/assign-all/after-2 \t 2\t 8865332 ns/op\t 100.0 composes/op\n"
	parse([]byte(fleet), b)
	for name, x := range b {
		x.MedianNs = median(x.Runs)
		b[name] = x
	}
	var f Figure
	for _, x := range figures(b, nil) {
		if x.Key == "fsm.command.100.assign_all" {
			f = x
		}
	}
	if f.MeshdMs < 8.86 || f.MeshdMs > 8.87 || f.VsMs < 86.2 || f.Ratio < 9.7 || f.Ratio > 9.8 {
		t.Fatalf("the fleet's command figure: %+v", f)
	}
	if m := median([]float64{5, 1, 3, 100}); m != 4 {
		t.Fatalf("median %v, want 4", m)
	}
}

// The drift figures come from BenchmarkDriftDetection's metrics: the watches' p50 and max, each
// beside the timer alone, with the 1 s goal judged on the watches' figure; the tunnel's
// (BenchmarkTunnelDriftDetection) stand beside the same timer.
func TestDriftFigures(t *testing.T) {
	out := "BenchmarkDriftDetection/watch-2 \t 8\t 42300048 ns/op\t 93.64 max-ms\t 33.74 p50-ms\n" +
		"BenchmarkDriftDetection/timer-2 \t 8\t 6606214638 ns/op\t 9964 max-ms\t 5689 p50-ms\n" +
		"BenchmarkTunnelDriftDetection/down-2 \t 8\t 142300048 ns/op\t 180.5 max-ms\t 120.2 p50-ms\n" +
		"BenchmarkTunnelDriftDetection/removed-2 \t 8\t 242300048 ns/op\t 1210 max-ms\t 160.4 p50-ms\n"
	b := map[string]Bench{}
	parse([]byte(out), b)
	for name, x := range b {
		x.Medians = map[string]float64{}
		for unit, v := range x.Metrics {
			x.Medians[unit] = median(v)
		}
		b[name] = x
	}
	got := map[string]Figure{}
	for _, f := range figures(b, nil) {
		got[f.Key] = f
	}
	p50, worst := got["drift.file.p50"], got["drift.file.max"]
	if p50.MeshdMs != 33.74 || p50.VsMs != 5689 || p50.Met == nil || !*p50.Met || p50.Ratio < 168 {
		t.Fatalf("p50 figure %+v", p50)
	}
	if worst.MeshdMs != 93.64 || worst.VsMs != 9964 || worst.Met == nil || !*worst.Met {
		t.Fatalf("max figure %+v", worst)
	}
	if f := got["drift.tunnel.down.p50"]; f.MeshdMs != 120.2 || f.VsMs != 5689 || f.Met == nil || !*f.Met {
		t.Fatalf("tunnel down p50 figure %+v", f)
	}
	if f := got["drift.tunnel.removed.max"]; f.MeshdMs != 1210 || f.VsMs != 9964 || f.Met == nil || *f.Met {
		t.Fatalf("tunnel removed max figure %+v: want 1210 ms beside 9964, the goal not met", f)
	}
}

// The takeover's and the take's gaps come from BenchmarkTunnelTakeover's and BenchmarkTakeOutage's
// metrics; the takeover is judged on its 0.5 s goal, and a gap of 0 (no call failed) is a figure.
func TestGapFigures(t *testing.T) {
	out := "BenchmarkTunnelTakeover-2 \t 1\t 52300048000 ns/op\t 20.00 every-ms\t 0 gap-ms\n" +
		"BenchmarkTunnelTakeoverRealHub-2 \t 1\t 92300048000 ns/op\t 20.00 every-ms\t 101.0 hub-gap-ms\t 1012 spoke-gap-ms\n" +
		"BenchmarkTakeOutage-2 \t 1\t 62300048000 ns/op\t 20.00 every-ms\t 612.5 outage-ms\t 540.0 swap-ms\n"
	b := map[string]Bench{}
	parse([]byte(out), b)
	for name, x := range b {
		x.Medians = map[string]float64{}
		for unit, v := range x.Metrics {
			x.Medians[unit] = median(v)
		}
		b[name] = x
	}
	got := map[string]Figure{}
	for _, f := range figures(b, nil) {
		got[f.Key] = f
	}
	if f, ok := got["tunnel.takeover.gap"]; !ok || f.MeshdMs != 0 || f.Met == nil || !*f.Met || !strings.Contains(f.What, "20 ms") {
		t.Fatalf("takeover figure %+v (present %v): want 0 ms, the 0.5 s goal met, the cadence named", f, ok)
	}
	if f, ok := got["tunnel.takeover.gap.realhub.hub"]; !ok || f.MeshdMs != 101 || f.Met == nil || !*f.Met {
		t.Fatalf("real hub's takeover figure %+v (present %v): want 101 ms, met", f, ok)
	}
	if f, ok := got["tunnel.takeover.gap.realhub.spoke"]; !ok || f.MeshdMs != 1012 || f.Met == nil || *f.Met {
		t.Fatalf("real hub's spoke takeover figure %+v (present %v): want 1012 ms, missed", f, ok)
	}
	if f, ok := got["take.outage"]; !ok || f.MeshdMs != 612.5 || !strings.Contains(f.What, "swap 540 ms") {
		t.Fatalf("take outage figure %+v (present %v)", f, ok)
	}
}

// --only narrows the suites to the benchmarks it names; --merge replaces the figures a run
// measured in the earlier results, keeps the others, and says which run each came from.
func TestOnlyAndMerge(t *testing.T) {
	got, err := selectSuites(DefaultSuites, "AgentFootprint")
	if err != nil || len(got) != 1 || got[0].Bench != "^Benchmark(AgentFootprint)$" || got[0].Package != "./e2e/" {
		t.Fatalf("--only AgentFootprint picked %+v (%v)", got, err)
	}
	if _, err := selectSuites(DefaultSuites, "NoSuchThing"); err == nil {
		t.Fatal("--only matching nothing is not refused")
	}
	earlier := &Results{Figures: []Figure{{Key: "a", MeshdMs: 1}, {Key: "b", MeshdMs: 2}}, Benches: map[string]Bench{"BenchmarkA": {MedianNs: 1}}}
	later := &Results{When: time.Date(2026, 12, 1, 22, 0, 0, 0, time.UTC), Count: 1,
		Figures: []Figure{{Key: "b", MeshdMs: 3}, {Key: "c", MeshdMs: 4}}, Benches: map[string]Bench{"BenchmarkB": {MedianNs: 3}}}
	earlier.Merge(later, "B|C")
	if len(earlier.Figures) != 3 || earlier.Figures[0].MeshdMs != 1 || !earlier.Figures[0].When.IsZero() ||
		earlier.Figures[1].MeshdMs != 3 || !earlier.Figures[1].When.Equal(later.When) || earlier.Figures[2].Key != "c" {
		t.Fatalf("merged figures %+v", earlier.Figures)
	}
	if len(earlier.Benches) != 2 || len(earlier.Updates) != 1 || !slices.Equal(earlier.Updates[0].Figures, []string{"b", "c"}) {
		t.Fatalf("merged benches %v, updates %+v", earlier.Benches, earlier.Updates)
	}
}

// The looks that work on what changed stand beside their yardstick (the look as it was before):
// the host events, the board and the gossip view, at rest and after a change.
func TestChangeFigures(t *testing.T) {
	out := "BenchmarkBoardLook/N=1000/whole-2 \t 10\t 34000000 ns/op\n" +
		"BenchmarkBoardLook/N=1000/unchanged-2 \t 10\t 680000 ns/op\n" +
		"BenchmarkBoardLook/N=1000/changed-100-2 \t 10\t 10700000 ns/op\n" +
		"BenchmarkGossipViewAnswer/N=100/every-call-2 \t 10\t 131500 ns/op\t 10471 bytes/answer\n" +
		"BenchmarkGossipViewAnswer/N=100/unchanged-2 \t 10\t 3800 ns/op\t 95 bytes/answer\n" +
		"BenchmarkGossipViewAnswer/N=100/changed-2 \t 10\t 164000 ns/op\t 10502 bytes/answer\n"
	b := map[string]Bench{}
	parse([]byte(out), b)
	for name, x := range b {
		x.MedianNs = median(x.Runs)
		b[name] = x
	}
	got := map[string]Figure{}
	for _, f := range figures(b, nil) {
		got[f.Key] = f
	}
	if f := got["fleet.board.1000"]; f.MeshdMs != 0.68 || f.VsMs != 34 || f.Ratio < 49 {
		t.Fatalf("board at rest: %+v", f)
	}
	if f := got["fleet.board.1000.changed"]; f.MeshdMs != 10.7 || !strings.Contains(f.What, "100 changed") {
		t.Fatalf("board, a tenth changed: %+v", f)
	}
	if f := got["fleet.gossip_view.100"]; f.MeshdMs != 0.0038 || f.VsMs != 0.1315 {
		t.Fatalf("gossip view unchanged: %+v", f)
	}
	if f := got["fleet.gossip_view.100.changed"]; f.MeshdMs != 0.164 || !strings.Contains(f.What, "the view changed") {
		t.Fatalf("gossip view changed: %+v", f)
	}
}
