package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"meshd/api"
	"meshd/lab"
	"meshd/netfilter"
)

// Config is one chaos run.
type Config struct {
	Seed int64
	// Duration is how long the workload runs under faults (the setup and the final checks come
	// on top).
	Duration time.Duration
	// Binary is the meshd binary put on every machine.
	Binary string
	// Out is the folder a failure is written to (created only on failure).
	Out string
	// Interval is the agents' reconcile interval (default 1s).
	Interval time.Duration
	// Logf says what happens (a test's t.Logf).
	Logf func(format string, args ...any)
}

// Run is a chaos run's outcome: every problem the checker found, the faults, what it measured.
type Run struct {
	Seed     int64
	Problems []string
	Faults   []Fault
	History  *History
	Init     map[string]NodeState
	Verdict  Verdict
	// Out is the failure folder, when one was written.
	Out string
	// Checks counts the linearizability checks made (one after each fault, one at the end).
	Checks int
	// Steps are the steps said to the lab: the migration's and each fault's.
	Steps []*Step
	// Outages are the figures of the probe through the tunnel, per step (the longest outage that
	// began in each), and every outage with the faults that excuse it.
	Outages OutageReport

	mu  sync.Mutex
	lab *lab.Lab
}

// step says to the lab (and the run's list) that a step begins now.
func (r *Run) step(name string) *Step {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := &Step{Name: name, At: int64(r.History.Since())}
	r.Steps = append(r.Steps, st)
	if r.lab != nil {
		_ = r.lab.Step(name)
	}
	return st
}

func (r *Run) problem(format string, args ...any) {
	r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
}

// Execute puts meshd on the (fresh) chaos lab l, runs the workload under the seeded scheduler's
// faults for c.Duration, heals everything and checks the invariants. The outcome lists every
// problem; with any, the history, the faults and each agent's log are in r.Out.
func Execute(ctx context.Context, l *lab.Lab, c Config) *Run {
	if c.Interval == 0 {
		c.Interval = time.Second
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	r := &Run{Seed: c.Seed, History: NewHistory(), lab: l}
	ms := &Mesh{Lab: l, Interval: c.Interval}
	ms.Step = func(name string) { r.step(name) }
	defer func() {
		if len(r.Problems) > 0 {
			r.Out = c.Out
			if err := r.write(l, c.Out); err != nil {
				r.problem("writing the failure folder %s: %v", c.Out, err)
			}
		}
	}()
	if err := ms.Genesis(ctx, c.Binary); err != nil {
		r.problem("the mesh did not come up: %v", err)
		return r
	}
	w := &Workload{Mesh: ms, History: r.History, Clients: 2, Seed: c.Seed, Timeout: 40 * time.Second}
	w.Migration = &Migration{W: w, Step: r.step, Aims: make(chan *Aim), Musts: make(chan *Aim)}
	in := &Injector{Lab: l, Servers: Servers, AgentArgs: ms.AgentArgs, Provoke: w.Provoke,
		Ready: func(m string) bool { return m != Peer || w.Migration.Enrolled() }}
	// The hub alone, before anything joins: read, then its tunnel taken under a fault.
	r.Init = map[string]NodeState{}
	if p := w.Send(ctx, Op{Client: w.Clients, Via: "hub", Node: "hub", Kind: KindRead}, []string{"node", "show", "hub", "--json"}); p.Read != nil {
		r.Init["hub"] = *p.Read
	} else {
		r.problem("could not read the hub after genesis: %s", p.Output)
		return r
	}
	if err := r.takeHubTunnel(ctx, ms, in, w, c); err != nil {
		r.problem("%v", err)
		return r
	}
	if len(r.Problems) > 0 {
		return r
	}
	if err := ms.Join(ctx); err != nil {
		r.problem("the mesh did not come up: %v", err)
		return r
	}
	// The joined nodes as they are before the workload (the model's start for them; the hub's
	// history began before).
	for n, s := range w.ReadAll(ctx, "hub") {
		if n != "hub" {
			r.Init[n] = s
		}
	}
	if len(r.Init) != len(Nodes) {
		r.problem("could not read every node before the workload: %v", r.Init)
		return r
	}
	c.Logf("chaos seed %d: workload for %s, %d clients and the migration of p1, faults from the same seed", c.Seed, c.Duration, w.Clients)
	r.step("the workload begins")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); w.Run(ctx, stop) }()
	go func() { defer wg.Done(); w.Migration.Run(ctx, stop) }()

	r.schedule(ctx, ms, in, w, c)
	close(stop)
	wg.Wait()
	in.Wait()
	r.final(ctx, ms, in, w, c)
	return r
}

