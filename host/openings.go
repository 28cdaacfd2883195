// Openings: the host's driver for the resource kind "opening" (ADR 0100). It plugs netfilter/
// into the reconciler; it knows no chain or rule, only what each mode of a node asks for.
//
// Every declared opening converges, on an adopted node as on a converged one, taken or not: an
// opening is a state, and assigning a module on an adopted node already needs its ports open
// through the found firewall — that is how ADR 0100's "assigning prepares" applies to openings.
// Taking a module changes nothing for its openings.

package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"

	"meshd/catalogue"
	"meshd/fsm"
	"meshd/netfilter"
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

// packetFilter is what the opening driver needs of the machine's packet filter, in the driver's
// terms: kernelFilter is the real one (netfilter/ on the machine); the unit tests put an in-memory
// fake in its place.
type packetFilter interface {
	// Detect reads the found firewall; an error matching netfilter.ErrUnsupported names one
	// meshd does not speak.
	Detect(ctx context.Context) (netfilter.Found, error)
	// Stamp is a cheap read of what Detect depends on (netfilter.Stamp): equal stamps, the
	// same answer; "" when no stamp stands for the firewall (Detect must read it again).
	Stamp(ctx context.Context) string
	// NewDriver speaks the found firewall: its Converge makes its meshd-marked rules the
	// declared openings.
	NewDriver(found netfilter.Found, priv netfilter.Private) (netfilter.Driver, error)
	// Guard loads the refuse-only guard; wrote says whether it had to be written.
	Guard(ctx context.Context, spec netfilter.GuardSpec) (wrote bool, err error)
	RemoveGuard(ctx context.Context) error
	// LoadFilter loads the derived filter; wrote says whether it had to be written.
	LoadFilter(ctx context.Context, spec netfilter.FilterSpec) (wrote bool, err error)
	RemoveFilter(ctx context.Context) error
	// Watch calls recheck on every change of the packet filter and every interval until ctx
	// ends, saying which (netfilter.Tick), and counts the changes its monitor reported in
	// changes.
	Watch(ctx context.Context, interval time.Duration, changes *netfilter.Changes, recheck func(context.Context, netfilter.Tick)) error
	// Retire disables the found firewall, never flushing it; Restore gives a retired one back;
	// Saved is what Retire saved before it removed anything (a found nftables ruleset's dumps).
	Retire(ctx context.Context, found netfilter.Found) (netfilter.Retired, error)
	Restore(ctx context.Context, r netfilter.Retired) error
	Saved() (netfilter.Retired, error)
	// KeepForBoot keeps the table just loaded where `meshd boot` finds it at the next boot;
	// wrote says whether it had to be written.
	KeepForBoot(t netfilter.BootTables) (wrote bool, err error)
}

// kernelFilter is the machine's packet filter through netfilter/, in env.
type kernelFilter struct{ env netfilter.Env }

func (k kernelFilter) Detect(ctx context.Context) (netfilter.Found, error) {
	return netfilter.Detect(ctx, k.env)
}

func (k kernelFilter) Stamp(ctx context.Context) string { return netfilter.Stamp(ctx, k.env) }

func (k kernelFilter) NewDriver(found netfilter.Found, priv netfilter.Private) (netfilter.Driver, error) {
	return netfilter.NewDriver(k.env, found, priv)
}

func (k kernelFilter) Guard(ctx context.Context, spec netfilter.GuardSpec) (bool, error) {
	return netfilter.Guard(ctx, k.env, spec)
}

func (k kernelFilter) RemoveGuard(ctx context.Context) error {
	return netfilter.RemoveGuard(ctx, k.env)
}

func (k kernelFilter) LoadFilter(ctx context.Context, spec netfilter.FilterSpec) (bool, error) {
	return netfilter.LoadFilter(ctx, k.env, spec)
}

func (k kernelFilter) RemoveFilter(ctx context.Context) error {
	return netfilter.RemoveFilter(ctx, k.env)
}

func (k kernelFilter) KeepForBoot(t netfilter.BootTables) (bool, error) {
	return netfilter.KeepForBoot(k.env, t)
}

func (k kernelFilter) Retire(ctx context.Context, found netfilter.Found) (netfilter.Retired, error) {
	return netfilter.Retire(ctx, k.env, found)
}

func (k kernelFilter) Restore(ctx context.Context, r netfilter.Retired) error {
	return netfilter.Restore(ctx, k.env, r)
}

func (k kernelFilter) Saved() (netfilter.Retired, error) {
	if k.env.StateDir == "" {
		return netfilter.Retired{}, fmt.Errorf("no state directory: nothing was saved")
	}
	return netfilter.LoadRetired(k.env.StateDir)
}

func (k kernelFilter) Watch(ctx context.Context, interval time.Duration, changes *netfilter.Changes, recheck func(context.Context, netfilter.Tick)) error {
	return netfilter.WatchChanges(ctx, k.env, interval, changes, recheck)
}

