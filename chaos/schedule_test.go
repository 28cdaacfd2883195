package chaos

import (
	"context"
	"math/rand"
	"reflect"
	"slices"
	"strings"
	"testing"

	"meshd/catalogue"
)

// A seed replays: the same seed draws the same faults, in the same order, with the same waits
// and holds; another seed draws others.
func TestSeedReplaysTheSameFaults(t *testing.T) {
	draw := func(seed int64) []any {
		rng := rand.New(rand.NewSource(seed))
		var out []any
		for i := 0; i < 20; i++ {
			w, f, h := NextFault(rng)
			out = append(out, w, f, h)
		}
		return out
	}
	if a, b := draw(19), draw(19); !reflect.DeepEqual(a, b) {
		t.Fatalf("seed 19 drew two different schedules:\n%v\n%v", a, b)
	}
	if reflect.DeepEqual(draw(19), draw(20)) {
		t.Fatal("seeds 19 and 20 drew the same schedule")
	}
	rng := rand.New(rand.NewSource(7))
	for i := 0; i < 500; i++ {
		_, f, _ := NextFault(rng)
		switch {
		case f.Kind == FaultPartition && !slices.Contains(Servers, f.Machine):
			t.Fatalf("a partition of %s, which is not a server", f.Machine)
		case f.Kind == FaultCrash && !slices.Contains(CrashPoints, f.Point):
			t.Fatalf("a crash at %q, which is no crash point", f.Point)
		case strings.HasPrefix(f.Point, "tunnel.") && f.Machine != Peer:
			t.Fatalf("a crash inside a tunnel takeover on %s, not on %s, whose tunnel the workload takes", f.Machine, Peer)
		case !slices.Contains(Nodes, f.Machine) && f.Machine != Peer:
			t.Fatalf("a fault on %s, which runs no agent", f.Machine)
		}
	}
}

// The answer a command's exit and output give: only exit 0 is an acknowledgement, only the
// record's refusals are refusals, and what cannot be known is unknown.
func TestClassify(t *testing.T) {
	cases := []struct {
		code   int
		stderr string
		want   Answer
	}{
		{0, "committed and applied at record index 12 (answered by hub (leader))", Acked},
		{1, "meshd: node s2, module chaos-a: already assigned", Refused},
		{1, "meshd: node c1: already converged (since 2026-12-01 08:06:06Z)", Refused},
		{1, "meshd: no agent is listening on /run/meshd/meshd.sock: is `meshd agent` running?", NotSent},
		{1, "nsenter: reassociate to namespace 'ns/mnt' failed: Invalid argument", NotSent},
		{1, "meshd: no raft leader: the record needs a quorum of 2 of its 3 voters", Unknown},
		{1, "meshd: the forwarded write got no answer; its outcome is unknown", Unknown},
		{-1, "signal: killed", Unknown},
	}
	for _, c := range cases {
		if got := classify(c.code, "", c.stderr); got != c.want {
			t.Errorf("exit %d %q: %s, want %s", c.code, c.stderr, got, c.want)
		}
	}
}

// Every module the chaos lab adds is a manifest the catalogue accepts.
func TestManifestsParse(t *testing.T) {
	for _, name := range append(slices.Clone(Modules), SvcModule) {
		m, err := catalogue.Parse(name+".yaml", []byte(manifest(name)))
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, manifest(name))
		}
		if m.Name != name {
			t.Fatalf("%s parses as %q", name, m.Name)
		}
	}
}

// A fault aimed at a migration step crashes inside what that step does: a takeover, a hold, a
// take (the hub's a container's, p1's a file's), a flip, a return.
func TestAimedPoints(t *testing.T) {
	cases := []struct {
		node   string
		kind   Kind
		prefix string
	}{
		{Peer, KindTunnel, "tunnel."}, {"hub", KindAssign, "hold."}, {"hub", KindTake, "take.container."},
		{Peer, KindTake, "take."}, {"hub", KindConverge, "flip."}, {Peer, KindAdopt, "return."},
	}
	for _, c := range cases {
		pts := aimedPoints(&Aim{Node: c.node, Kind: c.kind})
		if len(pts) == 0 {
			t.Fatalf("%s %s: no crash point", c.kind, c.node)
		}
		for _, p := range pts {
			if !strings.HasPrefix(p, c.prefix) || (c.node == Peer && c.kind == KindTake && strings.HasPrefix(p, "take.container.")) {
				t.Errorf("%s %s: point %s", c.kind, c.node, p)
			}
		}
	}
}

// The hub's takeover runs under a fault on the hub, a crash only at a takeover's point; a seed
// replays it.
func TestHubTunnelFault(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	kinds := map[FaultKind]bool{}
	for i := 0; i < 200; i++ {
		f, hold, _ := HubTunnelFault(rng)
		kinds[f.Kind] = true
		if f.Machine != "hub" || hold <= 0 || (f.Kind == FaultCrash) != strings.HasPrefix(f.Point, "tunnel.") {
			t.Fatalf("drew %s", f)
		}
	}
	if len(kinds) < 5 || kinds[FaultPartition] {
		t.Fatalf("drew the kinds %v", kinds)
	}
	a, _, _ := HubTunnelFault(rand.New(rand.NewSource(9)))
	b, _, _ := HubTunnelFault(rand.New(rand.NewSource(9)))
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("one seed drew %s and %s", a, b)
	}
}

// A fault aimed at a step strikes the step's node: a crash at a point inside what it does, armed
// before the step's command (the step waits on Armed); any other fault lets the step go at once.
// A partition aimed at p1, a client, stays on the server it drew.
func TestAimAt(t *testing.T) {
	ctx := context.Background()
	r := &Run{}
	a := &Aim{Step: "migration: hub previewed and converged", Node: "hub", Kind: KindConverge, Armed: make(chan struct{})}
	f := Fault{Kind: FaultKill, Machine: "s3"}
	r.aimAt(ctx, &f, a)
	select {
	case <-a.Armed:
	default:
		t.Fatal("a kill aimed at a step did not let the step go")
	}
	if f.Machine != "hub" || f.AimedAt != a.Step {
		t.Fatalf("aimed: %s", f)
	}
	a = &Aim{Step: "migration: p1 returned to adopted", Node: Peer, Kind: KindAdopt, Armed: make(chan struct{})}
	f = Fault{Kind: FaultCrash, Machine: "c1", Point: "hold.after-record-original", pick: 7}
	r.aimAt(ctx, &f, a)
	if f.Machine != Peer || !strings.HasPrefix(f.Point, "return.") || f.armed != a.Armed {
		t.Fatalf("a crash aimed at p1's return: %s", f)
	}
	select {
	case <-a.Armed:
		t.Fatal("a crash aimed at a step let it go before the agent was armed")
	default:
	}
	f = Fault{Kind: FaultPartition, Machine: "s2"}
	r.aimAt(ctx, &f, &Aim{Node: Peer, Kind: KindTake, Armed: make(chan struct{})})
	if f.Machine != "s2" {
		t.Fatalf("a partition aimed at p1 moved to %s", f.Machine)
	}
}