// schedule injects faults one after another, at seeded random moments, until c.Duration has
// passed and p1's migration is done (at most migrationGrace more); after each it heals, waits for
// a leader and checks every invariant that holds mid-run (see midRun).
func (r *Run) schedule(ctx context.Context, ms *Mesh, in *Injector, w *Workload, c Config) {
	rng := rand.New(rand.NewSource(c.Seed ^ 0x5eed))
	end := time.Now().Add(c.Duration)
	more := func() bool {
		now := time.Now()
		return now.Before(end) || (!w.Migration.Done() && now.Before(end.Add(migrationGrace)))
	}
	for more() && ctx.Err() == nil {
		wait, f, hold := NextFault(rng)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
			if f.Aim && !w.Migration.Done() {
				r.aim(ctx, w.Migration, &f)
			}
		case a := <-w.Migration.Musts:
			// The hub's flip waits for a fault: the one drawn strikes it, at once.
			f.Aim = true
			r.aimAt(ctx, &f, a)
		}
		fctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		r.step(fmt.Sprintf("fault %d: %s %s", len(r.Faults)+1, f.Kind, f.Machine))
		in.Inject(fctx, &f, hold, r.History.Since)
		if (f.Kind == FaultStop || f.Kind == FaultReboot) && (f.Machine != Peer || w.Migration.Enrolled()) {
			r.openingsBack(fctx, ms, &f)
		}
		cancel()
		r.Faults = append(r.Faults, f)
		r.step(fmt.Sprintf("fault %d healed", len(r.Faults)))
		c.Logf("fault %d at %s: %s", len(r.Faults), time.Duration(f.Begin).Round(time.Millisecond), f)
		if f.Err != "" {
			r.problem("fault %s: %s", f, f.Err)
			return
		}
		if err := r.awaitLeader(ctx, ms); err != nil {
			r.problem("after fault %s: %v", f, err)
			return
		}
		when := "after fault " + f.String()
		r.check(ops(r.History), when)
		r.midRun(ctx, ms, w, when)
		if len(r.Problems) > 0 {
			return
		}
	}
}

// migrationGrace is how long the workload goes on past its duration for p1's migration (and
// the hub's convergence) to be done, so a short run walks it whole.
const migrationGrace = 60 * time.Second

// aimWait bounds how long an aimed fault waits for the migration's next step.
const aimWait = 15 * time.Second

// aim waits (up to aimWait) for the migration's next step and points f at it: the node the step
// acts on, and for a crash a point inside what the step does (picked by f's own draw). A crash
// is armed before the step's command is sent (the step waits); any other fault lands f.lag after
// it. With no step coming, f strikes the machine it drew.
func (r *Run) aim(ctx context.Context, mg *Migration, f *Fault) {
	var a *Aim
	select {
	case a = <-mg.Aims:
	case a = <-mg.Musts:
	case <-time.After(aimWait):
		return
	case <-ctx.Done():
		return
	}
	r.aimAt(ctx, f, a)
}

// aimAt points f at step a (see aim). A partition strikes the step's node when it is a server.
func (r *Run) aimAt(ctx context.Context, f *Fault, a *Aim) {
	f.AimedAt = a.Step
	if f.Kind != FaultPartition || slices.Contains(Servers, a.Node) {
		f.Machine = a.Node
	}
	if f.Kind == FaultCrash {
		if pts := aimedPoints(a); len(pts) > 0 {
			f.Point = pts[f.pick%len(pts)]
		}
		f.armed = a.Armed
		return
	}
	close(a.Armed)
	select {
	case <-time.After(f.lag):
	case <-ctx.Done():
	}
}