// OpeningConfig is how the agent builds the opening driver.
type OpeningConfig struct {
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

// OpeningDriver converges the declared openings (fsm.KindOpening). It is a host.Driver.
//
// On an adopted node the firewall found on the machine stays in force (ADR 0100): every opening
// goes through it in its own terms (netfilter.Detect, again whenever netfilter.Stamp moved, and netfilter.NewDriver's
// Converge: meshd-marked rules, only those ever removed), and meshd loads only the refuse-only
// guard (netfilter.Guard), with the ports of every guarded opening, dropping traffic to them from
// anywhere but loopback and the private network's interface ahead of Docker's DNAT. meshd loads no
// table that accepts, or drops by default, on an adopted node. A found firewall of a kind meshd
// does not speak (firewalld, a ruleset it cannot read) fails every opening, naming it; refusing
// the adoption itself is genesis's and join's part. The guard is loaded all the same: it only
// refuses.
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
// everything in force: the desired state, netfilter.Stamp, the watch monitor's mark) a pass and
// the watch's timer read the mark and the stamp and nothing else.
type OpeningDriver struct {
	pf          packetFilter
	iface       string
	trusted     []string
	forwardFrom []string
	recheck     time.Duration
	log         *slog.Logger

	mu          sync.Mutex
	want        *desiredOpenings
	applied     string // the key of the last desired state applied (to tell a restore from a change)
	found       netfilter.Found
	foundErr    error
	detected    bool
	redetect    bool
	stamp       string // the packet filter's stamp read just before the last detection
	fw          netfilter.Driver
	fwKey       string
	states      map[string]*openingMemory // by mark
	guard       tableMemory
	filter      tableMemory
	guardMaybe  bool // the guard's table may exist (unknown at start)
	filterMaybe bool
	bootKept    string // the desired state whose table was last kept for boot ("" none yet)
	lastApply   time.Time
	// changes counts what the watch's nftables monitor reported; rest is what the last
	// application that left everything in force read before it began (restState).
	changes netfilter.Changes
	rest    restState

	watchCancel context.CancelFunc
	watchDone   chan struct{}
	closed      bool
	// wake asks the host for a pass of the openings (set while the host watches for drift,
	// watchDrift): the watch calls it when an event changed what a detection reads, so the
	// report says so at once rather than at the next timer's pass.
	wake func(names ...string)

	// The flip (flip.go): the pending flip of the last declaration, the host's record of the
	// found firewall it retired, and the process's crash point.
	flip    *fsm.FlipIntent
	retired *retiredRecord
	crasher *crasher
}

// NewOpeningDriver returns the opening driver; nothing happens until the first Reconcile.
func NewOpeningDriver(cfg OpeningConfig) *OpeningDriver {
	env := cfg.Env
	if env.Log == nil {
		env.Log = cfg.Logger
		if env.Log == nil {
			env.Log = slog.Default()
		}
	}
	return newOpeningDriver(cfg, kernelFilter{env: env})
}

func newOpeningDriver(cfg OpeningConfig, pf packetFilter) *OpeningDriver {
	d := &OpeningDriver{pf: pf, iface: cfg.Interface, trusted: cfg.Trusted, forwardFrom: cfg.ForwardFrom,
		recheck: cfg.Recheck, log: cfg.Logger, states: map[string]*openingMemory{}, guardMaybe: true, filterMaybe: true}
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
	d.crasher = newCrasher(d.log)
	return d
}

// Kind implements Driver.
func (d *OpeningDriver) Kind() string { return fsm.KindOpening }

// Opening states as the report shows them.
const (
	OpeningInForce  = "in force"
	OpeningRestored = "restored"
	OpeningFailed   = "failed"
)

// OpeningDetail is the driver's part of the host report (Report.Kinds["opening"]).
type OpeningDetail struct {
	Mode     fsm.Mode      `json:"mode"`
	Firewall FirewallView  `json:"firewall"`
	Private  string        `json:"private"`
	Openings []OpeningView `json:"openings"`
	// Guard is meshd's refuse-only table on an adopted node; Filter its derived filter on a
	// converged one.
	Guard  *TableView `json:"guard,omitempty"`
	Filter *TableView `json:"filter,omitempty"`
	// Watch says how a reload of the found firewall is noticed.
	Watch string `json:"watch"`
	// Flip is the pending flip as this node carries it out (nil: none); Retired the found
	// firewall meshd retired here (nil: none retired).
	Flip    *FlipView    `json:"flip,omitempty"`
	Retired *RetiredView `json:"retired,omitempty"`
	// Applied is when the desired state was last re-read against the machine (by a pass or the
	// watch).
	Applied time.Time `json:"applied,omitzero"`
}

// FirewallView is the firewall found on the machine.
type FirewallView struct {
	Kind string `json:"kind"`
	// Description is netfilter.Found's one line: kind, backend, active, rule counts, config.
	Description string `json:"description"`
	// Refused is why meshd cannot speak it (firewalld, unreadable), naming it.
	Refused string `json:"refused,omitempty"`
	// Config is where its configuration lives; Tables are a found nftables ruleset's own
	// tables ("inet filter"): what the flip moves aside.
	Config string   `json:"config,omitempty"`
	Tables []string `json:"tables,omitempty"`
	// Retired is true once meshd retired this firewall (the host's flip record says so, not a
	// detection): Kind is then the kind it was found as, Description says it is retired, and
	// Detected is what a detection reads on the machine now (what the retired firewall left
	// behind and the container engine's rules), for the operator to compare.
	Retired  bool   `json:"retired,omitempty"`
	Detected string `json:"detected,omitempty"`
	// ActiveAgain is true when a retired firewall is read active again as the kind it was
	// found as (`ufw enable`, its nftables or iptables rules loaded by hand): it filters beside
	// meshd's filter, and what it drops stays dropped whatever meshd's filter accepts.
	ActiveAgain bool `json:"active_again,omitempty"`
}

// retiredFirewall is the found firewall as the host's record of its retirement describes it:
// by the kind it was found as, retired, its configuration on disk; now is what a detection reads
// on the machine since (a disabled ufw leaves iptables rules; Docker's stay); again says that
// detection reads it active again, as the kind it was found as.
func retiredFirewall(rec *retiredRecord, now string, again bool) FirewallView {
	name := string(rec.Kind)
	if rec.Kind == netfilter.KindIptables && rec.State.Backend != "" {
		name += " over iptables-" + rec.State.Backend
	}
	how := "disabled, its files on disk"
	switch rec.Kind {
	case netfilter.KindNftables:
		how = "its tables saved and moved aside, its files on disk"
	case netfilter.KindIptables:
		how = "its rules saved and removed, its files on disk"
	}
	desc := name + ", retired (" + how + ")"
	if again {
		desc += "; ACTIVE AGAIN: enabled by something else since meshd retired it, it filters beside meshd's filter (retire it again by hand, or return the node with meshd adopt)"
	}
	return FirewallView{Kind: string(rec.Kind), Description: desc, Config: rec.State.Config, Tables: rec.State.Tables, Retired: true, Detected: now, ActiveAgain: again}
}

// OpeningView is one declared opening and what became of it.
type OpeningView struct {
	Resource string `json:"resource"`
	Module   string `json:"module"`
	Taken    bool   `json:"taken"`
	Guarded  bool   `json:"guarded,omitempty"`
	Opening  string `json:"opening"`
	// Through says what carries it: the found firewall, meshd's filter, or both.
	Through string `json:"through,omitempty"`
	// State is OpeningInForce, OpeningRestored (in force again after something dropped it, at
	// RestoredAt) or OpeningFailed (Reason says why).
	State      string    `json:"state"`
	Since      time.Time `json:"since,omitzero"`
	RestoredAt time.Time `json:"restored_at,omitzero"`
	Reason     string    `json:"reason,omitempty"`
}

// TableView is one of meshd's own tables.
type TableView struct {
	Table string `json:"table"`
	// State is "loaded", "restored" (loaded again after something removed it, at RestoredAt),
	// "failed" or "removed".
	State      string    `json:"state"`
	Ports      []string  `json:"ports"`
	Since      time.Time `json:"since,omitzero"`
	RestoredAt time.Time `json:"restored_at,omitzero"`
	Reason     string    `json:"reason,omitempty"`
}

// desiredOpenings is what the last declaration asks of the packet filter.
type desiredOpenings struct {
	mode     fsm.Mode
	entries  []openingEntry
	openings []netfilter.Opening // the valid ones, for the found firewall
	priv     netfilter.Private
	privNote string
	guard    netfilter.GuardSpec
	filter   netfilter.FilterSpec
	key      string
}

type openingEntry struct {
	res     fsm.Resource
	o       netfilter.Opening
	mark    string
	invalid string
}

type openingMemory struct {
	state      string
	since      time.Time
	restoredAt time.Time
	reason     string
	through    string
}

type tableMemory struct {
	loaded     bool
	failed     string
	since      time.Time
	restoredAt time.Time
}

// Reconcile implements Driver.
func (d *OpeningDriver) Reconcile(ctx context.Context, pass Pass) Outcome {
	w := d.compose(pass.Declaration, pass.Resources)
	out, start := d.reconcileLocked(ctx, pass, w)
	if start {
		d.startWatch(ctx)
	}
	out.Detail = d.Status()
	return out
}

// reconcileLocked is a pass under d.mu (released however the pass ends, a crash point's panic in
// the unit tests included): the flip's steps around the application of w, and the errors.
// start says whether the watch is to be started.
func (d *OpeningDriver) reconcileLocked(ctx context.Context, pass Pass, w *desiredOpenings) (Outcome, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.want != nil && d.want.mode != w.mode {
		d.states = map[string]*openingMemory{} // a new mode: what carries each opening changes
	}
	d.want = w
	d.flip = nil
	if pass.Declaration != nil {
		d.flip = pass.Declaration.Flip
	}
	// The found firewall may have changed kind or rules since the last pass: detect it again
	// when its stamp moved (the nftables ruleset's generation, its files), when no stamp stands
	// for it (iptables-legacy), or when the last detection failed. An unchanged machine is not
	// read again pass after pass (a detection lists every table and chain and runs
	// iptables-save).
	if s := d.pf.Stamp(ctx); s == "" || s != d.stamp || d.foundErr != nil {
		d.redetect = true
	}
	// The flip's order (flip.go): the return restores the found firewall before the guard and
	// the filter change; the flip retires it once the filter is in.
	var flipErr error
	changes := 0
	if rec, err := loadRetired(pass.Records); err == nil {
		d.retired = rec
	}
	if w.mode == fsm.Adopted {
		changes, flipErr = d.restoreFound(ctx, pass.Records)
	}
	changes += d.apply(ctx, false, netfilter.Tick{})
	if w.mode == fsm.Converged {
		n, err := d.retireFound(ctx, pass.Records)
		changes, flipErr = changes+n, err
	}
	if rec, err := loadRetired(pass.Records); err == nil {
		d.retired = rec
	} else if flipErr == nil {
		flipErr = err
	}
	out := Outcome{Changes: changes}
	if flipErr != nil {
		out.Errors = append(out.Errors, ResourceError{Resource: "firewall:found", Reason: flipErr.Error()})
	}
	for _, e := range w.entries {
		if m := d.states[e.mark]; e.invalid != "" || (m != nil && m.state == OpeningFailed) {
			reason := e.invalid
			if reason == "" {
				reason = m.reason
			}
			out.Errors = append(out.Errors, ResourceError{Resource: e.res.ID(), Module: e.res.Module, Reason: reason})
		}
	}
	return out, d.watchDone == nil && !d.closed && ctx.Err() == nil
}

// Status returns the driver's part of the report as it stands now, including what the watch
// restored since the last pass.
func (d *OpeningDriver) Status() OpeningDetail {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.detailLocked()
}

// Close stops the watch. meshd's rules and tables stay in force: an opening is a state.
func (d *OpeningDriver) Close() error {
	d.mu.Lock()
	d.closed = true
	cancel, done := d.watchCancel, d.watchDone
	d.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	return nil
}

func (d *OpeningDriver) startWatch(passCtx context.Context) {
	wctx, cancel := context.WithCancel(context.WithoutCancel(passCtx))
	stop := context.AfterFunc(passCtx, cancel)
	done := make(chan struct{})
	d.mu.Lock()
	if d.watchDone != nil || d.closed {
		d.mu.Unlock()
		stop()
		cancel()
		return
	}
	d.watchCancel, d.watchDone = cancel, done
	d.mu.Unlock()
	go func() {
		defer close(done)
		defer stop()
		_ = d.pf.Watch(wctx, d.recheck, &d.changes, d.recheckNow)
		d.mu.Lock()
		if d.watchDone == done {
			d.watchCancel, d.watchDone = nil, nil
		}
		d.mu.Unlock()
		cancel()
	}()
}

// recheckNow is the watch's callback: the last desired state, applied again (on the timer, only
// if something moved: apply).
func (d *OpeningDriver) recheckNow(ctx context.Context, tick netfilter.Tick) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.want == nil || d.closed || ctx.Err() != nil {
		return
	}
	if n := d.apply(ctx, true, tick); n > 0 {
		d.log.Info("packet filter changed under meshd: desired openings re-applied", "changes", n)
	}
	// What moved may be the found firewall itself (ufw enabled or disabled, a ruleset loaded):
	// detected again after the openings are back in force, not before, so a restoration waits
	// for no detection; a pass follows only when the detection reads something else.
	if tick.Timer || d.wake == nil {
		return
	}
	if s := d.pf.Stamp(ctx); s != "" && s != d.stamp {
		before := d.foundSig()
		d.detect(ctx, d.want.priv)
		if d.foundSig() != before {
			d.wake()
		}
	}
}

