// Openings: the host's driver for the resource kind "opening" (ADR 0100). It plugs netfilter/
// into the reconciler; it knows no chain or rule, only what each mode of a node asks for.
//
// Every declared opening converges, on an adopted node as on a converged one, taken or not: an
// opening is a state, and assigning a module on an adopted node already needs its ports open
// through the found firewall — that is how ADR 0100's "assigning prepares" applies to openings.
// Taking a module changes nothing for its openings.

package openings

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"meshd/fsm"
	"meshd/host/pass"
	"meshd/netfilter"
	"meshd/report"
)

// MeshInterface is the mesh's WireGuard interface: the private network's side of this machine.
// Openings from "private" match it (and the private network's range), and the guard lets it
// through. A declaration that raises an interface (fsm.Declaration.Tunnel.Interface) names it
// there, and that name wins.
const MeshInterface = fsm.MeshInterface

// DefaultRecheck is the watch's timer: besides every change the kernel's packet filter reports
// (nftables events, raised by nft, iptables-nft and ufw over it), the last desired state is
// re-applied at least this often, which covers iptables-legacy (no events) and a lost event.
const DefaultRecheck = time.Second

// DefaultForwardFrom are the interfaces the derived filter lets forward out (containers reaching
// the network): the container runtime's bridges, its default one and every user-defined one.
var DefaultForwardFrom = netfilter.RuntimeBridges

// Config is how the agent builds the opening driver.
type Config struct {
	// Env is where the packet filter is; the zero Env is the machine itself. Env.StateDir should
	// be under the agent's data dir.
	Env netfilter.Env
	// Interface is the private network's interface; "" means MeshInterface.
	Interface string
	// Trusted are further interfaces the guard lets reach the guarded ports (besides loopback and
	// the private network's interface).
	Trusted []string
	// ForwardFrom are the interfaces the derived filter lets forward out; nil means
	// DefaultForwardFrom.
	ForwardFrom []string
	// Recheck is the watch's timer; zero means DefaultRecheck.
	Recheck time.Duration
	// Logger receives what the driver does; nil means slog.Default().
	Logger *slog.Logger
}

// Driver converges the declared openings (fsm.KindOpening). It is a host.Driver.
//
// On an adopted node the firewall found on the machine stays in force (ADR 0100): every opening
// goes through it in its own terms (firewall.Detect, again whenever firewall.Stamp moved, and
// firewall.NewDriver's Converge: meshd-marked rules, only those ever removed), and meshd loads
// only the refuse-only guard (netfilter.Guard), with the ports of every guarded opening, dropping
// traffic to them from anywhere but loopback and the private network's interface ahead of Docker's
// DNAT. meshd loads no table that accepts, or drops by default, on an adopted node. A found
// firewall of a kind meshd does not speak (firewalld, a ruleset it cannot read) fails every
// opening, naming it; refusing the adoption itself is genesis's and join's part. The guard is
// loaded all the same: it only refuses.
//
// On a converged node meshd's derived filter (netfilter.LoadFilter) carries every opening plus
// the mesh's own ports (bus, raft, gossip) from the private network; the guard is removed once the
// filter is in (the filter drops by default). This driver never retires the found firewall (the
// flip does); while the found firewall is still active, the openings also go through it, so the
// flip closes nothing that is declared. A retired (inactive) found firewall is not touched, so it
// can be restored exactly.
//
// The private network is netfilter.Private{Interface: Tunnel.Interface (else MeshInterface),
// Range: Tunnel.Range}.
//
// A reload or a reboot of the found firewall can drop the openings and, with nft's "flush
// ruleset", meshd's own tables too. So the first pass starts a watch (netfilter.Watch), stopped
// by Close or when that pass's context ends (restarted by the next pass), that re-applies the last
// desired state — openings, guard or filter — on every change of the packet filter and every
// Recheck, independently of the reconciler's timer: what a reload drops is back within 2 s, and
// the report says it was restored, and when.
//
// A pass with nothing to do writes nothing (every netfilter call reads first and writes only a
// difference) and reports Changes 0; at rest (nothing moved since an application that left
// everything in force: the desired state, firewall.Stamp, the watch monitor's mark) a pass and
// the watch's timer read the mark and the stamp and nothing else.
type Driver struct {
	pf          packetFilter
	iface       string
	trusted     []string
	forwardFrom []string
	recheck     time.Duration
	log         *slog.Logger

	mu    sync.Mutex // guards the parts below
	det   detection
	force applyState
	memo  restMemo
	watch watchLife
	flip  flipState
	// crasher is the process's crash point (the flip's and the return's points).
	crasher *pass.Crasher
}

// detection is the cache of the last detection of the found firewall, read again only when
// redetect is set or the packet filter's stamp moved.
type detection struct {
	found    netfilter.Found
	foundErr error
	detected bool
	redetect bool
	stamp    string // the packet filter's stamp read just before the last detection
	fw       netfilter.Driver
	fwKey    string
}

// applyState is what the driver put in force: the desired state it applied, each opening's and
// each table's memory.
type applyState struct {
	want        *desiredOpenings
	applied     string             // the key of the last desired state applied (to tell a restore from a change)
	states      map[string]*memory // by mark
	guard       tableMemory
	filter      tableMemory
	guardMaybe  bool // the guard's table may exist (unknown at start)
	filterMaybe bool
	bootKept    string // the desired state whose table was last kept for boot ("" none yet)
	lastApply   time.Time
}

// restMemo is the at-rest memo: changes counts what the watch's nftables monitor reported; rest
// is what the last application that left everything in force read before it began (restState).
type restMemo struct {
	changes netfilter.Changes
	rest    restState
}

// watchLife is the firewall watch's lifecycle, and how it wakes the host.
type watchLife struct {
	watchCancel context.CancelFunc
	watchDone   chan struct{}
	closed      bool
	// wake asks the host for a pass of the openings (set while the host watches for drift,
	// watchDrift): the watch calls it when an event changed what a detection reads, so the
	// report says so at once rather than at the next timer's pass.
	wake func(names ...string)
}

// flipState is the flip's (flip.go): the pending flip of the last declaration and the host's
// record of the found firewall it retired.
type flipState struct {
	intent  *fsm.FlipIntent
	retired *retiredRecord
}

// New returns the opening driver; nothing happens until the first Reconcile.
func New(cfg Config) *Driver {
	env := cfg.Env
	if env.Log == nil {
		env.Log = cfg.Logger
		if env.Log == nil {
			env.Log = slog.Default()
		}
	}
	return newDriver(cfg, kernelFilter{env: env})
}

func newDriver(cfg Config, pf packetFilter) *Driver {
	d := &Driver{pf: pf, iface: cfg.Interface, trusted: cfg.Trusted, forwardFrom: cfg.ForwardFrom,
		recheck: cfg.Recheck, log: cfg.Logger, force: applyState{states: map[string]*memory{}, guardMaybe: true, filterMaybe: true}}
	if d.iface == "" {
		d.iface = MeshInterface
	}
	if d.forwardFrom == nil {
		d.forwardFrom = DefaultForwardFrom
	}
	if d.recheck <= 0 {
		d.recheck = DefaultRecheck
	}
	if d.log == nil {
		d.log = slog.Default()
	}
	d.crasher = pass.NewCrasher(d.log)
	return d
}

// Kind implements Driver.
func (d *Driver) Kind() string { return fsm.KindOpening }

// Reconcile implements Driver.
func (d *Driver) Reconcile(ctx context.Context, ps pass.Pass) pass.Outcome {
	w := d.compose(ps.Declaration, ps.Resources)
	out, start := d.reconcileLocked(ctx, ps, w)
	if start {
		d.startWatch(ctx)
	}
	out.Detail = d.Status()
	return out
}

// reconcileLocked is a pass under d.mu (released however the pass ends, a crash point's panic in
// the unit tests included): the flip's steps around the application of w, and the errors.
// start says whether the watch is to be started.
func (d *Driver) reconcileLocked(ctx context.Context, ps pass.Pass, w *desiredOpenings) (pass.Outcome, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.force.want != nil && d.force.want.mode != w.mode {
		d.force.states = map[string]*memory{} // a new mode: what carries each opening changes
	}
	d.force.want = w
	d.flip.intent = nil
	if ps.Declaration != nil {
		d.flip.intent = ps.Declaration.Flip
	}
	// The found firewall may have changed kind or rules since the last pass: detect it again
	// when its stamp moved (the nftables ruleset's generation, its files), when no stamp stands
	// for it (iptables-legacy), or when the last detection failed. An unchanged machine is not
	// read again pass after pass (a detection lists every table and chain and runs
	// iptables-save).
	if s := d.pf.Stamp(ctx); s == "" || s != d.det.stamp || d.det.foundErr != nil {
		d.det.redetect = true
	}
	// The flip's order (flip.go): the return restores the found firewall before the guard and
	// the filter change; the flip retires it once the filter is in.
	var flipErr error
	changes := 0
	if rec, err := loadRetired(ps.Records); err == nil {
		d.flip.retired = rec
	}
	if w.mode == fsm.Adopted {
		changes, flipErr = d.restoreFound(ctx, ps.Records)
	}
	changes += d.apply(ctx, false, netfilter.Tick{})
	if w.mode == fsm.Converged {
		n, err := d.retireFound(ctx, ps.Records)
		changes, flipErr = changes+n, err
	}
	if rec, err := loadRetired(ps.Records); err == nil {
		d.flip.retired = rec
	} else if flipErr == nil {
		flipErr = err
	}
	out := pass.Outcome{Changes: changes}
	if flipErr != nil {
		out.Errors = append(out.Errors, report.ResourceError{Resource: "firewall:found", Reason: flipErr.Error()})
	}
	for _, e := range w.entries {
		if m := d.force.states[e.mark]; e.invalid != "" || (m != nil && m.state == report.OpeningFailed) {
			reason := e.invalid
			if reason == "" {
				reason = m.reason
			}
			out.Errors = append(out.Errors, report.ResourceError{Resource: e.res.ID(), Module: e.res.Module, Reason: reason})
		}
	}
	return out, d.watch.watchDone == nil && !d.watch.closed && ctx.Err() == nil
}

// Close stops the watch. meshd's rules and tables stay in force: an opening is a state.
func (d *Driver) Close() error {
	d.mu.Lock()
	d.watch.closed = true
	cancel, done := d.watch.watchCancel, d.watch.watchDone
	d.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	return nil
}
