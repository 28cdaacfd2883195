package chaos

// The migration, as the workload's third client walks it while the two random clients and the
// faults go on: the order ADR 0105 amends the runbook's to. The hub was adopted and its tunnel
// taken on the running mesh before anything joined (Run.takeHubTunnel); then p1 is enrolled
// adopted over the tunnel it has and its own found tunnel taken over; the hub's modules are taken
// one at a time (its predecessor service, chaos-svc, assigned first), then it is previewed and
// converged, and s2 after it (s3 enrolled converged, a new machine); p1's two modules are assigned and taken one at a time, it is
// previewed and converged, returned to adopted, and converged again. (c1 goes back and forth
// under the random clients.) Each command goes to a random node (but the join, which runs on p1
// itself) and is recorded in the history like the others; a command whose answer is unknown is
// sent again until it is acknowledged or refused for what the record holds (already done). Each
// step is said to the lab (Lab.Step), so the probe through the tunnel reads back per step, and
// offered to the scheduler, which may aim a fault at it.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"slices"
	"sync/atomic"
	"time"

	"meshd/api"
	"meshd/lab"
	"meshd/report"
	"meshd/setup"
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

// Migration walks p1's migration and the hub's convergence (see the file's comment).
type Migration struct {
	W *Workload
	// Step says a step begins (the run marks it on the lab and in its list).
	Step func(name string) *Step
	// Aims, when set, is where the scheduler waits for a step to aim its next fault at: each
	// step that acts on a node (a tunnel take, an assign, a take, a converge, a return) offers
	// itself there before its command is sent, and waits (a bounded while) for the fault to be
	// armed if one was waiting. Nothing waits when no fault is aimed.
	Aims chan *Aim
	// Musts is where the steps that must not go without a fault (the hub's flip) wait, up to
	// armWait, for the scheduler to aim its next fault at them, whatever it drew.
	Musts chan *Aim
	// attempts bounds how many times one step's command is sent.
	attempts int
	enrolled atomic.Bool
	done     atomic.Bool
	stop     <-chan struct{}
}

// Aim is a migration step a fault may be aimed at: the node it acts on and what it does. The
// scheduler closes Armed once the fault is in place (a crash fault's agent restarted armed), or
// at once for a fault that should land after the command was sent.
type Aim struct {
	Step  string
	Node  string
	Kind  Kind
	Armed chan struct{}
}

// aim offers the step to a waiting scheduler and, if one took it, waits until its fault is
// armed (at most armWait). A step that must have a fault waits up to armWait for the scheduler
// to take it.
func (mg *Migration) aim(ctx context.Context, step, node string, kind Kind, must bool) {
	ch := mg.Aims
	if must {
		ch = mg.Musts
	}
	if ch == nil {
		return
	}
	a := &Aim{Step: step, Node: node, Kind: kind, Armed: make(chan struct{})}
	if must {
		select {
		case ch <- a:
		case <-time.After(armWait):
			return
		case <-mg.stop:
			return
		case <-ctx.Done():
			return
		}
	} else {
		select {
		case ch <- a:
		default:
			return
		}
	}
	select {
	case <-a.Armed:
	case <-time.After(armWait):
	case <-mg.stop:
	case <-ctx.Done():
	}
}

// armWait bounds how long a step waits for the fault aimed at it to be armed.
const armWait = 20 * time.Second

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

// Done says every step of the migration was done.
func (mg *Migration) Done() bool { return mg != nil && mg.done.Load() }

// HubModules are the modules the hub takes one at a time before it is previewed and converged:
// the predecessor's service p1 calls through the tunnel (found, so held, then taken: its
// container compared and kept or replaced), then the foundation genesis assigned it.
var HubModules = []string{SvcModule, "store", "broker", "registry", "mesh"}