// aimedPoints are the crash points inside what a migration step does: a tunnel takeover, a hold
// (an assign of what is found), a take (the hub's is chaos-svc, a container; p1's are files), a
// flip, a return.
func aimedPoints(a *Aim) []string {
	prefix := map[Kind]string{KindTunnel: "tunnel.", KindAssign: "hold.", KindTake: "take.", KindConverge: "flip.", KindAdopt: "return."}[a.Kind]
	var out []string
	for _, p := range CrashPoints {
		if !strings.HasPrefix(p, prefix) {
			continue
		}
		if a.Kind == KindTake && strings.HasPrefix(p, "take.container.") != (a.Node == "hub") {
			continue
		}
		out = append(out, p)
	}
	return out
}

func ops(h *History) []Op { return h.Ops() }

// NextFault draws the scheduler's next fault from rng: how long to wait before it, the fault
// (kind, machine, crash point, whether it is aimed at the migration's next step) and how long to
// hold it. The same seed draws the same faults. Every fault but a partition (a server's) may
// strike p1 as well as the four nodes raised at the start.
func NextFault(rng *rand.Rand) (wait time.Duration, f Fault, hold time.Duration) {
	kinds := []FaultKind{FaultKill, FaultStop, FaultReboot, FaultCut, FaultPartition, FaultCrash, FaultCrash}
	machines := append(slices.Clone(Nodes), Peer)
	wait = time.Duration(2000+rng.Intn(4000)) * time.Millisecond
	f = Fault{Kind: kinds[rng.Intn(len(kinds))]}
	switch f.Kind {
	case FaultPartition:
		f.Machine = Servers[rng.Intn(len(Servers))]
	default:
		f.Machine = machines[rng.Intn(len(machines))]
	}
	hold = time.Duration(1000+rng.Intn(5000)) * time.Millisecond
	// Drawn for every fault, used or not, so each fault takes the same draws from rng.
	aim, pick, lag := rng.Intn(3) == 0, rng.Intn(1<<20), time.Duration(rng.Intn(1500))*time.Millisecond
	f.Aim, f.pick, f.lag = aim && f.Kind != FaultPartition, pick, lag
	if f.Kind == FaultCrash {
		f.Point = CrashPoints[rng.Intn(len(CrashPoints))]
		if strings.HasPrefix(f.Point, "flip.") || strings.HasPrefix(f.Point, "return.") || strings.HasPrefix(f.Point, "take.container.") {
			f.Machine = "c1" // the random clients converge and return only c1, and chaos-d is found there
		}
		if strings.HasPrefix(f.Point, "tunnel.") {
			f.Machine = Peer // the tunnel taken over during the workload is p1's
		}
		hold += 6 * time.Second // time for the provoked command to reach the point
	}
	return wait, f, hold
}

// openingsBack measures how long after a rebooted machine's agent started (the end of its boot,
// which starts meshd last) meshd's own table is back in its kernel: the derived filter on a node
// the record has converged, the guard on the hub while it is adopted. It must be within one
// reconcile, plus the agent's own start (up to agentStart).
func (r *Run) openingsBack(ctx context.Context, ms *Mesh, f *Fault) {
	var v api.NodeView
	asked := 0
	if err := poll(ctx, 30*time.Second, func() error {
		// Asked of a server that is not the one just booted (its agent is only starting).
		s := Servers[asked%len(Servers)]
		asked++
		if s == f.Machine {
			return errors.New("the booted machine")
		}
		var err error
		v, err = ms.NodeView(ctx, s, f.Machine)
		return err
	}); err != nil {
		r.problem("after %s: could not read node %s: %v", f, f.Machine, err)
		return
	}
	var table string
	switch {
	case v.Node.Flip != nil:
		return // a flip pending: which table is in force is the flip's to say
	case v.Node.Mode == "converged":
		table = netfilter.FilterTable
	case f.Machine == "hub":
		table = netfilter.GuardTable
	default:
		return // adopted (its found firewall is the boot's): nothing of meshd's to wait for
	}
	r.tableBack(ctx, ms, f, table)
}

