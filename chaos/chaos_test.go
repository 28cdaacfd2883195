package chaos

import (
	"crypto/rand"
	"encoding/hex"
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

// shortSeeds are the seeds `make test` replays: a short run each, the same faults at every run.
// 44 draws: the hub's takeover on the running mesh under a crash at tunnel.after-seal-key
// (reached); then, within its 45 s and beside the whole migration (p1 enrolled over the tunnel,
// its tunnel taken; chaos-svc and the foundation taken on the hub, the hub and s2 previewed
// and converged (s3 enrolled converged); p1's two modules taken, p1 converged, returned, converged again), a crash of s2
// inside a take, s2 and then the hub partitioned, s3 stopped and booted, a crash of the hub inside
// its flip (aimed at it, flip.after-filter: reached), p1 powered off during one of its steps
// (aimed: its converge or its return, as the timings fall), s2's agent killed. 70-110 s in all. A seed a soak found a bug with is added here once
// the bug is fixed; 19 (the hub rebooted with the store reachable from outside) passed once
// meshd-boot.service came, under the earlier workload, and is left to `make chaos SEED=19` to
// keep `make test` short.
var shortSeeds = []int64{44}

// shortDuration is how long the workload runs under faults in a short run.
const shortDuration = 45 * time.Second

// TestChaos runs the workload under seeded faults on a chaos lab and checks the history and the
// machines. CHAOS_SEED=N replays seed N once (`make chaos SEED=N`), its workload for
// CHAOS_MINUTES if given, else 2 minutes; CHAOS_MINUTES=M alone soaks for M minutes, a fresh
// seed per run (`make chaos`); without either, the short fixed seeds run.
func TestChaos(t *testing.T) {
	labtest.Require(t)
	bin := labtest.Meshd(t)
	p, err := planFromEnv(os.Getenv)
	if err != nil {
		t.Fatal(err)
	}
	seeds, duration, soak := p.seeds, p.duration, p.soak
	runOne := func(t *testing.T, seed int64) {
		fmt.Printf("chaos: seed %d (replay: make chaos SEED=%d)\n", seed, seed)
		t.Logf("chaos: seed %d (replay: make chaos SEED=%d)", seed, seed)
		l := labtest.Up(t, Scenario(), lab.Options{Name: labName()})
		ctx := testenv.Context(t, duration+15*time.Minute)
		out := filepath.Join(outRoot(), fmt.Sprintf("seed-%d-%s", seed, time.Now().UTC().Format("20060102T150405")))
		r := Execute(ctx, l, Config{Seed: seed, Duration: duration, Binary: bin, Out: out, Logf: t.Logf})
		if len(r.Problems) > 0 {
			t.Fatalf("chaos seed %d failed (replay: make chaos SEED=%d); the history, the faults and each agent's log are in %s:\n  %s",
				seed, seed, r.Out, strings.Join(r.Problems, "\n  "))
		}
	}
	if soak == 0 {
		for _, seed := range seeds {
			t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runOne(t, seed) })
		}
		return
	}
	end := time.Now().Add(soak)
	for time.Now().Before(end) {
		seed := time.Now().UnixNano() % 1e9
		if !t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) { runOne(t, seed) }) {
			return
		}
	}
}

// runPlan is what TestChaos runs: each seed's run with its workload's duration, or, when soak is
// set, fresh seeds until soak has passed.
type runPlan struct {
	seeds    []int64
	duration time.Duration
	soak     time.Duration
}

// planFromEnv reads CHAOS_SEED, CHAOS_MINUTES and CHAOS_RUN through getenv. A seed is never a
// soak: with CHAOS_MINUTES it is the minutes of its one run.
func planFromEnv(getenv func(string) string) (runPlan, error) {
	p := runPlan{seeds: shortSeeds, duration: shortDuration}
	if s := getenv("CHAOS_SEED"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return p, fmt.Errorf("CHAOS_SEED=%q is not a number", s)
		}
		p.seeds = []int64{n}
		p.duration = 2 * time.Minute
	}
	if s := getenv("CHAOS_MINUTES"); s != "" {
		m, err := strconv.ParseFloat(s, 64)
		if err != nil || m <= 0 {
			return p, fmt.Errorf("CHAOS_MINUTES=%q is not a positive number of minutes", s)
		}
		if getenv("CHAOS_SEED") != "" {
			// A seed given is replayed once, its workload for the minutes given.
			p.duration = time.Duration(m * float64(time.Minute))
		} else {
			p.soak = time.Duration(m * float64(time.Minute))
			p.duration = min(p.soak, 5*time.Minute)
		}
	}
	if d := getenv("CHAOS_RUN"); d != "" {
		v, err := time.ParseDuration(d)
		if err != nil {
			return p, fmt.Errorf("CHAOS_RUN=%q is not a duration", d)
		}
		p.duration = v
	}
	return p, nil
}

func labName() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return "cx" + hex.EncodeToString(b)
}

// outRoot is where failure folders go: CHAOS_OUT, else /tmp/meshd-chaos.
func outRoot() string {
	if d := os.Getenv("CHAOS_OUT"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), "meshd-chaos")
}
