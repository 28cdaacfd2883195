package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"meshd/fsm"
)

// DefaultInterval is how often the loop reconciles when no new declaration arrives.
const DefaultInterval = 10 * time.Second

// Config is how the agent opens the host.
type Config struct {
	// DataDir is the node's data dir; the record store is DataDir/host.db.
	DataDir string
	// Root prefixes every declared path: "/etc/x" is Root/etc/x. Empty means "/" (production);
	// tests give a temporary directory.
	Root string
	// Interval is the timer of the level-triggered loop; zero means DefaultInterval.
	Interval time.Duration
	// Logger receives what the host does; nil means slog.Default().
	Logger *slog.Logger
	// Drivers converge the resource kinds other than files (container, opening). Each is called
	// on every pass with the declared resources of its kind.
	Drivers []Driver
	// Observe, when set, is told after each pass how long each resource kind took and how many of
	// its resources failed (the agent's metrics); it must not block.
	Observe func(kind string, took time.Duration, failed int)
}

// Driver converges the resources of one kind. The reconciler calls Reconcile on every pass with
// every declared resource of that kind, taken or not (Resource.Taken says whether it converges or
// is only prepared, what is found being held), and puts the outcome in the report. A pass with
// nothing to do must change nothing.
type Driver interface {
	// Kind is the resource kind it converges: fsm.KindContainer or fsm.KindOpening.
	Kind() string
	Reconcile(ctx context.Context, pass Pass) Outcome
}

// Pass is what one driver gets in one pass.
type Pass struct {
	Declaration *fsm.Declaration
	// Resources are the declared resources of the driver's kind, in declaration order.
	Resources []fsm.Resource
	// Records is the driver's own durable memory in the record store.
	Records *Records
}

// Outcome is what a driver reports of one pass.
type Outcome struct {
	// Errors name each resource that failed and why; the others still converged.
	Errors []ResourceError
	// Changes counts what the pass changed on the machine or in the record store.
	Changes int
	// Detail is the driver's part of the report (held containers, openings in force, …), put in
	// Report.Kinds under the driver's kind. It must encode as JSON.
	Detail any
}

// Report is what the host saw and did in one pass: what the agent serves for `meshd node show`.
type Report struct {
	Node string    `json:"node"`
	Mode fsm.Mode  `json:"mode"`
	When time.Time `json:"when"`
	// Taken are the modules the pass's declaration had taken (on a converged node every assigned
	// one): what tells a reader following a take that this report is of a pass that knew it.
	Taken []string `json:"taken"`
	// Assigned are the modules the pass's declaration had assigned: a take preview reads a
	// report only once it knows of the module's assignment. Nil in a report from an agent that
	// did not say (an older meshd).
	Assigned []string `json:"assigned"`
	// Held are found files kept as they are until their module is taken, including those whose
	// module has been unassigned since (they stay, never removed).
	Held []HeldFile `json:"held"`
	// Written are the declared files the host wrote (or, create_once, keeps as they are).
	Written []WrittenFile `json:"written"`
	// Errors are the resources that failed this pass, each with why.
	Errors []ResourceError `json:"errors"`
	// Changes counts the files written or removed and records stored this pass; 0 is a pass that
	// wrote nothing.
	Changes int `json:"changes"`
	// Kinds holds the other drivers' parts of the report, by resource kind.
	Kinds map[string]any `json:"kinds,omitempty"`
	// Listeners are the machine's listening sockets this pass (Listeners: a read of
	// /proc/net), what a converge preview marks; nil in a report from an agent that did not
	// read them, ListenersError why a read failed.
	Listeners      []Listener `json:"listeners"`
	ListenersError string     `json:"listeners_error,omitempty"`
}

// ChangedBySomethingElse is a held file's reason when its content is not what was recorded.
const ChangedBySomethingElse = "changed by something else"

// RemovedBySomethingElse is a held file's reason when it is gone.
const RemovedBySomethingElse = "removed by something else"

// HeldFile is a found file kept as it is.
type HeldFile struct {
	Path   string `json:"path"`
	Module string `json:"module"`
	// RecordedHash is the hash of the original recorded when it was found; CurrentHash is the
	// hash now ("" when the file is gone).
	RecordedHash string `json:"recorded_hash"`
	CurrentHash  string `json:"current_hash"`
	Changed      bool   `json:"changed"`
	// Reason says why Changed: ChangedBySomethingElse or RemovedBySomethingElse.
	Reason string    `json:"reason,omitempty"`
	Since  time.Time `json:"since"`
	// Unassigned is true once no assigned module declares the file: it stays where it is.
	Unassigned bool `json:"unassigned,omitempty"`
}

// WrittenFile is a declared file the host converges.
type WrittenFile struct {
	Path   string    `json:"path"`
	Module string    `json:"module"`
	Hash   string    `json:"hash"`
	At     time.Time `json:"at,omitzero"`
	// Kept is true for a create_once file that was there already: it is never rewritten.
	Kept bool `json:"kept,omitempty"`
}

// ResourceError is one resource that failed, and why.
type ResourceError struct {
	Resource string `json:"resource"`
	Module   string `json:"module"`
	Reason   string `json:"reason"`
}

