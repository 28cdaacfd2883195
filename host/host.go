package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"sync"
	"time"

	"meshd/fsm"
	"meshd/host/pass"
	"meshd/pki"
	"meshd/report"
)

// DefaultInterval is how often the loop reconciles when no new declaration arrives.
const DefaultInterval = 10 * time.Second

// Config is how the agent opens the host.
type Config struct {
	// DataDir is the node's data dir; the record store is DataDir/host.db.
	DataDir string
	// Seal is the node's seal key: every value of the record store is sealed under it.
	Seal *pki.SealKey
	// Root prefixes every declared path: "/etc/x" is Root/etc/x. Empty means "/" (production);
	// tests give a temporary directory.
	Root string
	// Interval is the timer of the level-triggered loop; zero means DefaultInterval.
	Interval time.Duration
	// Logger receives what the host does; nil means slog.Default().
	Logger *slog.Logger
	// Own are meshd's own paths besides DataDir (the seal key, the operator socket's directory,
	// the config file): a declared file at or under one, or a container mounting one, is that
	// resource's error.
	Own []string
	// Drivers converge the resource kinds other than files (container, opening). Each is called
	// on every pass with the declared resources of its kind.
	Drivers []Driver
	// Observe, when set, is told after each pass how long each resource kind took and how many of
	// its resources failed (the agent's metrics); it must not block.
	Observe func(kind string, took time.Duration, failed int)
	// Crasher is the crash seam of the host's own points (see the package doc); nil reads
	// pass.CrashEnv. A unit test gives one it armed (pass.Crasher.Arm).
	Crasher *pass.Crasher
}

// Driver converges the resources of one kind. The reconciler calls Reconcile on every pass with
// every declared resource of that kind, taken or not (Resource.Taken says whether it converges or
// is only prepared, what is found being held), and puts the outcome in the report. A pass with
// nothing to do must change nothing.
type Driver interface {
	// Kind is the resource kind it converges: fsm.KindContainer or fsm.KindOpening.
	Kind() string
	Reconcile(ctx context.Context, pass pass.Pass) pass.Outcome
}

// Host is the host reconciler of one node.
type Host struct {
	root     string
	interval time.Duration
	log      *slog.Logger
	st       *store
	drivers  []Driver

	pass sync.Mutex // one pass at a time

	mu   sync.Mutex
	last report.Report
	// drift is the running loop's drift watch (watch.go), nil outside Run; guarded by mu.
	drift *driftWatch
	// passed are the channels Passed handed out; guarded by mu.
	passed []chan struct{}
	// timerOnly turns the drift watches off: the loop as it was before them, which the drift
	// benchmark measures beside it. Set before Run.
	timerOnly bool

	owners map[string]ids // resolved owners, guarded by pass
	// outs are each driver's outcome of its last pass, by kind, which a drift pass that leaves
	// the driver out reports again; guarded by pass.
	outs      map[string]pass.Outcome
	listeners ListenerReader // the machine's listening sockets, read each pass; guarded by pass

	crasher *pass.Crasher // pass.CrashEnv's point; reaches nothing in production
	own     pass.Own      // meshd's own paths: the data dir and Config.Own
	// seam, nil in production, is called at named points between a check and the act on it, so
	// a unit test can change the machine there (a symlink swapped in) and see the act refused.
	seam    func(point, path string)
	observe func(kind string, took time.Duration, failed int)
}

// Open opens the record store in cfg.DataDir and returns the host, which does nothing until
// Reconcile or Run.
func Open(cfg Config) (*Host, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("host: no data dir given")
	}
	root := cfg.Root
	if root == "" {
		root = "/"
	}
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("host: root %s: %w", cfg.Root, err)
	}
	if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("host: root %s is not a directory", root)
	}
	if root, err = filepath.EvalSymlinks(root); err != nil {
		return nil, fmt.Errorf("host: root %s: %w", cfg.Root, err)
	}
	h := &Host{root: root, interval: cfg.Interval, log: cfg.Logger, owners: map[string]ids{}, outs: map[string]pass.Outcome{}, observe: cfg.Observe}
	if dd, err := filepath.Abs(cfg.DataDir); err == nil {
		h.own = pass.Own{Data: dd, Others: cfg.Own}
	}
	if h.interval <= 0 {
		h.interval = DefaultInterval
	}
	if h.log == nil {
		h.log = slog.Default()
	}
	kinds := map[string]bool{fsm.KindFile: true}
	for _, d := range cfg.Drivers {
		if kinds[d.Kind()] {
			return nil, fmt.Errorf("host: a second driver for resource kind %q", d.Kind())
		}
		kinds[d.Kind()] = true
		h.drivers = append(h.drivers, d)
	}
	h.crasher = cfg.Crasher
	if h.crasher == nil {
		h.crasher = pass.NewCrasher(h.log)
	}
	if err := ensureDir(cfg.DataDir); err != nil {
		return nil, fmt.Errorf("host: %w", err)
	}
	if h.st, err = openStore(storePath(cfg.DataDir), cfg.Seal); err != nil {
		return nil, fmt.Errorf("host: %w", err)
	}
	return h, nil
}