// foundSig is what a detection read, as the report says it.
func (d *OpeningDriver) foundSig() string {
	if d.foundErr != nil {
		return "error: " + d.foundErr.Error()
	}
	return d.found.String()
}

// watchDrift lets the watch wake a pass (driftSource) until ctx ends.
func (d *OpeningDriver) watchDrift(ctx context.Context, touched func(names ...string)) {
	d.mu.Lock()
	d.wake = touched
	d.mu.Unlock()
	<-ctx.Done()
	d.mu.Lock()
	d.wake = nil
	d.mu.Unlock()
}

// compose turns the declaration into what the packet filter must carry.
func (d *OpeningDriver) compose(decl *fsm.Declaration, rs []fsm.Resource) *desiredOpenings {
	w := &desiredOpenings{mode: fsm.Adopted}
	if decl != nil {
		w.mode = decl.Mode
	}
	// The private network's interface is the one the declaration raises, whatever its name;
	// the configured one (MeshInterface) where it declares none.
	iface := d.iface
	if decl != nil && decl.Tunnel.Interface != "" {
		iface = decl.Tunnel.Interface
	}
	w.priv = netfilter.Private{Interface: iface}
	w.privNote = iface
	if decl != nil && decl.Tunnel.Range != "" {
		if p, err := netip.ParsePrefix(decl.Tunnel.Range); err == nil {
			w.priv.Range = p.Masked()
			w.privNote += " " + w.priv.Range.String()
		} else {
			w.privNote += fmt.Sprintf(" (range %q unreadable: %v)", decl.Tunnel.Range, err)
		}
	}
	seenPort := map[netfilter.Port]bool{}
	var filterAdmit map[netfilter.Port][]netip.Addr
	for _, r := range rs {
		e := openingEntry{res: r}
		if r.Opening == nil {
			e.invalid = "opening resource without an opening"
			w.entries = append(w.entries, e)
			continue
		}
		e.o = netfilter.Opening{Module: r.Module, Proto: r.Opening.Proto, Port: r.Opening.Port,
			From: r.Opening.From, Path: r.Opening.Path}
		if err := e.o.Validate(); err != nil {
			e.invalid = err.Error()
		} else {
			e.mark = e.o.Mark()
			w.openings = append(w.openings, e.o)
			// The derived filter admits the servers alone to such a port, as the guard does: on a
			// converged server nothing else stands between the Raft port and anywhere.
			if p := (netfilter.Port{Proto: e.o.Proto, Port: e.o.Port}); r.Opening.Admit == catalogue.AdmitServers {
				if filterAdmit == nil {
					filterAdmit = map[netfilter.Port][]netip.Addr{}
				}
				if _, done := filterAdmit[p]; !done {
					filterAdmit[p] = nil // named even when no server reads as an address: nobody is admitted then
					filterAdmit = admitServers(filterAdmit, p, decl)
				}
			}
			if p := (netfilter.Port{Proto: e.o.Proto, Port: e.o.Port}); r.Opening.Guarded && !seenPort[p] {
				seenPort[p] = true
				w.guard.Ports = append(w.guard.Ports, p)
				if r.Opening.Admit == catalogue.AdmitServers {
					w.guard.Admit = admitServers(w.guard.Admit, p, decl)
				}
			}
		}
		w.entries = append(w.entries, e)
	}
	sort.Slice(w.guard.Ports, func(i, j int) bool {
		a, b := w.guard.Ports[i], w.guard.Ports[j]
		return a.Proto < b.Proto || a.Proto == b.Proto && a.Port < b.Port
	})
	w.guard.Private, w.guard.Trusted = w.priv, d.trusted
	w.filter = netfilter.FilterSpec{Private: w.priv, MeshPorts: meshPorts(decl), Openings: w.openings, ForwardFrom: d.forwardFrom, Admit: filterAdmit}
	w.key = fmt.Sprintf("%s|%v|%v|%v", w.mode, w.openings, w.guard, w.filter)
	return w
}