func (e ResourceError) Error() string {
	return fmt.Sprintf("%s (module %s): %s", e.Resource, e.Module, e.Reason)
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
	last Report
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
	outs      map[string]Outcome
	listeners ListenerReader // the machine's listening sockets, read each pass; guarded by pass

	crasher *crasher // CrashEnv's point; reaches nothing in production
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
	h := &Host{root: root, interval: cfg.Interval, log: cfg.Logger, owners: map[string]ids{}, outs: map[string]Outcome{}, observe: cfg.Observe}
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
	h.crasher = newCrasher(h.log)
	if err := ensureDir(cfg.DataDir); err != nil {
		return nil, fmt.Errorf("host: %w", err)
	}
	if h.st, err = openStore(storePath(cfg.DataDir)); err != nil {
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

// Report returns the report of the last pass (the zero Report before the first).
func (h *Host) Report() Report {
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
func (h *Host) Reconcile(ctx context.Context, d *fsm.Declaration) Report {
	return h.reconcile(ctx, d, nil)
}

// reconcile runs a pass over the files and the drivers of the kinds in scope (every driver when
// scope is nil); a driver left out keeps its part of the report from its last pass. A pass that
// stages a take's files runs every driver, since the take is staged across kinds. It is the pass's
// one ordered sequence (read the records, files, each driver, listeners, the report), each step a
// call; kept in one place so the order a pass runs in reads at once.
func (h *Host) reconcile(ctx context.Context, d *fsm.Declaration, scope map[string]bool) Report {
	h.pass.Lock()
	defer h.pass.Unlock()
	rep := Report{When: time.Now().UTC(), Held: []HeldFile{}, Written: []WrittenFile{}, Errors: []ResourceError{}}
	if d == nil {
		rep.Errors = append(rep.Errors, ResourceError{Resource: "declaration", Reason: "no declaration to reconcile"})
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
		var out Outcome
		if scope == nil || scope[drv.Kind()] {
			started := time.Now()
			out = drv.Reconcile(ctx, Pass{Declaration: d, Resources: byKind[drv.Kind()],
				Records: &Records{s: h.st, kind: []byte(drv.Kind())}})
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
			rep.Errors = append(rep.Errors, ResourceError{Resource: r.ID(), Module: r.Module,
				Reason: fmt.Sprintf("no driver for resource kind %q on this host", kind)})
		}
	}
	if ctx.Err() != nil {
		rep.Errors = append(rep.Errors, ResourceError{Resource: "pass", Reason: "interrupted: " + ctx.Err().Error()})
	}
	if scope != nil && !ranDriver {
		// A pass over files only: the sockets are the last pass's (files open none).
		h.mu.Lock()
		rep.Listeners, rep.ListenersError = h.last.Listeners, h.last.ListenersError
		h.mu.Unlock()
	} else if ls, err := h.listeners.Read(); err != nil {
		rep.ListenersError = fmt.Sprintf("read listening sockets: %v", err)
	} else {
		rep.Listeners = append([]Listener{}, ls...)
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

// Passed returns a channel that receives after each pass (the report is then Report's); a pass
// never waits for its reader, and wake-ups the reader has not taken yet are one. Each call gives
// a channel of its own, so the agent's report publishers each learn of every pass at once
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

func (h *Host) hasDriver(kind string) bool {
	for _, d := range h.drivers {
		if d.Kind() == kind {
			return true
		}
	}
	return false
}

// CrashEnv names the environment variable that arms a crash point (see the package doc): its value
// is a point's name, or "name#n" to crash at the n-th time the point is reached.
const CrashEnv = "MESHD_TEST_CRASH_AT"

func parseCrash(v string) (string, int) {
	if v == "" {
		return "", 0
	}
	name, nth, ok := strings.Cut(v, "#")
	n := 1
	if ok {
		if x, err := strconv.Atoi(nth); err == nil && x > 0 {
			n = x
		}
	}
	return name, n
}

// crasher is the armed crash point of one process part (the host, a driver).
type crasher struct {
	at        string // CrashEnv's point, "" in production
	nth, hits int
	log       *slog.Logger
	// kill ends the process (SIGKILL); the unit tests put a panic in its place.
	kill func()
}

func newCrasher(log *slog.Logger) *crasher {
	c := &crasher{log: log}
	c.at, c.nth = parseCrash(os.Getenv(CrashEnv))
	return c
}

// reach SIGKILLs the process when point is the armed crash point.
func (c *crasher) reach(point string) {
	if c.at != point {
		return
	}
	c.hits++
	if c.hits < c.nth {
		return
	}
	c.log.Warn("crash point reached: killing the process", "point", point)
	if c.kill != nil {
		c.kill()
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal arrives; nothing after this point runs
}

// crash SIGKILLs the process when point is the armed crash point.
func (h *Host) crash(point string) { h.crasher.reach(point) }

// seamReach calls the test seam, if any, at point with the path about to be acted on.
func (h *Host) seamReach(point, path string) {
	if h.seam != nil {
		h.seam(point, path)
	}
}
