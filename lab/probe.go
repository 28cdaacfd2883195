package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// Expectation says what a probe is there to show.
type Expectation string

const (
	// ExpectReach: the target serves; every failure is an outage.
	ExpectReach Expectation = "reach"
	// ExpectUnreachable: the target must never answer; every success is a breach.
	ExpectUnreachable Expectation = "unreachable"
)

// ProbeSpec is one continuous caller: from a machine's network, to a target.
type ProbeSpec struct {
	Name string `json:"name"`
	// From is the machine whose network the calls leave from.
	From string `json:"from"`
	// Target is http://HOST:PORT/PATH or tcp://HOST:PORT.
	Target string      `json:"target"`
	Expect Expectation `json:"expect"`
	// Every is the interval between calls (default 250ms).
	Every time.Duration `json:"every,omitempty"`
	// Timeout is one call's timeout (default 1s). A benchmark measuring sub-second gaps shortens
	// it: a call whose packets were lost fails after Timeout, so a gap reads at most about
	// Timeout longer than it was.
	Timeout time.Duration `json:"timeout,omitempty"`
	// Container, when set, runs the probe inside a container of that name on machine From's
	// engine (the lab's image), so it calls the way the machine's containers do: over the
	// container runtime's bridge. Probes naming the same container run in one. Target may name
	// another container's bridge address as {container:NAME}.
	Container string `json:"container,omitempty"`
}

// ProbeSummary is what a probe's record says.
type ProbeSummary struct {
	Name      string      `json:"name"`
	From      string      `json:"from"`
	Target    string      `json:"target"`
	Expect    Expectation `json:"expect"`
	Calls     int         `json:"calls"`
	Successes int         `json:"successes"`
	Failures  int         `json:"failures"`
	First     time.Time   `json:"first"`
	Last      time.Time   `json:"last"`
	// LongestOutage is the longest time from a failed call to the next successful one (or to the
	// last call, if it is still failing); OutageStart is when it began.
	LongestOutage time.Duration `json:"longest_outage"`
	OutageStart   time.Time     `json:"outage_start,omitzero"`
	// Ongoing: the record ends in failed calls (the outage is still going on).
	Ongoing     bool   `json:"ongoing,omitempty"`
	LastError   string `json:"last_error,omitempty"`
	LastSuccess string `json:"last_success,omitempty"`
}

// Holds reports whether the probe's expectation held over its record: a reaching probe never
// failed, an unreachable one never succeeded (and each made at least one call).
func (s ProbeSummary) Holds() bool {
	if s.Calls == 0 {
		return false
	}
	if s.Expect == ExpectUnreachable {
		return s.Successes == 0
	}
	return s.Failures == 0
}

func (s ProbeSummary) String() string {
	verdict := "held throughout"
	switch {
	case s.Calls == 0:
		verdict = "no calls yet"
	case !s.Holds() && s.Expect == ExpectUnreachable:
		verdict = "REACHED (it must not be)"
	case !s.Holds():
		verdict = "had outages"
	}
	counts := fmt.Sprintf("%5d ok %5d failed", s.Successes, s.Failures)
	if s.Expect == ExpectUnreachable {
		// Its failures are the point: they read as refusals, its successes as the alarm.
		counts = fmt.Sprintf("%5d refused as expected, %d reached", s.Failures, s.Successes)
	}
	out := fmt.Sprintf("%-14s %-8s -> %-32s expect %-11s %5d calls %s  %s",
		s.Name, s.From, s.Target, s.Expect, s.Calls, counts, verdict)
	// For a probe that must not reach, failures are the point: only a reaching probe has outages.
	if s.LongestOutage > 0 && s.Expect != ExpectUnreachable {
		out += fmt.Sprintf("; longest outage %s at %s", roundOutage(s.LongestOutage), s.OutageStart.Format("15:04:05.000"))
		if s.Ongoing {
			out += " (still failing)"
		}
	}
	if s.LastError != "" && !s.Holds() {
		out += "; last error: " + s.LastError
	}
	return out
}

// Summarize reads a probe record (labsvc probe's lines), counting only calls at or after since.
// A probe's interval is not in its record: an outage still going on at the end is read as lasting
// at least its last failed call (SummarizeEvery knows the interval).
func Summarize(r io.Reader, since time.Time) (ProbeSummary, error) {
	return SummarizeEvery(r, since, 0)
}