// admitServers adds the declaration's servers' underlay addresses to the guard's admitted
// sources for port p. The record checked them at enrolment; one that does not read as an address
// is left out (the guard then refuses it, as it refuses everyone off the private network).
func admitServers(admit map[netfilter.Port][]netip.Addr, p netfilter.Port, decl *fsm.Declaration) map[netfilter.Port][]netip.Addr {
	if decl == nil {
		return admit
	}
	if admit == nil {
		admit = map[netfilter.Port][]netip.Addr{}
	}
	for _, s := range decl.Servers {
		if a, err := netip.ParseAddr(s); err == nil {
			admit[p] = append(admit[p], a.Unmap())
		}
	}
	return admit
}

// meshPorts are the mesh's own ports (bus, raft, gossip) as the declaration carries them (fsm
// fills in the catalogue's defaults; the host reads no catalogue).
func meshPorts(decl *fsm.Declaration) []netfilter.Port {
	if decl == nil {
		return nil
	}
	var out []netfilter.Port
	for _, p := range []uint16{decl.Mesh.Bus, decl.Mesh.Raft, decl.Mesh.Gossip} {
		if p != 0 {
			out = append(out, netfilter.Port{Proto: "tcp", Port: p})
		}
	}
	if p := decl.Mesh.Gossip; p != 0 {
		out = append(out, netfilter.Port{Proto: "udp", Port: p})
	}
	return out
}

