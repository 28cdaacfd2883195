package chaos

// The predecessor's service through the tunnel: p1 calls the hub's service over the tunnel every
// 250 ms for the whole run (the probe p1-tunnel). Its record is read back per step (the lab's
// StepReport: the migration's steps and each fault's), and every outage is judged: one that a
// fault on either end of the tunnel (the hub, p1) explains is reported, not failed; any other
// may last no longer than the gap a take implies (TakeGap).

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"time"

	"meshd/lab"
)

// TakeGap bounds an outage of the service through the tunnel that no fault explains: the gap a
// takeover implies (the found interface stopped, the mesh's bound to its port, a handshake), the
// same bound the e2e tunnel tests hold each take to.
const TakeGap = 5 * time.Second

// faultGrace is how long after a fault on the hub or p1 healed an outage through the tunnel is
// still its doing: the machine's boot, its agent's start, the interface raised, a handshake.
const faultGrace = 30 * time.Second

// Outage is one run of failed calls of the probe through the tunnel, on the history's clock.
type Outage struct {
	From   time.Duration `json:"from_ns"`
	To     time.Duration `json:"to_ns"`
	Length string        `json:"length"`
	// Step is the step it began in.
	Step string `json:"step"`
	// Ongoing: the record ends in it.
	Ongoing bool `json:"ongoing,omitempty"`
	// ExcusedBy are the faults on either end of the tunnel whose windows it overlaps.
	ExcusedBy []string `json:"excused_by,omitempty"`
}

// OutageReport is the probe through the tunnel, per step and outage by outage.
type OutageReport struct {
	Steps   []lab.StepFigures `json:"steps"`
	Outages []Outage          `json:"outages"`
	// Table is Steps as a person reads them (outages.txt in a failure folder).
	Table string `json:"-"`
}

// tunnelOutages reads the probe through the tunnel per step and judges each outage.
func (r *Run) tunnelOutages(ms *Mesh, c Config) {
	rows, err := ms.Lab.StepReport()
	if err != nil {
		r.problem("probe %s per step: %v", TunnelProbe, err)
		return
	}
	r.Outages.Steps = rows
	var b strings.Builder
	_ = lab.WriteStepTable(&b, rows)
	r.Outages.Table = b.String()
	outs, err := r.outages(filepath.Join(ms.Lab.Dir, "probes", TunnelProbe+".log"))
	if err != nil {
		r.problem("probe %s: %v", TunnelProbe, err)
		return
	}
	r.Outages.Outages = outs
	var longest time.Duration
	for _, o := range outs {
		d := o.To - o.From
		longest = max(longest, d)
		switch {
		case o.Ongoing:
			r.problem("probe %s: p1 no longer reaches the hub's service through the tunnel at the end (failing since +%s, step %q)", TunnelProbe, o.From.Round(time.Millisecond), o.Step)
		case len(o.ExcusedBy) == 0 && d > TakeGap:
			r.problem("probe %s: the hub's service was out %s through the tunnel (+%s..+%s, step %q) with no fault on the hub or p1 to explain it; a take implies at most %s",
				TunnelProbe, o.Length, o.From.Round(time.Millisecond), o.To.Round(time.Millisecond), o.Step, TakeGap)
		}
	}
	c.Logf("chaos seed %d: the hub's service through the tunnel (probe %s): %d outages, the longest %s; per step:\n%s",
		r.Seed, TunnelProbe, len(outs), longest.Round(time.Millisecond), r.Outages.Table)
}

// tunnelOutagesSoFar judges the probe through the tunnel mid-run (after a fault): an outage that
// ended, or one still going on for longer than TakeGap, that no fault on the hub or p1 explains
// may last no more than TakeGap. One still going on that a fault explains is the end's to judge.
func (r *Run) tunnelOutagesSoFar(ms *Mesh, when string) {
	outs, err := r.outages(filepath.Join(ms.Lab.Dir, "probes", TunnelProbe+".log"))
	if err != nil {
		r.problem("%s: probe %s: %v", when, TunnelProbe, err)
		return
	}
	for _, o := range outs {
		if len(o.ExcusedBy) == 0 && o.To-o.From > TakeGap {
			state := "out"
			if o.Ongoing {
				state = "still out, so far"
			}
			r.problem("%s: probe %s: the hub's service was %s %s through the tunnel (+%s..+%s, step %q) with no fault on the hub or p1 to explain it; a take implies at most %s",
				when, TunnelProbe, state, o.Length, o.From.Round(time.Millisecond), o.To.Round(time.Millisecond), o.Step, TakeGap)
		}
	}
}

// outages reads a probe's record into its outages: each run of failed calls from the first
// failure to the next success, with the step it began in and the faults on the tunnel's ends
// (hub, p1; a partition of the hub cuts it from the servers only) whose windows it overlaps.
func (r *Run) outages(record string) ([]Outage, error) {
	f, err := os.Open(record)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r.mu.Lock() // the migration says its steps meanwhile
	steps := make([]Step, 0, len(r.Steps))
	for _, st := range r.Steps {
		steps = append(steps, Step{Name: st.Name, At: st.At}) // Done and Note are the migration's to write
	}
	r.mu.Unlock()
	var out []Outage
	var from time.Time
	var last time.Time
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	add := func(to time.Time, ongoing bool) {
		o := Outage{From: r.History.At(from), To: r.History.At(to), Ongoing: ongoing}
		o.Length = (o.To - o.From).Round(time.Millisecond).String()
		o.Step = "before the workload"
		for _, st := range steps {
			if time.Duration(st.At) <= o.From {
				o.Step = st.Name
			}
		}
		for _, fl := range r.Faults {
			if (fl.Machine != "hub" && fl.Machine != Peer) || fl.Kind == FaultPartition {
				continue
			}
			if o.From <= time.Duration(fl.Healed)+faultGrace && o.To >= time.Duration(fl.Begin)-time.Second {
				o.ExcusedBy = append(o.ExcusedBy, fl.String())
			}
		}
		out = append(out, o)
	}
	for sc.Scan() {
		fs := strings.SplitN(sc.Text(), " ", 3)
		if len(fs) < 2 {
			continue
		}
		ts, err := time.Parse(time.RFC3339Nano, fs[0])
		if err != nil {
			continue
		}
		last = ts
		if r.History.At(ts) < 0 {
			continue // before the workload (the lab's and the mesh's raising)
		}
		switch {
		case fs[1] != "ok" && from.IsZero():
			from = ts
		case fs[1] == "ok" && !from.IsZero():
			add(ts, false)
			from = time.Time{}
		}
	}
	if !from.IsZero() {
		add(last, true)
	}
	return out, sc.Err()
}

// migrated checks that the migration's steps were each done or cut short by the run's end, never
// given up on, and says how far it came.
func (r *Run) migrated(w *Workload, c Config) {
	var done []string
	for _, st := range r.Steps {
		if !strings.HasPrefix(st.Name, "migration: ") {
			continue
		}
		name := strings.TrimPrefix(st.Name, "migration: ")
		if st.Note != "" {
			r.problem("the migration gave up at %q: %s", name, st.Note)
		}
		if st.Done {
			done = append(done, name)
		}
	}
	if len(done) == 0 && !w.Migration.Enrolled() {
		r.problem("the migration did not begin: p1 never enrolled")
	}
	c.Logf("chaos seed %d: the migration's steps done: %s", r.Seed, strings.Join(done, "; "))
}