// Close closes the record store; a pass running finishes first.
func (h *Host) Close() error {
	h.pass.Lock()
	defer h.pass.Unlock()
	// Drivers that run something of their own (the firewall's reload watch) stop with the host;
	// what they put on the machine stays.
	for _, d := range h.drivers {
		if c, ok := d.(interface{ Close() error }); ok {
			if err := c.Close(); err != nil {
				h.log.Warn("driver close", "kind", d.Kind(), "err", err)
			}
		}
	}
	return h.st.close()
}

// Report returns the report of the last pass (the zero report.Report before the first).
func (h *Host) Report() report.Report {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last
}

// Original returns the recorded original of a file the host found at the declared path p, held or
// since replaced.
func (h *Host) Original(p string) ([]byte, error) {
	b, ok, err := h.st.original(path.Clean(p))
	if err != nil {
		return nil, fmt.Errorf("original of %s: %w", p, err)
	}
	if !ok {
		return nil, fmt.Errorf("no original recorded for %s: the host found no file there", p)
	}
	return b, nil
}

// Run is the level-triggered loop: it reconciles on every declaration received and, with the
// last one, on every tick of the interval, until ctx ends. A closed channel keeps the timer going.
// Between those, the drift watches (watch.go) run a pass for what changed on the machine as soon
// as it changes; the timer is the safety net for what they miss.
func (h *Host) Run(ctx context.Context, decls <-chan *fsm.Declaration) error {
	t := time.NewTicker(h.interval)
	defer t.Stop()
	w := h.watchDrift(ctx)
	defer w.close()
	var last *fsm.Declaration
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case d, ok := <-decls:
			if !ok {
				decls = nil
				continue
			}
			if d == nil {
				continue
			}
			last = d
			w.follow(last, h.Report()) // watched before the pass reads them: no change slips between
			w.follow(last, h.Reconcile(ctx, last))
			t.Reset(h.interval)
		case <-t.C:
			if last != nil {
				w.follow(last, h.Reconcile(ctx, last))
			}
		case <-w.dr.due:
			if kinds := w.dr.take(); last != nil {
				w.follow(last, h.reconcile(ctx, last, kinds))
			}
		}
	}
}

// Reconcile runs one pass: it brings the machine to d where d says so, keeps what is held, and
// returns (and keeps, for Report) what it saw.
func (h *Host) Reconcile(ctx context.Context, d *fsm.Declaration) report.Report {
	return h.reconcile(ctx, d, nil)
}

