package host

// Drift between passes. The loop reconciles on every declaration and on every tick of its
// interval; between those, three watches tell it at once that something changed under it:
// inotify on the directories of the declared files (inotify.go), the container engine's
// event stream (containers.Driver.WatchDrift) and rtnetlink's link and address messages for the
// tunnel's interfaces (tunnel.Driver.WatchDrift). A touch is coalesced with whatever else arrives
// within driftSettle, and the loop then runs a drift pass: the files (always: they are cheap,
// and a take's staged files follow its containers) and the drivers of the kinds touched, the
// other drivers' parts of the report kept from their last pass. The timer stays the safety net
// for what a watch misses (a lost event, an engine that was away, a file beyond a symlink).

import (
	"context"
	"sync"
	"time"

	"meshd/fsm"
	"meshd/report"
)

const (
	// driftSettle is how long a touch waits for the rest of its burst (a writer's truncate,
	// write and close; the engine's kill, die and destroy) before the pass reads the machine.
	driftSettle = 30 * time.Millisecond
	// driftMinGap is the least time between the starts of two drift passes, so a file rewritten
	// without pause costs at most a few passes a second, never a busy loop.
	driftMinGap = 100 * time.Millisecond
)

// drift collects what the watches touched until the loop takes it for a pass.
type drift struct {
	mu       sync.Mutex
	kinds    map[string]bool
	armed    bool
	lastPass time.Time
	// due receives once a touched burst has settled.
	due chan struct{}
	// names are, by kind, the names whose events count: the containers declared or known to the
	// records, the tunnel's interfaces (the mesh's, and the found one it takes over or still uses).
	names map[string]map[string]bool
}

func newDrift() *drift {
	return &drift{kinds: map[string]bool{}, due: make(chan struct{}, 1), names: map[string]map[string]bool{}}
}

// touch marks kind as changed on the machine; the loop runs a pass for it once the burst settles.
func (dr *drift) touch(kind string) {
	dr.mu.Lock()
	defer dr.mu.Unlock()
	dr.kinds[kind] = true
	if dr.armed {
		return
	}
	dr.armed = true
	wait := max(driftSettle, time.Until(dr.lastPass.Add(driftMinGap)))
	time.AfterFunc(wait, func() {
		select {
		case dr.due <- struct{}{}:
		default:
		}
	})
}

// take returns the kinds touched since the last take and starts a new burst.
func (dr *drift) take() map[string]bool {
	dr.mu.Lock()
	defer dr.mu.Unlock()
	k := dr.kinds
	dr.kinds, dr.armed, dr.lastPass = map[string]bool{}, false, time.Now()
	return k
}

// touched is a driver watch's callback for kind: an event about one of names (a container's
// name and its old name on a rename; a link's name), or with no name when events may have been
// missed. Only names the last pass declared or saw wake a pass.
func (dr *drift) touched(kind string, names ...string) {
	dr.mu.Lock()
	hit := len(names) == 0
	for _, n := range names {
		hit = hit || dr.names[kind][n]
	}
	dr.mu.Unlock()
	if hit {
		dr.touch(kind)
	}
}

// driftWatch is the running watches of one Run.
type driftWatch struct {
	h     *Host
	dr    *drift
	files *fileWatch // nil when inotify is not available: the timer alone notices
	stop  context.CancelFunc
	done  sync.WaitGroup
}

// watchDrift starts the watches of the machine under h; close stops them.
func (h *Host) watchDrift(ctx context.Context) *driftWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &driftWatch{h: h, dr: newDrift(), stop: cancel}
	if h.timerOnly {
		return w
	}
	fw, err := newFileWatch(h.root, func() { w.dr.touch(fsm.KindFile) }, h.log)
	if err != nil {
		h.log.Warn("file watch unavailable: drift in files is noticed on the timer only", "err", err)
	} else {
		w.files = fw
		w.done.Add(1)
		go func() { defer w.done.Done(); fw.run(ctx) }()
	}
	for _, d := range h.drivers {
		if src, ok := d.(driftSource); ok {
			kind := d.Kind()
			w.done.Add(1)
			go func() {
				defer w.done.Done()
				src.WatchDrift(ctx, func(names ...string) { w.dr.touched(kind, names...) })
			}()
		}
	}
	h.mu.Lock()
	h.drift = w
	h.mu.Unlock()
	return w
}

// driftSource is a driver that can watch its kind on the machine between passes: it calls
// touched with the names an event concerns (none when events may have been lost) until ctx ends.
type driftSource interface {
	WatchDrift(ctx context.Context, touched func(names ...string))
}

// follow points the watches at what a pass declared and saw: the directories of the declared
// files and of every file the report names (held ones whose module was unassigned too), the
// containers declared or known to the records, and the tunnel's interfaces.
func (w *driftWatch) follow(d *fsm.Declaration, rep report.Report) {
	if d == nil {
		return
	}
	var paths []string
	names := map[string]bool{}
	links := map[string]bool{}
	for _, l := range []string{d.Tunnel.Interface, d.Tunnel.Takeover, d.Tunnel.Rides} {
		if l != "" {
			links[l] = true
		}
	}
	for _, r := range d.Resources {
		switch {
		case r.File != nil:
			paths = append(paths, r.File.Path)
		case r.Container != nil:
			names[r.Container.Name] = true
		}
	}
	for _, hf := range rep.Held {
		paths = append(paths, hf.Path)
	}
	for _, wf := range rep.Written {
		paths = append(paths, wf.Path)
	}
	if cr, ok := rep.Kinds[fsm.KindContainer].(*report.ContainerReport); ok {
		for _, v := range cr.Containers {
			names[v.Name] = true
		}
	}
	w.dr.mu.Lock()
	w.dr.names = map[string]map[string]bool{fsm.KindContainer: names, fsm.KindTunnel: links}
	w.dr.mu.Unlock()
	if w.files != nil {
		w.files.follow(paths)
	}
}

func (w *driftWatch) close() {
	w.h.mu.Lock()
	if w.h.drift == w {
		w.h.drift = nil
	}
	w.h.mu.Unlock()
	w.stop()
	w.done.Wait()
	if w.files != nil {
		w.files.close()
	}
}