// detect reads the found firewall and keeps a driver for it, rebuilt when its kind, its backend
// or the private network changes (the driver remembers since when each opening is in force).
func (d *OpeningDriver) detect(ctx context.Context, priv netfilter.Private) {
	// The stamp is read before the firewall: a change while Detect reads moves the stamp past
	// the one kept, so the next pass detects again.
	d.stamp = d.pf.Stamp(ctx)
	f, err := d.pf.Detect(ctx)
	d.detected, d.redetect = true, false
	if err != nil {
		if d.foundErr == nil || d.foundErr.Error() != err.Error() {
			d.log.Warn("found firewall not spoken", "err", err)
		}
		d.found, d.foundErr, d.fw, d.fwKey = netfilter.Found{}, err, nil, ""
		return
	}
	d.foundErr = nil
	key := fmt.Sprintf("%s|%s|%s|%s", f.Kind, f.Backend, priv.Interface, priv.Range)
	if d.fw == nil || key != d.fwKey {
		fw, err := d.pf.NewDriver(f, priv)
		if err != nil {
			d.found, d.foundErr, d.fw, d.fwKey = f, err, nil, ""
			return
		}
		if d.fwKey != "" {
			d.log.Info("found firewall changed", "found", f.String())
			// The new driver learns what was in force, so what it puts back reads restored.
			if r, ok := fw.(netfilter.Rememberer); ok {
				since := map[string]time.Time{}
				for mark, m := range d.states {
					if m.state == OpeningInForce || m.state == OpeningRestored {
						since[mark] = m.since
					}
				}
				r.Remember(since)
			}
		}
		d.fw, d.fwKey = fw, key
	}
	d.found = f
}

