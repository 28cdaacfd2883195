package chaos

// The migration of the predecessor's peer, as the workload's third client walks it while the two
// random clients and the faults go on: the order ADR 0105 amends the runbook's to. The hub was
// adopted and its tunnel taken at genesis (Mesh.Up); then p1 is enrolled adopted over the tunnel
// it has, its own found tunnel taken over, two modules assigned and taken one at a time, previewed
// and converged, returned to adopted, and converged again. Each command goes to a random node
// (but the join, which runs on p1 itself) and is recorded in the history like the others; a
// command whose answer is unknown is sent again until it is acknowledged or refused for what the
// record holds (already done). Each step is said to the lab (Lab.Step), so the probe through the
// tunnel reads back per step.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"slices"
	"sync/atomic"
	"time"

	"meshd/agent"
	"meshd/host"
	"meshd/lab"
)

// Step is one step of the workload said to the lab, on the history's clock.
type Step struct {
	Name string `json:"name"`
	At   int64  `json:"at_ns"` // since the history began
	// Done says the step ended with its command acknowledged or refused as already done.
	Done bool `json:"done"`
	// Note says why a step did not end done.
	Note string `json:"note,omitempty"`
}

// Migration walks p1's migration (see the file's comment).
type Migration struct {
	W *Workload
	// Step says a step begins (the run marks it on the lab and in its list).
	Step func(name string) *Step
	// attempts bounds how many times one step's command is sent.
	attempts int
	enrolled atomic.Bool
	stop     <-chan struct{}
}

// stopped says the run's workload is over (or its context ended): a step in progress gives up
// its remaining attempts, without calling that a failure.
func (mg *Migration) stopped(ctx context.Context) bool {
	select {
	case <-mg.stop:
		return true
	case <-ctx.Done():
		return true
	default:
		return false
	}
}

// Enrolled says p1's join was acknowledged and its agent started: faults may act on it from then.
func (mg *Migration) Enrolled() bool { return mg != nil && mg.enrolled.Load() }

// Run walks the steps until they are done, one fails for good, or stop closes.
func (mg *Migration) Run(ctx context.Context, stop <-chan struct{}) {
	if mg.attempts == 0 {
		mg.attempts = 8
	}
	mg.stop = stop
	rng := rand.New(rand.NewSource(mg.W.Seed + 100))
	// It begins while the random clients are at work, 3 to 8 s in (drawn from the seed): a
	// crash fault drawn inside a takeover early in the run is armed on p1 as soon as it enrols,
	// before the migration's own take.
	select {
	case <-stop:
		return
	case <-ctx.Done():
		return
	case <-time.After(time.Duration(3000+rng.Intn(5000)) * time.Millisecond):
	}
	steps := []struct {
		name string
		run  func() (bool, string)
	}{
		{"p1 enrolled adopted over the tunnel", func() (bool, string) { return mg.enrol(ctx, rng) }},
		{"p1's tunnel taken", func() (bool, string) {
			return mg.until(ctx, rng, Op{Node: Peer, Kind: KindTunnel}, []string{"tunnel", "take", Peer, lab.TunnelIface, "--no-wait"})
		}},
		{"p1: chaos-a assigned", func() (bool, string) { return mg.module(ctx, rng, KindAssign, "chaos-a") }},
		{"p1: chaos-a taken", func() (bool, string) { return mg.module(ctx, rng, KindTake, "chaos-a") }},
		{"p1: chaos-b assigned", func() (bool, string) { return mg.module(ctx, rng, KindAssign, "chaos-b") }},
		{"p1: chaos-b taken", func() (bool, string) { return mg.module(ctx, rng, KindTake, "chaos-b") }},
		{"p1 previewed and converged", func() (bool, string) { return mg.converge(ctx, rng) }},
		{"p1 returned to adopted", func() (bool, string) {
			return mg.until(ctx, rng, Op{Node: Peer, Kind: KindAdopt}, []string{"adopt", Peer, "--wait", (mg.W.Timeout / 2).String()})
		}},
		{"p1 converged again", func() (bool, string) { return mg.converge(ctx, rng) }},
	}
	for _, s := range steps {
		if mg.stopped(ctx) {
			return
		}
		st := mg.Step("migration: " + s.name)
		st.Done, st.Note = s.run()
		if !st.Done {
			if mg.stopped(ctx) {
				st.Note = "" // cut short by the run's end, not given up on
			}
			return // a later step needs this one
		}
	}
	mg.Step("migration: done")
}

// via is a random node's machine to send a command through.
func via(rng *rand.Rand) string { return Nodes[rng.Intn(len(Nodes))] }

// until sends o (args) through random nodes until it is acknowledged or refused (done either
// way: the record holds what was asked), at most attempts times.
func (mg *Migration) until(ctx context.Context, rng *rand.Rand, o Op, args []string) (bool, string) {
	var last string
	for i := 0; i < mg.attempts && !mg.stopped(ctx); i++ {
		o.Client, o.Via = migrationClient(mg.W), via(rng)
		p := mg.W.Send(ctx, o, args)
		if p.Answer == Acked || p.Answer == Refused {
			return true, ""
		}
		last = fmt.Sprintf("#%d %s: %s", p.ID, p.Answer, p.Output)
		mg.pause(ctx)
	}
	return false, "not done after " + fmt.Sprint(mg.attempts) + " attempts; the last: " + last
}

func (mg *Migration) pause(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(time.Second):
	}
}

// migrationClient is the migration's client id in the history: after the random clients, the
// final reads and the crash faults' commands.
func migrationClient(w *Workload) int { return w.Clients + 2 }

// moduleArgs is `meshd module VERB NODE MODULE`; a take with --no-wait: the history's answer is
// the record's (acknowledged once committed), and the model reads the node's side from the record.
func moduleArgs(verb, node, mod string) []string {
	args := []string{"module", verb, node, mod}
	if verb == "take" {
		args = append(args, "--no-wait")
	}
	return args
}

func (mg *Migration) module(ctx context.Context, rng *rand.Rand, kind Kind, mod string) (bool, string) {
	verb := map[Kind]string{KindAssign: "assign", KindTake: "take"}[kind]
	return mg.until(ctx, rng, Op{Node: Peer, Kind: kind, Module: mod}, moduleArgs(verb, Peer, mod))
}

// enrol joins p1 adopted with a token made through a random node, presenting its found tunnel
// (the mesh gives it the address the tunnel had for its key), and starts its agent.
func (mg *Migration) enrol(ctx context.Context, rng *rand.Rand) (bool, string) {
	w := mg.W
	var last string
	for i := 0; i < mg.attempts && !mg.stopped(ctx); i++ {
		o := Op{Client: migrationClient(w), Via: via(rng), Node: Peer, Kind: KindToken}
		p, out := w.send(ctx, o, []string{"token", "create", "--adopted", "--json"})
		var tv agent.TokenView
		if p.Answer != Acked || json.Unmarshal([]byte(out), &tv) != nil || tv.Token == "" {
			last = fmt.Sprintf("token #%d: %s %s", p.ID, p.Answer, p.Output)
			mg.pause(ctx)
			continue
		}
		j := Op{Client: migrationClient(w), Via: Peer, Node: Peer, Kind: KindJoin}
		p, out = w.send(ctx, j, []string{"join", tv.Token, "--name", Peer, "--data-dir", "/var/lib/meshd", "--tunnel", lab.TunnelIface, "--json"})
		joined := p.Answer == Acked
		if !joined {
			// The join's answer was lost: it enrolled if its identity is on the machine.
			_, err := w.Mesh.Lab.Machine(Peer).ReadFile(ctx, "/var/lib/meshd/node.json")
			joined = err == nil
		}
		if !joined {
			last = fmt.Sprintf("join #%d: %s %s", p.ID, p.Answer, p.Output)
			mg.pause(ctx)
			continue
		}
		var jr agent.JoinResult
		if p.Answer == Acked && (json.Unmarshal([]byte(out), &jr) != nil || jr.Node == nil || jr.Node.Address != P1TunnelAddr) {
			return false, fmt.Sprintf("join #%d: p1 did not keep the address its tunnel had (%s): %s", p.ID, P1TunnelAddr, out)
		}
		if err := w.Mesh.startAgent(ctx, Peer); err != nil {
			return false, "starting p1's agent: " + err.Error()
		}
		mg.enrolled.Store(true)
		// Its first report, before its tunnel is taken: the takeover then happens in a pass of
		// an agent that is up (a crash fault drawn inside the takeover arms it meanwhile).
		asked := 0
		if err := poll(ctx, 60*time.Second, func() error {
			asked++
			v, err := w.Mesh.NodeView(ctx, Servers[asked%len(Servers)], Peer)
			if err == nil && v.Report == nil {
				err = fmt.Errorf("no report from p1 yet")
			}
			return err
		}); err != nil && !mg.stopped(ctx) {
			return false, "p1's agent never reported: " + err.Error()
		}
		return true, ""
	}
	return false, "p1 did not enrol after " + fmt.Sprint(mg.attempts) + " attempts; the last: " + last
}

// converge previews p1 through a random node, then converges it with the preview's plan token,
// until acknowledged or refused as already converged.
func (mg *Migration) converge(ctx context.Context, rng *rand.Rand) (bool, string) {
	w := mg.W
	var last string
	for i := 0; i < mg.attempts && !mg.stopped(ctx); i++ {
		pr := Op{Client: migrationClient(w), Via: via(rng), Node: Peer, Kind: KindPreview}
		p, out := w.send(ctx, pr, []string{"converge", Peer, "--preview", "--json"})
		var pv host.ConvergePreview
		if err := json.Unmarshal([]byte(out), &pv); err != nil || pv.Token == "" {
			last = fmt.Sprintf("preview #%d: %s %s", p.ID, p.Answer, p.Output)
			mg.pause(ctx)
			continue
		}
		o := Op{Client: migrationClient(w), Via: via(rng), Node: Peer, Kind: KindConverge}
		p = w.Send(ctx, o, []string{"converge", Peer, "--plan", pv.Token, "--wait", (w.Timeout / 2).String()})
		if p.Answer == Acked || p.Answer == Refused {
			return true, ""
		}
		last = fmt.Sprintf("converge #%d: %s %s", p.ID, p.Answer, p.Output)
		mg.pause(ctx)
	}
	return false, "not converged after " + fmt.Sprint(mg.attempts) + " attempts; the last: " + last
}

// AllNodes are the lab's nodes the record may hold now: the four raised at the start, and p1
// once the migration enrolled it.
func (w *Workload) AllNodes() []string {
	if w.Migration.Enrolled() {
		return append(slices.Clone(Nodes), Peer)
	}
	return Nodes
}