// reconcile runs a pass over the files and the drivers of the kinds in scope (every driver when
// scope is nil); a driver left out keeps its part of the report from its last pass. A pass that
// stages a take's files runs every driver, since the take is staged across kinds. It is the pass's
// one ordered sequence (read the records, files, each driver, listeners, the report), each step a
// call; kept in one place so the order a pass runs in reads at once.
func (h *Host) reconcile(ctx context.Context, d *fsm.Declaration, scope map[string]bool) report.Report {
	h.pass.Lock()
	defer h.pass.Unlock()
	rep := report.Report{When: time.Now().UTC(), Held: []report.HeldFile{}, Written: []report.WrittenFile{}, Errors: []report.ResourceError{}}
	if d == nil {
		rep.Errors = append(rep.Errors, report.ResourceError{Resource: "declaration", Reason: "no declaration to reconcile"})
		return rep
	}
	rep.Node, rep.Mode, rep.Taken, rep.Assigned = d.Node, d.Mode, append([]string{}, d.Taken...), append([]string{}, d.Assigned...)
	byKind := map[string][]fsm.Resource{}
	for _, r := range d.Resources {
		byKind[r.Kind] = append(byKind[r.Kind], r)
	}
	// A take is staged across kinds: files that replace found ones are only prepared here, the
	// drivers cut their resources over, then the files are written, module by module, unless a
	// container of the module failed; a file that cannot be written steps the module back.
	started := time.Now()
	fc := h.files(ctx, d, byKind[fsm.KindFile], &rep)
	h.observed(fsm.KindFile, started, len(rep.Errors))
	if len(fc.staged) > 0 {
		scope = nil
	}
	blocked := map[string]string{}
	ranDriver := false
	for _, drv := range h.drivers {
		if ctx.Err() != nil {
			break
		}
		var out pass.Outcome
		if scope == nil || scope[drv.Kind()] {
			started := time.Now()
			out = drv.Reconcile(ctx, pass.Pass{Declaration: d, Resources: byKind[drv.Kind()],
				Records: h.records(drv.Kind()), Own: h.own})
			h.observed(drv.Kind(), started, len(out.Errors))
			h.outs[drv.Kind()] = out
			ranDriver = true
		} else {
			out = h.outs[drv.Kind()] // its part of the report from its last pass,
			out.Changes = 0          // which counted what it changed
		}
		for _, e := range out.Errors {
			if drv.Kind() == fsm.KindContainer && blocked[e.Module] == "" {
				blocked[e.Module] = e.Reason
			}
		}
		rep.Errors = append(rep.Errors, out.Errors...)
		rep.Changes += out.Changes
		if out.Detail != nil {
			if rep.Kinds == nil {
				rep.Kinds = map[string]any{}
			}
			rep.Kinds[drv.Kind()] = out.Detail
		}
	}
	if ctx.Err() == nil {
		h.cutoverFiles(ctx, fc, blocked, byKind)
	}
	for kind, rs := range byKind {
		if kind == fsm.KindFile || h.hasDriver(kind) {
			continue
		}
		for _, r := range rs {
			rep.Errors = append(rep.Errors, report.ResourceError{Resource: r.ID(), Module: r.Module,
				Reason: fmt.Sprintf("no driver for resource kind %q on this host", kind)})
		}
	}
	if ctx.Err() != nil {
		rep.Errors = append(rep.Errors, report.ResourceError{Resource: "pass", Reason: "interrupted: " + ctx.Err().Error()})
	}
	if scope != nil && !ranDriver {
		// A pass over files only: the sockets are the last pass's (files open none).
		h.mu.Lock()
		rep.Listeners, rep.ListenersError = h.last.Listeners, h.last.ListenersError
		h.mu.Unlock()
	} else if ls, err := h.listeners.Read(); err != nil {
		rep.ListenersError = fmt.Sprintf("read listening sockets: %v", err)
	} else {
		rep.Listeners = append([]report.Listener{}, ls...)
	}
	// Each failure is logged when it starts or its reason changes, not on every pass.
	h.mu.Lock()
	prev := map[string]string{}
	for _, e := range h.last.Errors {
		prev[e.Resource] = e.Reason
	}
	h.mu.Unlock()
	for _, e := range rep.Errors {
		if prev[e.Resource] != e.Reason {
			h.log.Warn("resource failed", "resource", e.Resource, "module", e.Module, "reason", e.Reason)
		}
		delete(prev, e.Resource)
	}
	for res := range prev {
		h.log.Info("resource recovered", "resource", res)
	}
	if rep.Changes > 0 {
		h.log.Info("host pass changed the machine", "node", rep.Node, "changes", rep.Changes, "failed", len(rep.Errors))
	}
	h.mu.Lock()
	h.last = rep
	for _, ch := range h.passed {
		select {
		case ch <- struct{}{}:
		default: // a wake-up is pending already: the reader will read this report
		}
	}
	h.mu.Unlock()
	return rep
}

// Passed returns a channel that receives after each pass (the report is then Report's); a
// pass never waits for its reader, and wake-ups the reader has not taken yet are one. Each call
// gives a channel of its own, so the agent's report publishers each learn of every pass at once
// rather than polling.
func (h *Host) Passed() <-chan struct{} {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	h.passed = append(h.passed, ch)
	h.mu.Unlock()
	return ch
}

// observed tells Config.Observe what one kind's part of a pass took.
func (h *Host) observed(kind string, started time.Time, failed int) {
	if h.observe != nil {
		h.observe(kind, time.Since(started), failed)
	}
}

func (h *Host) hasDriver(kind string) bool { return h.Driver(kind) != nil }

// Driver returns the driver the host was handed for kind, nil if none.
func (h *Host) Driver(kind string) Driver {
	for _, d := range h.drivers {
		if d.Kind() == kind {
			return d
		}
	}
	return nil
}

// crash SIGKILLs the process when point is the armed crash point.
func (h *Host) crash(point string) { h.crasher.Reach(point) }

// seamReach calls the test seam, if any, at point with the path about to be acted on.
func (h *Host) seamReach(point, path string) {
	if h.seam != nil {
		h.seam(point, path)
	}
}