// SummarizeEvery is Summarize for a probe that calls every interval. An outage lasts from its
// first failed call to the next successful one. One still going on at the end of the record
// lasts at least until the next call would have been made (its last failed call plus the
// interval, or plus the call's own time when that is longer): a single failed call is an outage
// of at least one interval, never "0s".
func SummarizeEvery(r io.Reader, since time.Time, every time.Duration) (ProbeSummary, error) {
	var s ProbeSummary
	calls, err := readCalls(r, since)
	var failStart time.Time
	for _, c := range calls {
		if s.Calls == 0 {
			s.First = c.at
		}
		s.Calls++
		s.Last = c.at
		if c.ok {
			s.Successes++
			s.LastSuccess = c.detail
			if !failStart.IsZero() {
				s.noteOutage(failStart, c.at)
				failStart = time.Time{}
			}
			continue
		}
		s.Failures++
		s.LastError = c.detail
		if failStart.IsZero() {
			failStart = c.at
		}
	}
	if !failStart.IsZero() {
		last := calls[len(calls)-1]
		s.noteOutage(failStart, last.at.Add(max(every, last.took, time.Millisecond)))
		s.Ongoing = true
	}
	return s, err
}

// probeCall is one line of a probe record.
type probeCall struct {
	at     time.Time
	ok     bool
	took   time.Duration
	detail string
}

// readCalls reads a probe record's calls at or after since.
func readCalls(r io.Reader, since time.Time) ([]probeCall, error) {
	var calls []probeCall
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), " ", 4)
		if len(f) < 3 {
			continue // a line being written
		}
		ts, err := time.Parse(time.RFC3339Nano, f[0])
		if err != nil {
			return calls, fmt.Errorf("probe record line %q: %w", sc.Text(), err)
		}
		if ts.Before(since) {
			continue
		}
		c := probeCall{at: ts, ok: f[1] == "ok"}
		c.took, _ = time.ParseDuration(f[2])
		if len(f) == 4 {
			c.detail = f[3]
		}
		calls = append(calls, c)
	}
	return calls, sc.Err()
}

// roundOutage rounds an outage for reading: to the millisecond, and never to "0s" (an outage
// shorter than a millisecond reads as "<1ms").
func roundOutage(d time.Duration) string {
	if d > 0 && d < time.Millisecond {
		return "<1ms"
	}
	return d.Round(time.Millisecond).String()
}

func (s *ProbeSummary) noteOutage(from, to time.Time) {
	if d := to.Sub(from); d > s.LongestOutage {
		s.LongestOutage = d
		s.OutageStart = from
	}
}

// StartProbe starts a probe: labsvc probe in the network namespace of machine p.From, recording
// to PROBES/NAME.log in the lab's directory. It keeps running across the machine's reboots (the
// lab's instruments are not the machine's processes) until the lab is torn down.
func (l *Lab) StartProbe(ctx context.Context, p ProbeSpec) error {
	if p.Container != "" {
		return l.StartContainerProbes(ctx, []ProbeSpec{p})
	}
	m := l.Machine(p.From)
	if m == nil {
		return fmt.Errorf("probe %s: no machine %q", p.Name, p.From)
	}
	if p.Every == 0 {
		p.Every = 250 * time.Millisecond
	}
	if p.Expect == "" {
		p.Expect = ExpectReach
	}
	dir := filepath.Join(l.Dir, "probes")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	file := filepath.Join(dir, p.Name+".log")
	if p.Timeout == 0 {
		p.Timeout = time.Second
	}
	cmd := exec.Command("nsenter", "--net="+m.Netns(), "--", l.Labsvc(), "probe",
		"--target", p.Target, "--every", p.Every.String(), "--timeout", p.Timeout.String(), "--out", file)
	cmd.Env = machineEnv()
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("probe %s from %s: %w", p.Name, p.From, err)
	}
	go func() { _ = cmd.Wait() }()
	l.mu.Lock()
	l.st.Probes = append(l.st.Probes, probeRunning{ProbeSpec: p, PID: cmd.Process.Pid, File: file})
	l.mu.Unlock()
	return l.save()
}

// containerAddr finds {container:NAME} in a target.
var containerAddr = regexp.MustCompile(`\{container:([A-Za-z0-9_.-]+)\}`)