// tableBack measures how long after the boot ended table is back in f.Machine's kernel, and holds
// it to the agent's start plus one reconcile.
func (r *Run) tableBack(ctx context.Context, ms *Mesh, f *Fault, table string) {
	m := ms.Lab.Machine(f.Machine)
	booted := time.Now()
	err := poll(ctx, 60*time.Second, func() error {
		_, err := m.Exec(ctx, "nft", "list", "table", "inet", table)
		return err
	})
	back := time.Since(booted)
	f.Back = back.Round(time.Millisecond).String()
	f.Detail = "table inet " + table
	if err != nil {
		r.problem("after %s: table inet %s is not back on %s after %s: %v", f, table, f.Machine, back.Round(time.Millisecond), err)
		return
	}
	if limit := agentStart + ms.Interval; back > limit {
		r.problem("after %s: table inet %s came back on %s %s after its agent started, more than one reconcile (%s) beyond the agent's start (%s)",
			f, table, f.Machine, back.Round(time.Millisecond), ms.Interval, agentStart)
	}
}

// agentStart bounds an agent's start (opening its record store and Raft, reading the
// declaration) before its first reconcile.
const agentStart = 10 * time.Second

// awaitLeader waits until some server answers status with a leader.
func (r *Run) awaitLeader(ctx context.Context, ms *Mesh) error {
	return poll(ctx, 90*time.Second, func() error {
		var errs []string
		for _, s := range Servers {
			st, err := ms.Status(ctx, s)
			if err == nil && st.Leader.Node != "" {
				return nil
			}
			if err != nil {
				errs = append(errs, err.Error())
			}
		}
		return fmt.Errorf("no server answers with a leader: %s", strings.Join(errs, "; "))
	})
}

// check runs porcupine over the history so far (a running command counts as unknown).
func (r *Run) check(ops []Op, when string) {
	r.Checks++
	v := Check(r.Init, ops, 60*time.Second)
	r.Verdict = v
	switch v.Result {
	case porcupine.Illegal:
		r.problem("%s: the history is not linearizable against the record's model (an acknowledged command lost, or one applied twice): see history.html", when)
	case porcupine.Unknown:
		r.problem("%s: the linearizability check ran out of time", when)
	}
}

// final heals what is left, waits for the group, stops the workload's effects settling, and
// checks every end-of-run invariant.
func (r *Run) final(ctx context.Context, ms *Mesh, in *Injector, w *Workload, c Config) {
	r.step("the end: everything healed")
	nodes := w.AllNodes()
	for _, n := range nodes {
		if !in.AgentRunning(n) {
			if err := in.StartAgent(ctx, n, ""); err != nil {
				r.problem("starting %s's agent at the end: %v", n, err)
			}
		}
	}
	if err := r.awaitLeader(ctx, ms); err != nil {
		r.problem("at the end: %v", err)
		return
	}
	// Every node's flip, if one is pending, carried out: the record's mode is the one asked for.
	for _, n := range nodes {
		if err := poll(ctx, 2*time.Minute, func() error {
			v, err := ms.NodeView(ctx, "hub", n)
			if err != nil {
				return err
			}
			if v.Node.Flip != nil {
				return fmt.Errorf("node %s: a flip to %s is still pending", n, v.Node.Flip.To)
			}
			if v.Report == nil {
				return fmt.Errorf("node %s: no report from its machine", n)
			}
			if v.Report.Mode != v.Node.Mode {
				return fmt.Errorf("node %s: its machine says mode %s, the record %s", n, v.Report.Mode, v.Node.Mode)
			}
			return nil
		}); err != nil {
			r.problem("at the end: %v", err)
		}
	}
	final := w.ReadAll(ctx, "hub")
	r.check(ops(r.History), "at the end")
	if len(final) != len(nodes) {
		r.problem("at the end: could not read every node: read %d of %d", len(final), len(nodes))
	}
	r.settled(ctx, ms, nodes)
	r.heldFiles(ctx, ms, final, nodes, "at the end")
	r.probes(ms, "at the end")
	r.migrated(w, c)
	r.tunnelOutages(ms, c)
	c.Logf("chaos seed %d: %d commands (%s), %d faults, %d checks", c.Seed, len(r.History.Ops()), answers(r.History.Ops()), len(r.Faults), r.Checks)
}

