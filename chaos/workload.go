package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"meshd/api"
	"meshd/lab"
)

// Workload sends operator commands to random nodes through the meshd CLI on random lab machines
// and records each in the history. Its choices come from its seed; its timings from the machine.
type Workload struct {
	Mesh    *Mesh
	History *History
	// Clients is how many send at once.
	Clients int
	// Seed makes the choices: client i draws from Seed+i.
	Seed int64
	// Timeout bounds one command (converge and adopt wait for at most half of it).
	Timeout time.Duration
	// Migration, when set, is p1's migration, walked beside the random clients.
	Migration *Migration

	values atomic.Int64 // each setting a value never set before, so a replay shows
}

// refusals are the record's refusals for what it holds: a command refused so was not applied.
var refusals = []string{"already assigned", "not assigned", "already taken", "the node is converged", "already adopted", "already converged", "already took"}

// notSent says the CLI reached no agent: nothing was sent, so nothing can have been applied.
const notSent = "no agent is listening"

// classify turns an exit code and the CLI's output into the answer the operator got.
func classify(code int, stdout, stderr string) Answer {
	if code == 0 {
		return Acked
	}
	if code == 1 {
		for _, r := range refusals {
			if strings.Contains(stderr, r) {
				return Refused
			}
		}
		if strings.Contains(stderr, notSent) {
			return NotSent
		}
	}
	// nsenter could not enter the machine (it is powered off, or booting and its disk not yet
	// mounted): meshd never ran.
	if strings.HasPrefix(strings.TrimSpace(stderr), "nsenter: ") {
		return NotSent
	}
	return Unknown
}

// Run runs the clients until ctx ends or stop is closed.
func (w *Workload) Run(ctx context.Context, stop <-chan struct{}) {
	var wg sync.WaitGroup
	for i := 0; i < w.Clients; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(w.Seed + int64(i)))
			for {
				select {
				case <-stop:
					return
				case <-ctx.Done():
					return
				default:
				}
				w.One(ctx, i, rng)
				select {
				case <-stop:
					return
				case <-ctx.Done():
					return
				case <-time.After(time.Duration(100+rng.Intn(400)) * time.Millisecond):
				}
			}
		}(i)
	}
	wg.Wait()
}

// One sends one random command from client i.
func (w *Workload) One(ctx context.Context, client int, rng *rand.Rand) {
	via := Nodes[rng.Intn(len(Nodes))]
	node := Nodes[rng.Intn(len(Nodes))]
	mod := Modules[rng.Intn(len(Modules))]
	if mod == "chaos-d" && !slices.Contains(Engines, node) {
		mod = "chaos-a"
	}
	o := Op{Client: client, Via: via, Node: node}
	var args []string
	switch r := rng.Intn(100); {
	case r < 18:
		o.Kind, o.Module, args = KindAssign, mod, []string{"module", "assign", node, mod}
	case r < 28:
		o.Kind, o.Module, args = KindUnassign, mod, []string{"module", "unassign", node, mod}
	case r < 42:
		o.Kind, o.Module, args = KindTake, mod, []string{"module", "take", node, mod, "--no-wait"}
	case r < 52:
		o.Kind, o.Key = KindSet, mod+".greeting"
		o.Value = fmt.Sprintf("g%d", w.values.Add(1))
		args = []string{"node", "set", node, o.Key + "=" + o.Value}
	case r < 57:
		// Converge and return only c1: the migration converges the hub, s2, s3 and p1 (each
		// previewed) and returns p1, in its order; c1 goes back and forth under the clients.
		o.Node, o.Kind = "c1", KindConverge
		args = []string{"converge", "c1", "--wait", (w.Timeout / 2).String()}
	case r < 62:
		o.Node, o.Kind = "c1", KindAdopt
		args = []string{"adopt", "c1", "--wait", (w.Timeout / 2).String()}
	case r < 66:
		o.Kind = KindToken
		args = []string{"token", "create", "--adopted", "--ttl", "5m"}
	default:
		o.Kind = KindRead
		args = []string{"node", "show", node, "--json"}
	}
	w.Send(ctx, o, args)
}

// Send runs one command on o.Via and records it.
func (w *Workload) Send(ctx context.Context, o Op, args []string) *Op {
	p, _ := w.send(ctx, o, args)
	return p
}