// StartContainerProbes starts probes that share one container (each spec's From, Container and
// Every the same): labsvc probe in a container on machine From's engine, restarted by the engine
// like the machine's other containers, recording to PROBES/NAME.log in the lab's directory
// (bind-mounted at the same path). A {container:NAME} in a target is that container's address on
// its bridge, read when the probe starts.
func (l *Lab) StartContainerProbes(ctx context.Context, specs []ProbeSpec) error {
	if len(specs) == 0 {
		return nil
	}
	first := specs[0]
	m := l.Machine(first.From)
	if m == nil {
		return fmt.Errorf("probe %s: no machine %q", first.Name, first.From)
	}
	if first.Every == 0 {
		first.Every = 250 * time.Millisecond
	}
	if first.Timeout == 0 {
		first.Timeout = time.Second
	}
	dir := filepath.Join(l.Dir, "probes")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	args := []string{"run", "-d", "--name", first.Container, "--restart", "unless-stopped", "-v", dir + ":" + dir,
		ImageName, "probe", "--every", first.Every.String(), "--timeout", first.Timeout.String()}
	var running []probeRunning
	for _, p := range specs {
		if p.Every == 0 {
			p.Every = 250 * time.Millisecond
		}
		if p.Timeout == 0 {
			p.Timeout = time.Second
		}
		if p.From != first.From || p.Container != first.Container || p.Every != first.Every || p.Timeout != first.Timeout {
			return fmt.Errorf("probe %s: shares container %s with probe %s but not its machine, container, interval or timeout", p.Name, first.Container, first.Name)
		}
		if p.Expect == "" {
			p.Expect = ExpectReach
		}
		var err error
		if p.Target, err = l.resolveTarget(ctx, m, p.Target); err != nil {
			return fmt.Errorf("probe %s: %w", p.Name, err)
		}
		file := filepath.Join(dir, p.Name+".log")
		args = append(args, "--target", p.Target, "--out", file)
		running = append(running, probeRunning{ProbeSpec: p, File: file})
	}
	if _, err := m.Docker(ctx, args...); err != nil {
		return fmt.Errorf("probes in container %s on %s: %w", first.Container, first.From, err)
	}
	l.mu.Lock()
	l.st.Probes = append(l.st.Probes, running...)
	l.mu.Unlock()
	return l.save()
}

// resolveTarget replaces each {container:NAME} in target by that container's bridge address on
// machine m's engine.
func (l *Lab) resolveTarget(ctx context.Context, m *Machine, target string) (string, error) {
	var err error
	out := containerAddr.ReplaceAllStringFunc(target, func(ref string) string {
		name := containerAddr.FindStringSubmatch(ref)[1]
		addr, ierr := m.Docker(ctx, "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}", name)
		f := strings.Fields(addr)
		if ierr != nil || len(f) == 0 {
			err = fmt.Errorf("target %s: no bridge address for container %s on %s: %v", target, name, m.Name, ierr)
			return ref
		}
		return f[0]
	})
	return out, err
}

// Probes summarises every probe's record since the lab was ready (calls made while it came up
// are not counted).
func (l *Lab) Probes() ([]ProbeSummary, error) {
	l.mu.Lock()
	probes := append([]probeRunning(nil), l.st.Probes...)
	since := l.st.ReadyAt
	l.mu.Unlock()
	var out []ProbeSummary
	for _, p := range probes {
		s, err := l.summarize(p, since)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// Probe summarises one probe's record, counting calls at or after since (the zero time: since
// the lab was ready).
func (l *Lab) Probe(name string, since time.Time) (ProbeSummary, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if since.IsZero() {
		since = l.st.ReadyAt
	}
	for _, p := range l.st.Probes {
		if p.Name == name {
			return l.summarize(p, since)
		}
	}
	return ProbeSummary{}, fmt.Errorf("lab %s: no probe %q", l.Name, name)
}

func (l *Lab) summarize(p probeRunning, since time.Time) (ProbeSummary, error) {
	f, err := os.Open(p.File)
	if errors.Is(err, os.ErrNotExist) {
		// Started, not yet called.
		return ProbeSummary{Name: p.Name, From: p.From, Target: p.Target, Expect: p.Expect}, nil
	}
	if err != nil {
		return ProbeSummary{}, fmt.Errorf("probe %s: %w", p.Name, err)
	}
	defer f.Close()
	every := p.Every
	if every == 0 {
		every = 250 * time.Millisecond
	}
	s, err := SummarizeEvery(f, since, every)
	s.Name, s.From, s.Target, s.Expect = p.Name, p.From, p.Target, p.Expect
	return s, err
}

func killPID(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }
