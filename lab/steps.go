package lab

// Steps of a migration walked on the lab, and the probes' figures per step: a test or the demo
// says when each step begins (Lab.Step), and the probe records are read back per step (calls,
// failed calls, the longest outage that began in the step and which probe saw it, and any call
// that reached what must not be reached). This is how "nothing that serves changed" and "the
// peers notice nothing" become numbers with the step they belong to.

import (
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"
)

// Step is one step of a migration: what the operator did, from when.
type Step struct {
	Name string    `json:"name"`
	At   time.Time `json:"at"`
}

// Step says that the step name begins now: every probe call from here until the next step
// counts toward it.
func (l *Lab) Step(name string) error {
	l.mu.Lock()
	l.st.Steps = append(l.st.Steps, Step{Name: name, At: time.Now()})
	l.mu.Unlock()
	return l.save()
}

// Steps lists the steps said so far, in order.
func (l *Lab) Steps() []Step {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Step(nil), l.st.Steps...)
}

// StepFigures are the probes' figures for one step.
type StepFigures struct {
	Step string    `json:"step"`
	At   time.Time `json:"at"`
	// Calls and Failures count the calls of every probe that must reach, made in this step.
	Calls    int `json:"calls"`
	Failures int `json:"failures"`
	// LongestOutage is the longest outage that began in this step (it may run into the next),
	// seen by OutageProbe; Ongoing when the record still ends in it.
	LongestOutage time.Duration `json:"longest_outage"`
	OutageProbe   string        `json:"outage_probe,omitempty"`
	Ongoing       bool          `json:"ongoing,omitempty"`
	// Refused counts the calls of probes that must not reach (the store from outside), refused
	// as they must be; Breaches the ones that reached, each an alarm.
	Refused  int      `json:"refused"`
	Breaches int      `json:"breaches"`
	Breached []string `json:"breached,omitempty"`
}

// StepReport reads every probe's record per step: a first row, "lab ready", for the calls from
// when the lab was ready until the first step, then one row per step.
func (l *Lab) StepReport() ([]StepFigures, error) {
	l.mu.Lock()
	probes := append([]probeRunning(nil), l.st.Probes...)
	steps := append([]Step{{Name: "lab ready", At: l.st.ReadyAt}}, l.st.Steps...)
	l.mu.Unlock()
	rows := make([]StepFigures, len(steps))
	for i, s := range steps {
		rows[i] = StepFigures{Step: s.Name, At: s.At}
	}
	// stepOf is the index of the step a call at t belongs to (-1: before the lab was ready).
	stepOf := func(t time.Time) int {
		i := -1
		for j, s := range steps {
			if !t.Before(s.At) {
				i = j
			}
		}
		return i
	}
	for _, p := range probes {
		calls, err := l.readProbe(p)
		if err != nil {
			return nil, err
		}
		every := p.Every
		if every == 0 {
			every = 250 * time.Millisecond
		}
		var failStart time.Time
		outage := func(end time.Time, ongoing bool) {
			i := stepOf(failStart)
			if i < 0 {
				return
			}
			if d := end.Sub(failStart); d > rows[i].LongestOutage {
				rows[i].LongestOutage, rows[i].OutageProbe, rows[i].Ongoing = d, p.Name, ongoing
			}
		}
		for _, c := range calls {
			i := stepOf(c.at)
			if i < 0 {
				continue
			}
			r := &rows[i]
			if p.Expect == ExpectUnreachable {
				if c.ok {
					r.Breaches++
					if !strings.Contains(strings.Join(r.Breached, ","), p.Name) {
						r.Breached = append(r.Breached, p.Name)
					}
				} else {
					r.Refused++
				}
				continue
			}
			r.Calls++
			switch {
			case !c.ok:
				r.Failures++
				if failStart.IsZero() {
					failStart = c.at
				}
			case !failStart.IsZero():
				outage(c.at, false)
				failStart = time.Time{}
			}
		}
		if !failStart.IsZero() && len(calls) > 0 {
			last := calls[len(calls)-1]
			outage(last.at.Add(max(every, last.took, time.Millisecond)), true)
		}
	}
	return rows, nil
}

// readProbe reads one probe's record (none yet: no calls).
func (l *Lab) readProbe(p probeRunning) ([]probeCall, error) {
	f, err := os.Open(p.File)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("probe %s: %w", p.Name, err)
	}
	defer f.Close()
	return readCalls(f, time.Time{})
}

// WriteStepTable writes the figures as a table a person reads: per step its calls and failed
// calls of the probes that must reach, the longest outage that began in it and the probe that saw
// it, and the calls to what must stay unreachable (refused, and reached: always 0).
func WriteStepTable(w io.Writer, rows []StepFigures) error {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "step\tcalls\tfailed\tlongest outage\tseen by\tmust-not-reach: refused\treached")
	for _, r := range rows {
		outage, by := "-", ""
		switch {
		case r.LongestOutage == 0 && r.Failures > 0:
			outage = "(one from the step before)"
		case r.LongestOutage > 0:
			outage, by = roundOutage(r.LongestOutage), r.OutageProbe
			if r.Ongoing {
				outage += " (still failing)"
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%d\t%d\n", r.Step, r.Calls, r.Failures, outage, by, r.Refused, r.Breaches)
	}
	return tw.Flush()
}