// openingPlan is what a pass does to the packet filter, decided before anything is done.
type openingPlan struct {
	// refused, when set, fails every opening: the found firewall is not spoken or not read.
	refused string
	// throughFound: the openings go through the found firewall, as meshd-marked rules.
	throughFound bool
	// filter: meshd's derived filter is loaded (then the guard removed); otherwise the guard is
	// loaded (and the derived filter removed).
	filter bool
}

// decideOpenings is the opening kind's decision: a pure function of the node's mode and the
// firewall found (or why it could not be spoken). On an adopted node the found firewall carries
// every opening and meshd loads only the guard; on a converged node the derived filter carries
// them, and the found firewall too while it is still active.
func decideOpenings(mode fsm.Mode, found netfilter.Found, foundErr error) openingPlan {
	plan := openingPlan{filter: mode == fsm.Converged}
	switch {
	case foundErr != nil:
		// The refusal names the firewall (ErrUnsupported's text ends the sentence); the next pass
		// detects again.
		plan.refused = foundErr.Error()
		if !errors.Is(foundErr, netfilter.ErrUnsupported) {
			plan.refused = "the found firewall could not be read: " + plan.refused
		}
	case mode == fsm.Converged && (!found.Active || found.Kind == netfilter.KindNone):
		// retired or nothing there: meshd's filter alone carries the openings
	default:
		plan.throughFound = true
	}
	return plan
}

// applied is what one application of the desired state did: each failed opening's reason by
// mark, what carries the others, and the found firewall's report.
type applied struct {
	changes int
	failed  map[string]string
	through []string
	rep     netfilter.Report
	repOK   bool
}

// restState is what an application that left every opening and meshd's table in force read
// just before it began: the watch's monitor mark, the packet filter's stamp, and whether a
// retired found firewall was on record. While all three read the same and the desired state is
// the one it applied, the machine is as it left it.
type restState struct {
	valid   bool
	mark    uint64
	stamp   string
	key     string
	retired bool
}

// atRest says whether an application may be skipped: nothing it depends on moved since one that
// left everything in force (restState). Never for the watch's calls caused by an event, its
// start or its monitor's restart (tick.Timer false), nor without a live monitor: the stamp
// alone can move before a commit's changes are visible (netfilter.Changes), and only the
// commit's events, which come once they are, say the read that saw the stamp was late.
func (d *OpeningDriver) atRest(w *desiredOpenings, mark uint64, live bool, stamp string, pass bool) bool {
	r := d.rest
	if !r.valid || !live || stamp == "" || r.mark != mark || r.stamp != stamp || r.key != w.key ||
		d.redetect || !d.detected || r.retired != d.retiredNow() {
		return false
	}
	// A pass also removes the other mode's table the first time (the watch never does).
	return !pass || (w.mode == fsm.Converged && !d.guardMaybe) || (w.mode != fsm.Converged && !d.filterMaybe)
}

func (d *OpeningDriver) retiredNow() bool { return d.retired != nil && d.retired.Retired != nil }

// apply brings the packet filter to d.want and records each opening's state; it returns what it
// changed. Called with d.mu held, by a pass (tick zero, fromWatch false) or by the watch. A pass
// or the watch's timer over a machine at rest (atRest) reads the monitor's mark and the stamp
// and nothing else: the openings, guard and filter stay as the last application recorded them.
func (d *OpeningDriver) apply(ctx context.Context, fromWatch bool, tick netfilter.Tick) int {
	w := d.want
	now := time.Now().UTC()
	d.lastApply = now
	// The mark before the stamp: an event after it moves the mark, whatever the stamp read.
	mark, live := d.changes.Mark()
	stamp := d.pf.Stamp(ctx)
	if (!fromWatch || tick.Timer) && d.atRest(w, mark, live, stamp, !fromWatch) {
		return 0
	}
	d.rest = restState{}
	sameWant := d.applied == w.key
	d.applied = w.key
	if d.redetect || !d.detected {
		d.detect(ctx, w.priv)
	}
	plan := decideOpenings(w.mode, d.found, d.foundErr)
	if w.mode == fsm.Converged && d.retired != nil && d.retired.Retired != nil {
		// meshd retired the found firewall: what is left of it (ufw's jumps, Docker's hooks into
		// it) is not a firewall to open ports in; meshd's filter alone carries the openings.
		plan.throughFound, plan.refused = false, ""
	}
	res := &applied{failed: map[string]string{}}
	if plan.refused != "" {
		for _, e := range w.entries {
			res.failed[e.mark] = plan.refused
		}
	}
	if plan.throughFound {
		d.throughFound(ctx, w, res)
	}
	if plan.filter {
		d.loadFilter(ctx, w, res, fromWatch, sameWant, now)
	} else {
		d.loadGuard(ctx, w, res, fromWatch, sameWant, now)
	}
	d.recordStates(w, res, now)
	which := "guard:"
	if plan.filter {
		which = "filter:"
	}
	if live && stamp != "" && len(res.failed) == 0 && d.allInForce() && d.bootKept == which+w.key {
		d.rest = restState{valid: true, mark: mark, stamp: stamp, key: w.key, retired: d.retiredNow()}
	}
	return res.changes
}