// send is Send that also returns the command's standard output.
func (w *Workload) send(ctx context.Context, o Op, args []string) (*Op, string) {
	o.Args = "meshd " + strings.Join(args, " ") + " (on " + o.Via + ")"
	p := w.History.Begin(o)
	cctx, cancel := context.WithTimeout(ctx, w.Timeout)
	defer cancel()
	stdout, stderr, code := w.Mesh.Meshd(cctx, o.Via, args...)
	a := classify(code, stdout, stderr)
	var read *NodeState
	if o.Kind == KindRead && a == Acked {
		var v api.NodeView
		if err := json.Unmarshal([]byte(stdout), &v); err != nil || v.Node == nil {
			a = Unknown
			stderr += fmt.Sprintf("\n(chaos: the answer is not a node view: %v)", err)
		} else {
			s := StateOf(v)
			read = &s
		}
	}
	out := strings.TrimSpace(stderr)
	if a != Acked && o.Kind != KindRead {
		out = strings.TrimSpace(stdout + "\n" + stderr)
	}
	if len(out) > 600 {
		out = out[:600] + "…"
	}
	w.History.End(p, a, out, read)
	return p, stdout
}

// Provoke sends the command that leads the agent on f.Machine to f.Point (an assign for a hold,
// a take for a take's points, an unassign for a removal, a converge or an adopt for a flip's or a
// return's), recorded like any other, as the workload's last client but one.
func (w *Workload) Provoke(ctx context.Context, f Fault) {
	node, via := f.Machine, Nodes[int(w.values.Load())%len(Nodes)]
	o := Op{Client: w.Clients + 1, Via: via, Node: node}
	var args []string
	switch {
	case strings.HasPrefix(f.Point, "hold."):
		o.Kind, o.Module, args = KindAssign, "chaos-a", []string{"module", "assign", node, "chaos-a"}
	case strings.HasPrefix(f.Point, "take.container."):
		// chaos-d's container is found on c1: assigned it is held, taken it is replaced.
		w.Send(ctx, Op{Client: o.Client, Via: via, Node: node, Kind: KindAssign, Module: "chaos-d"}, []string{"module", "assign", node, "chaos-d"})
		o.Kind, o.Module, args = KindTake, "chaos-d", []string{"module", "take", node, "chaos-d", "--no-wait"}
	case strings.HasPrefix(f.Point, "take."):
		// chaos-a replaces a found file: assigned (refused if it is), then taken (refused if it
		// is: a module is taken once); a new setting then rewrites its file, which passes the
		// write points of a take again.
		w.Send(ctx, Op{Client: o.Client, Via: via, Node: node, Kind: KindAssign, Module: "chaos-a"}, []string{"module", "assign", node, "chaos-a"})
		w.Send(ctx, Op{Client: o.Client, Via: via, Node: node, Kind: KindTake, Module: "chaos-a"}, []string{"module", "take", node, "chaos-a", "--no-wait"})
		time.Sleep(2 * w.Mesh.Interval)
		o.Kind, o.Key = KindSet, "chaos-a.greeting"
		o.Value = fmt.Sprintf("g%d", w.values.Add(1))
		args = []string{"node", "set", node, o.Key + "=" + o.Value}
	case strings.HasPrefix(f.Point, "unassign."):
		// chaos-b's file is created on assignment: assigned, created, then unassigned.
		w.Send(ctx, Op{Client: o.Client, Via: via, Node: node, Kind: KindAssign, Module: "chaos-b"}, []string{"module", "assign", node, "chaos-b"})
		time.Sleep(2 * w.Mesh.Interval)
		o.Kind, o.Module, args = KindUnassign, "chaos-b", []string{"module", "unassign", node, "chaos-b"}
	case strings.HasPrefix(f.Point, "flip."):
		o.Kind, args = KindConverge, []string{"converge", node, "--wait", (w.Timeout / 2).String()}
	case strings.HasPrefix(f.Point, "return."):
		o.Kind, args = KindAdopt, []string{"adopt", node, "--wait", (w.Timeout / 2).String()}
	case strings.HasPrefix(f.Point, "tunnel."):
		// p1's found tunnel taken over (refused once it is: a spoke's tunnel is taken once).
		o.Kind, args = KindTunnel, []string{"tunnel", "take", node, lab.TunnelIface, "--no-wait"}
	default:
		return
	}
	w.Send(ctx, o, args)
}

// ReadAll reads every node (AllNodes) through via and records the reads.
func (w *Workload) ReadAll(ctx context.Context, via string) map[string]NodeState {
	got := map[string]NodeState{}
	for _, n := range w.AllNodes() {
		p := w.Send(ctx, Op{Client: w.Clients, Via: via, Node: n, Kind: KindRead}, []string{"node", "show", n, "--json"})
		if p.Answer == Acked && p.Read != nil {
			got[n] = *p.Read
		}
	}
	return got
}