// settled checks that every node's machine agrees with its declaration: a pass after everything
// settled writes nothing (its report counts no changes).
func (r *Run) settled(ctx context.Context, ms *Mesh, nodes []string) {
	for _, n := range nodes {
		since := time.Now()
		var last string
		err := poll(ctx, 60*time.Second, func() error {
			v, err := ms.NodeView(ctx, "hub", n)
			if err != nil {
				return err
			}
			if v.Report == nil || !v.Report.When.After(since) {
				return errors.New("no report since the check began")
			}
			last = fmt.Sprintf("changes %d, errors %v", v.Report.Changes, v.Report.Errors)
			if v.Report.Changes != 0 {
				since = v.Report.When // a pass that wrote: the next must write nothing
				return fmt.Errorf("node %s: its last pass wrote (%s)", n, last)
			}
			return nil
		})
		if err != nil {
			r.problem("at the end: node %s never made a pass that writes nothing (the same pass twice must write nothing): %v", n, err)
		}
	}
}

// midRun checks, after a fault healed, the invariants that hold at every moment, not only once
// everything settled: outside never reached the store (at any call so far), the service through
// the tunnel had no outage that no fault explains beyond the gap a take implies, and every found
// file is there, its recorded original byte for byte what was found, and unchanged where its
// module was never (possibly) taken. The mode each node ends in and a pass that writes nothing
// are the end's: mid-run a flip may be pending and the workload's next command on its way.
func (r *Run) midRun(ctx context.Context, ms *Mesh, w *Workload, when string) {
	r.probes(ms, when)
	r.tunnelOutagesSoFar(ms, when)
	r.heldFiles(ctx, ms, nil, w.AllNodes(), when)
}

// heldFiles checks that a found file was never removed, that its recorded original is byte for
// byte what was found, and that on a node where its module was never taken it is still what was
// found (held, never reverted; a node enrolled converged takes what is assigned at once). final, when given, is every node as last read (the end's check);
// an original is asked for until the node's agent answers (it may be starting after a fault).
func (r *Run) heldFiles(ctx context.Context, ms *Mesh, final map[string]NodeState, nodes []string, when string) {
	mayTake := map[string]bool{}
	for _, o := range r.History.Ops() {
		if o.Answer == Refused || o.Answer == NotSent {
			continue
		}
		if (o.Kind == KindTake && o.Module == "chaos-a") || o.Kind == KindConverge {
			mayTake[o.Node] = true
		}
	}
	// A node enrolled converged (s3) takes every module assigned to it: its found file is
	// recorded, then replaced, with no take of its own in the history.
	for n, st := range r.Init {
		if st.Mode == "converged" {
			mayTake[n] = true
		}
	}
	for _, n := range nodes {
		m := ms.Lab.Machine(n)
		got, err := m.ReadFile(ctx, HeldPath)
		if err != nil {
			r.problem("%s: node %s: the found file %s is gone: %v", when, n, HeldPath, err)
			continue
		}
		if st, ok := final[n]; ok && slices.Contains(st.Taken, "chaos-a") {
			mayTake[n] = true
		}
		if !mayTake[n] && string(got) != string(FoundContent(n)) {
			r.problem("%s: node %s: %s was never taken, yet it is %q, not what was found (%q)", when, n, HeldPath, got, FoundContent(n))
		}
		// A node's originals are in its own record store: asked on the node.
		assigned := wasAssigned(r.History.Ops(), n)
		var out, errs string
		code := -1
		_ = poll(ctx, 30*time.Second, func() error {
			out, errs, code = ms.Meshd(ctx, n, "node", "original", n, HeldPath)
			if code != 0 && assigned {
				return errors.New(errs)
			}
			return nil
		})
		switch {
		case code == 0 && out != string(FoundContent(n)):
			r.problem("%s: node %s: the recorded original of %s is %q, not what was found (%q)", when, n, HeldPath, out, FoundContent(n))
		case code != 0 && assigned:
			r.problem("%s: node %s: chaos-a was assigned there, yet no original of %s is recorded: %s", when, n, HeldPath, strings.TrimSpace(errs))
		}
	}
}

// wasAssigned says whether chaos-a was acknowledged assigned on node at some time.
func wasAssigned(ops []Op, node string) bool {
	for _, o := range ops {
		if o.Kind == KindAssign && o.Module == "chaos-a" && o.Node == node && o.Answer == Acked {
			return true
		}
	}
	return false
}