// allInForce says whether every opening and meshd's table are in force as last recorded.
func (d *OpeningDriver) allInForce() bool {
	for _, m := range d.states {
		if m.state == OpeningFailed {
			return false
		}
	}
	return d.guard.failed == "" && d.filter.failed == "" && d.foundErr == nil
}

// throughFound makes the found firewall's meshd-marked rules the declared openings.
func (d *OpeningDriver) throughFound(ctx context.Context, w *desiredOpenings, res *applied) {
	r, err := d.fw.Converge(ctx, w.openings)
	if err != nil {
		reason := fmt.Sprintf("found firewall %s: %v", d.found.Kind, err)
		for _, e := range w.entries {
			res.failed[e.mark] = reason
		}
		d.redetect = true // it may have changed kind under us
		return
	}
	res.rep, res.repOK = r, true
	res.changes += r.Added + r.Removed
	res.through = append(res.through, "found "+string(d.found.Kind))
}

// loadFilter loads the derived filter on a converged node, then removes the guard.
func (d *OpeningDriver) loadFilter(ctx context.Context, w *desiredOpenings, res *applied, fromWatch, sameWant bool, now time.Time) {
	wrote, err := d.pf.LoadFilter(ctx, w.filter)
	d.filterMaybe = true
	d.recordTable(&d.filter, wrote, err, sameWant, now)
	if wrote {
		res.changes++
		if !fromWatch && d.flip != nil && d.flip.To == fsm.Converged {
			d.crash("flip.after-filter")
		}
	}
	if err != nil {
		for _, e := range w.entries {
			if res.failed[e.mark] == "" {
				res.failed[e.mark] = fmt.Sprintf("the derived filter (nftables table inet %s) is not loaded: %v", netfilter.FilterTable, err)
			}
		}
		return
	}
	res.through = append([]string{"meshd filter"}, res.through...)
	spec := w.filter
	d.keepForBoot(w.key, netfilter.BootTables{Filter: &spec})
	if d.guardMaybe && !fromWatch {
		if err := d.pf.RemoveGuard(ctx); err != nil {
			d.log.Warn("remove the guard on a converged node", "err", err)
			return
		}
		if d.guard.loaded {
			res.changes++
		}
		d.guardMaybe, d.guard = false, tableMemory{}
	}
}

// keepForBoot keeps the table just loaded for the next boot (netfilter.BootTables), once per
// desired state: a pass with nothing to do neither reads nor writes the kept copy. A failure is
// logged and tried again by the next pass; the openings themselves are in force either way.
func (d *OpeningDriver) keepForBoot(key string, t netfilter.BootTables) {
	which := "guard:"
	if t.Filter != nil {
		which = "filter:"
	}
	if d.bootKept == which+key {
		return
	}
	wrote, err := d.pf.KeepForBoot(t)
	if err != nil {
		d.log.Warn("keep meshd's table for the next boot", "err", err)
		return
	}
	if wrote {
		d.log.Info("kept meshd's table for the next boot", "table", strings.TrimSuffix(which, ":"))
	}
	d.bootKept = which + key
}

// loadGuard loads the guard on an adopted node, then removes the derived filter.
func (d *OpeningDriver) loadGuard(ctx context.Context, w *desiredOpenings, res *applied, fromWatch, sameWant bool, now time.Time) {
	wrote, err := d.pf.Guard(ctx, w.guard)
	d.guardMaybe = true
	d.recordTable(&d.guard, wrote, err, sameWant, now)
	if wrote {
		res.changes++
		if !fromWatch && d.flip != nil && d.flip.To == fsm.Adopted {
			d.crash("return.after-guard")
		}
	}
	if err != nil {
		for _, e := range w.entries {
			if e.res.Opening != nil && e.res.Opening.Guarded && res.failed[e.mark] == "" {
				res.failed[e.mark] = fmt.Sprintf("the guard (nftables table inet %s) is not loaded: %v", netfilter.GuardTable, err)
			}
		}
	} else {
		spec := w.guard
		d.keepForBoot(w.key, netfilter.BootTables{Guard: &spec})
	}
	if d.filterMaybe && !fromWatch {
		if err := d.pf.RemoveFilter(ctx); err != nil {
			d.log.Warn("remove the derived filter on an adopted node", "err", err)
			return
		}
		if d.filter.loaded {
			res.changes++
		}
		d.filterMaybe, d.filter = false, tableMemory{}
	}
}

// recordStates notes each declared opening's state after an application, and forgets the
// openings no longer declared.
func (d *OpeningDriver) recordStates(w *desiredOpenings, res *applied, now time.Time) {
	byMark := map[string]netfilter.OpeningState{}
	if res.repOK {
		for _, s := range res.rep.Openings {
			byMark[s.Opening.Mark()] = s
		}
	}
	keep := map[string]bool{}
	for _, e := range w.entries {
		if e.invalid != "" {
			continue
		}
		keep[e.mark] = true
		m := d.states[e.mark]
		if m == nil {
			m = &openingMemory{}
			d.states[e.mark] = m
		}
		s, reported := byMark[e.mark]
		switch {
		case res.failed[e.mark] != "":
			m.state, m.reason, m.since, m.through = OpeningFailed, res.failed[e.mark], time.Time{}, ""
		case reported && s.State == netfilter.Failed:
			m.state, m.reason, m.since, m.through = OpeningFailed, fmt.Sprintf("found firewall %s: %s", d.found.Kind, s.Reason), time.Time{}, ""
		default:
			d.inForce(m, w.mode, s, reported, strings.Join(res.through, " and "), now)
		}
	}
	for k := range d.states {
		if !keep[k] {
			delete(d.states, k)
		}
	}
}