// Run walks the steps until they are done, one fails for good, or stop closes. Its length is the
// list of steps, in the migration's order: kept in one place so the order reads at once.
func (mg *Migration) Run(ctx context.Context, stop <-chan struct{}) {
	if mg.attempts == 0 {
		mg.attempts = 12
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
	type stepDef struct {
		name string
		node string // the node a fault may be aimed at ("": the step is not offered)
		kind Kind
		run  func() (bool, string)
	}
	steps := []stepDef{
		{"p1 enrolled adopted over the tunnel", "", "", func() (bool, string) { return mg.enrol(ctx, rng) }},
		{"p1's tunnel taken", Peer, KindTunnel, func() (bool, string) {
			return mg.until(ctx, rng, Op{Node: Peer, Kind: KindTunnel}, []string{"tunnel", "take", Peer, lab.TunnelIface, "--no-wait"})
		}},
		{"hub: " + SvcModule + " (the service p1 calls) assigned", "hub", KindAssign, func() (bool, string) {
			return mg.module(ctx, rng, "hub", KindAssign, SvcModule)
		}},
	}
	for i, mod := range HubModules {
		aimed := "hub" // the foundation's takes change nothing on the machine: no fault is aimed at them
		if i > 0 {
			aimed = ""
		}
		steps = append(steps, stepDef{"hub: " + mod + " taken", aimed, KindTake, func() (bool, string) {
			return mg.module(ctx, rng, "hub", KindTake, mod)
		}})
	}
	steps = append(steps,
		stepDef{"hub previewed and converged", "hub", KindConverge, func() (bool, string) { return mg.converge(ctx, rng, "hub") }},
		stepDef{"s2 previewed and converged", "s2", KindConverge, func() (bool, string) { return mg.converge(ctx, rng, "s2") }},
		stepDef{"p1: chaos-a assigned", Peer, KindAssign, func() (bool, string) { return mg.module(ctx, rng, Peer, KindAssign, "chaos-a") }},
		stepDef{"p1: chaos-a taken", Peer, KindTake, func() (bool, string) { return mg.module(ctx, rng, Peer, KindTake, "chaos-a") }},
		stepDef{"p1: chaos-b assigned", Peer, KindAssign, func() (bool, string) { return mg.module(ctx, rng, Peer, KindAssign, "chaos-b") }},
		stepDef{"p1: chaos-b taken", Peer, KindTake, func() (bool, string) { return mg.module(ctx, rng, Peer, KindTake, "chaos-b") }},
		stepDef{"p1 previewed and converged", Peer, KindConverge, func() (bool, string) { return mg.converge(ctx, rng, Peer) }},
		stepDef{"p1 returned to adopted", Peer, KindAdopt, func() (bool, string) {
			return mg.until(ctx, rng, Op{Node: Peer, Kind: KindAdopt}, []string{"adopt", Peer, "--wait", (mg.W.Timeout / 2).String()})
		}},
		stepDef{"p1 converged again", Peer, KindConverge, func() (bool, string) { return mg.converge(ctx, rng, Peer) }},
	)
	for i, s := range steps {
		if i > 0 {
			// A seeded pause between steps (0.5-2 s), as an operator's: it spreads the migration
			// over the run, so the scheduler's faults land between and inside its steps.
			select {
			case <-stop:
			case <-ctx.Done():
			case <-time.After(time.Duration(500+rng.Intn(1500)) * time.Millisecond):
			}
		}
		if mg.stopped(ctx) {
			return
		}
		name := "migration: " + s.name
		st := mg.Step(name)
		if s.node != "" {
			// The hub's flip never goes without a fault aimed at it (Musts).
			mg.aim(ctx, name, s.node, s.kind, s.node == "hub" && s.kind == KindConverge)
		}
		st.Done, st.Note = s.run()
		if !st.Done {
			if mg.stopped(ctx) {
				st.Note = "" // cut short by the run's end, not given up on
			}
			return // a later step needs this one
		}
	}
	mg.done.Store(true)
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

func (mg *Migration) module(ctx context.Context, rng *rand.Rand, node string, kind Kind, mod string) (bool, string) {
	verb := map[Kind]string{KindAssign: "assign", KindTake: "take"}[kind]
	return mg.until(ctx, rng, Op{Node: node, Kind: kind, Module: mod}, moduleArgs(verb, node, mod))
}

// enrol joins p1 adopted with a token made through a random node, presenting its found tunnel
// (the mesh gives it the address the tunnel had for its key), and starts its agent.
func (mg *Migration) enrol(ctx context.Context, rng *rand.Rand) (bool, string) {
	w := mg.W
	var last string
	p1 := w.Mesh.Lab.Machine(Peer)
	up := func() error { // p1 may be powered off or cut off by a fault: wait for it to be up
		return poll(ctx, 60*time.Second, func() error { _, err := p1.Exec(ctx, "true"); return err })
	}
	for i := 0; i < mg.attempts && !mg.stopped(ctx); i++ {
		if err := up(); err != nil {
			last = "p1 is not up: " + err.Error()
			continue
		}
		o := Op{Client: migrationClient(w), Via: via(rng), Node: Peer, Kind: KindToken}
		p, out := w.send(ctx, o, []string{"token", "create", "--adopted", "--json"})
		var tv api.TokenView
		if p.Answer != Acked || json.Unmarshal([]byte(out), &tv) != nil || tv.Token == "" {
			last = fmt.Sprintf("token #%d: %s %s", p.ID, p.Answer, p.Output)
			mg.pause(ctx)
			continue
		}
		j := Op{Client: migrationClient(w), Via: Peer, Node: Peer, Kind: KindJoin}
		p, out = w.send(ctx, j, []string{"join", tv.Token, "--name", Peer, "--data-dir", "/var/lib/meshd", "--tunnel", lab.TunnelIface, "--json"})
		joined := p.Answer == Acked
		if !joined {
			// The join's answer was lost (p1 powered off under it, say): it enrolled if its
			// identity is on the machine's disk.
			if err := up(); err != nil {
				last = fmt.Sprintf("join #%d: %s %s; then p1 is not up: %v", p.ID, p.Answer, p.Output, err)
				continue
			}
			_, err := p1.ReadFile(ctx, "/var/lib/meshd/node.json")
			joined = err == nil
		}
		if !joined {
			last = fmt.Sprintf("join #%d: %s %s", p.ID, p.Answer, p.Output)
			mg.pause(ctx)
			continue
		}
		var jr setup.JoinResult
		if p.Answer == Acked && (json.Unmarshal([]byte(out), &jr) != nil || jr.Node == nil || jr.Node.Address != P1TunnelAddr) {
			return false, fmt.Sprintf("join #%d: p1 did not keep the address its tunnel had (%s): %s", p.ID, P1TunnelAddr, out)
		}
		// Its unit enabled and started; a fault may have p1 down meanwhile.
		// A boot after the unit was enabled has started it already.
		in := Injector{Lab: w.Mesh.Lab}
		if err := poll(ctx, 60*time.Second, func() error {
			if in.AgentRunning(Peer) {
				return nil
			}
			return w.Mesh.startAgent(ctx, Peer)
		}); err != nil {
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

// converge previews node through a random node, then converges it with the preview's plan
// token, until acknowledged or refused as already converged.
func (mg *Migration) converge(ctx context.Context, rng *rand.Rand, node string) (bool, string) {
	w := mg.W
	var last string
	for i := 0; i < mg.attempts && !mg.stopped(ctx); i++ {
		pr := Op{Client: migrationClient(w), Via: via(rng), Node: node, Kind: KindPreview}
		p, out := w.send(ctx, pr, []string{"converge", node, "--preview", "--json"})
		var pv report.ConvergePreview
		if err := json.Unmarshal([]byte(out), &pv); err == nil && pv.Converged {
			return true, "" // an earlier converge was carried out, its answer lost
		}
		if err := json.Unmarshal([]byte(out), &pv); err != nil || pv.Token == "" {
			last = fmt.Sprintf("preview #%d: %s %s", p.ID, p.Answer, p.Output)
			mg.pause(ctx)
			continue
		}
		o := Op{Client: migrationClient(w), Via: via(rng), Node: node, Kind: KindConverge}
		p = w.Send(ctx, o, []string{"converge", node, "--plan", pv.Token, "--wait", (w.Timeout / 2).String()})
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