// probes checks that outside never reached the store, over IPv4 or IPv6, at any call; a breach
// is named with the windows it was reachable in, on the history's clock, beside the faults.
func (r *Run) probes(ms *Mesh, when string) {
	for _, name := range []string{"outside-store", "outside-store6"} {
		s, err := ms.Lab.Probe(name, time.Time{})
		if err != nil {
			r.problem("probe %s: %v", name, err)
			continue
		}
		if !s.Holds() {
			r.problem("%s: probe %s: outside reached the store (%d of %d calls) at %s", when, name, s.Successes, s.Calls,
				r.windows(filepath.Join(ms.Lab.Dir, "probes", name+".log")))
		}
	}
}

// windows reads a probe's record and says when its calls succeeded: each run of successive
// successful calls as +FROM..+TO since the history began.
func (r *Run) windows(record string) string {
	b, err := os.ReadFile(record)
	if err != nil {
		return err.Error()
	}
	var out []string
	var from, to time.Time
	flush := func() {
		if !from.IsZero() {
			out = append(out, fmt.Sprintf("+%s..+%s", r.History.At(from), r.History.At(to)))
		}
		from = time.Time{}
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.SplitN(line, " ", 3)
		if len(f) < 2 {
			continue
		}
		ts, err := time.Parse(time.RFC3339Nano, f[0])
		if err != nil {
			continue
		}
		if f[1] == "ok" {
			if from.IsZero() {
				from = ts
			}
			to = ts
		} else {
			flush()
		}
	}
	flush()
	return strings.Join(out, ", ")
}

func answers(ops []Op) string {
	n := map[Answer]int{}
	for _, o := range ops {
		n[o.Answer]++
	}
	return fmt.Sprintf("%d acked, %d refused, %d unknown, %d not sent", n[Acked], n[Refused], n[Unknown], n[NotSent])
}

// write puts the failure folder together: the problems, the history (JSON and porcupine's HTML
// view), the faults, the start state, the probes' summaries and each machine's agent log.
func (r *Run) write(l *lab.Lab, dir string) error {
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return err
	}
	var errs []error
	put := func(name string, v any) {
		b, err := json.MarshalIndent(v, "", "  ")
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name), b, 0o644)
		}
		errs = append(errs, err)
	}
	summary := fmt.Sprintf("seed %d\nreplay: make chaos SEED=%d\n\nproblems:\n  %s\n\nfaults:\n", r.Seed, r.Seed, strings.Join(r.Problems, "\n  "))
	for i, f := range r.Faults {
		summary += fmt.Sprintf("  %d. at %s: %s\n", i+1, time.Duration(f.Begin).Round(time.Millisecond), f)
	}
	errs = append(errs, os.WriteFile(filepath.Join(dir, "summary.txt"), []byte(summary), 0o644))
	h, err := r.History.JSON()
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "history.json"), h, 0o644)
	}
	errs = append(errs, err)
	put("faults.json", r.Faults)
	put("init.json", r.Init)
	put("steps.json", r.Steps)
	put("outages.json", r.Outages)
	errs = append(errs, os.WriteFile(filepath.Join(dir, "outages.txt"), []byte(r.Outages.Table), 0o644))
	if probes, err := l.Probes(); err == nil {
		put("probes.json", probes)
	}
	if r.Verdict.model.Init != nil {
		errs = append(errs, r.Verdict.Visualize(filepath.Join(dir, "history.html")))
	}
	if recs, err := filepath.Glob(filepath.Join(l.Dir, "probes", "*.log")); err == nil {
		for _, rec := range recs {
			if b, err := os.ReadFile(rec); err == nil {
				errs = append(errs, os.WriteFile(filepath.Join(dir, "logs", "probe-"+filepath.Base(rec)), b, 0o644))
			}
		}
	}
	for _, m := range l.Machines() {
		if b, err := os.ReadFile(filepath.Join(m.Dir(), "log", "meshd.log")); err == nil {
			errs = append(errs, os.WriteFile(filepath.Join(dir, "logs", m.Name+"-meshd.log"), b, 0o644))
		}
	}
	return errors.Join(errs...)
}