// inForce notes an opening in force: since when, and when it was last restored (by the found
// firewall's driver, s when reported, or by the derived filter loaded again).
func (d *OpeningDriver) inForce(m *openingMemory, mode fsm.Mode, s netfilter.OpeningState, reported bool, through string, now time.Time) {
	wasFailed := m.state == OpeningFailed || m.state == ""
	m.state, m.reason, m.through = OpeningInForce, "", through
	if reported {
		m.reason = s.Reason // what it rests on, e.g. "the found ruleset does not filter this path"
		if s.State == netfilter.Restored {
			m.restoredAt = s.At
		}
		if m.since.IsZero() || s.State == netfilter.Restored || wasFailed {
			m.since = s.At
		}
	}
	if mode == fsm.Converged && d.filter.loaded {
		if !d.filter.restoredAt.IsZero() && d.filter.restoredAt.After(m.restoredAt) && !wasFailed {
			m.restoredAt = d.filter.restoredAt
		}
		if m.since.IsZero() || wasFailed {
			m.since = now
		}
	}
	if m.since.IsZero() {
		m.since = now
	}
	if !m.restoredAt.IsZero() {
		m.state = OpeningRestored
	}
}

// recordTable notes what loading one of meshd's own tables did: loaded since when, restored when
// it had to be written again though nothing desired changed.
func (d *OpeningDriver) recordTable(t *tableMemory, wrote bool, err error, sameWant bool, now time.Time) {
	if err != nil {
		t.loaded, t.failed, t.since = false, err.Error(), time.Time{}
		return
	}
	if wrote && t.loaded && sameWant {
		t.restoredAt = now
	}
	if !t.loaded || t.since.IsZero() {
		t.since = now
	}
	t.loaded, t.failed = true, ""
}

func (d *OpeningDriver) detailLocked() OpeningDetail {
	out := OpeningDetail{Openings: []OpeningView{}, Applied: d.lastApply}
	w := d.want
	if w == nil {
		out.Watch = "not started"
		return out
	}
	out.Mode, out.Private = w.mode, w.privNote
	switch {
	case d.foundErr != nil:
		out.Firewall = FirewallView{Kind: "refused", Description: "not spoken", Refused: d.foundErr.Error()}
		if !errors.Is(d.foundErr, netfilter.ErrUnsupported) {
			out.Firewall.Kind, out.Firewall.Description = "unreadable", "could not be read"
		}
	default:
		out.Firewall = FirewallView{Kind: string(d.found.Kind), Description: d.found.String(), Config: d.found.Config, Tables: d.found.Tables}
	}
	if d.retiredNow() {
		// The record, not the detection, says what the found firewall is: retired by meshd. What
		// the detection reads now stays beside it; the derived filter and the openings were
		// decided from the detection as before (apply).
		now := out.Firewall.Description
		if out.Firewall.Refused != "" {
			now += ": " + out.Firewall.Refused
		}
		again := d.foundErr == nil && d.found.Active && d.found.Kind == d.retired.Kind
		out.Firewall = retiredFirewall(d.retired, now, again)
	}
	for _, e := range w.entries {
		v := OpeningView{Resource: e.res.ID(), Module: e.res.Module, Taken: e.res.Taken}
		if e.res.Opening != nil {
			v.Guarded = e.res.Opening.Guarded
			v.Opening = e.o.String()
		}
		if e.invalid != "" {
			v.State, v.Reason = OpeningFailed, e.invalid
		} else if m := d.states[e.mark]; m != nil {
			v.State, v.Since, v.RestoredAt, v.Reason, v.Through = m.state, m.since, m.restoredAt, m.reason, m.through
		}
		out.Openings = append(out.Openings, v)
	}
	table := func(name string, t tableMemory, ports []netfilter.Port) *TableView {
		tv := &TableView{Table: "inet " + name, Ports: []string{}, Since: t.since, RestoredAt: t.restoredAt}
		for _, p := range ports {
			tv.Ports = append(tv.Ports, p.String())
		}
		switch {
		case t.failed != "":
			tv.State, tv.Reason = "failed", t.failed
		case !t.restoredAt.IsZero():
			tv.State = "restored"
		case t.loaded:
			tv.State = "loaded"
		default:
			tv.State = "not loaded"
		}
		return tv
	}
	if w.mode == fsm.Converged {
		out.Filter = table(netfilter.FilterTable, d.filter, w.filter.MeshPorts)
	} else {
		out.Guard = table(netfilter.GuardTable, d.guard, w.guard.Ports)
	}
	out.Flip, out.Retired = d.flipView(d.flip, d.retired), retiredView(d.retired)
	if d.watchDone != nil {
		out.Watch = fmt.Sprintf("re-applied on every change of the packet filter and every %s", d.recheck)
	} else {
		out.Watch = "stopped: re-applied on every pass only"
	}
	return out
}
