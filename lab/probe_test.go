package lab

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestSummarizeFindsTheLongestOutage(t *testing.T) {
	record := `2026-01-02T10:00:00Z ok 1ms hello from webapp
2026-01-02T10:00:01Z fail 1s dial tcp: i/o timeout
2026-01-02T10:00:02Z fail 1s dial tcp: i/o timeout
2026-01-02T10:00:03Z ok 1ms hello from webapp
2026-01-02T10:00:04Z fail 1s connection refused
2026-01-02T10:00:05Z ok 1ms hello from webapp
2026-01-02T10:00:06Z fail 2ms connection refused
2026-01-02T10:00:0`
	s, err := Summarize(strings.NewReader(record), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	s.Expect = ExpectReach
	if s.Calls != 7 || s.Successes != 3 || s.Failures != 4 {
		t.Errorf("calls/ok/failed = %d/%d/%d, want 7/3/4", s.Calls, s.Successes, s.Failures)
	}
	if s.LongestOutage != 2*time.Second || !s.OutageStart.Equal(time.Date(2026, 1, 2, 10, 0, 1, 0, time.UTC)) {
		t.Errorf("longest outage %s at %s, want 2s at 10:00:01", s.LongestOutage, s.OutageStart)
	}
	if s.LastError != "connection refused" || s.Holds() {
		t.Errorf("last error %q, holds %v", s.LastError, s.Holds())
	}

	since := time.Date(2026, 1, 2, 10, 0, 3, 0, time.UTC)
	s, err = Summarize(strings.NewReader(record), since)
	if err != nil {
		t.Fatal(err)
	}
	if s.Calls != 4 || s.LongestOutage != time.Second {
		t.Errorf("since 10:00:03: %d calls, longest outage %s; want 4 and 1s", s.Calls, s.LongestOutage)
	}

	s, _ = Summarize(strings.NewReader("2026-01-02T10:00:00Z fail 1s refused\n2026-01-02T10:00:01Z fail 1s refused\n"), time.Time{})
	s.Expect = ExpectUnreachable
	if !s.Holds() {
		t.Errorf("an unreachable probe that never succeeded should hold: %s", s)
	}
	if line := s.String(); !strings.Contains(line, "2 refused as expected, 0 reached") || strings.Contains(line, "0 ok") {
		t.Errorf("an unreachable probe's line should count refusals as expected: %s", line)
	}
}

// A single failed call reads as an outage of at least one interval, never "0s": at the end of the
// record (still failing) and between two successful calls.
func TestSummarizeOneFailedCallIsAnOutage(t *testing.T) {
	s, err := SummarizeEvery(strings.NewReader("2026-01-02T10:00:00Z ok 1ms hello\n2026-01-02T10:00:00.25Z fail 0.3ms connection refused\n"), time.Time{}, 250*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	s.Expect = ExpectReach
	if s.LongestOutage != 250*time.Millisecond || !s.Ongoing {
		t.Errorf("one failed call at the end: longest outage %s, ongoing %v; want 250ms, still failing", s.LongestOutage, s.Ongoing)
	}
	if line := s.String(); strings.Contains(line, "outage 0s") || !strings.Contains(line, "longest outage 250ms") || !strings.Contains(line, "still failing") {
		t.Errorf("line: %s", line)
	}
	s, _ = SummarizeEvery(strings.NewReader("2026-01-02T10:00:00Z fail 0.3ms refused\n2026-01-02T10:00:00.25Z ok 1ms hello\n"), time.Time{}, 250*time.Millisecond)
	if s.LongestOutage != 250*time.Millisecond || s.Ongoing {
		t.Errorf("one failed call then a success: %s, ongoing %v", s.LongestOutage, s.Ongoing)
	}
	if got := roundOutage(300 * time.Microsecond); got != "<1ms" {
		t.Errorf("an outage under a millisecond reads %q", got)
	}
}

// The step report counts each probe's calls in the step they were made in, puts an outage in the
// step it began in, and counts a call that reached what must not be reached as a breach.
func TestStepReport(t *testing.T) {
	dir := t.TempDir()
	at := func(s string) time.Time {
		ts, err := time.Parse(time.RFC3339Nano, "2026-01-02T10:00:"+s+"Z")
		if err != nil {
			t.Fatal(err)
		}
		return ts
	}
	write := func(name, record string) string {
		p := dir + "/" + name + ".log"
		if err := os.WriteFile(p, []byte(record), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	served := write("served", `2026-01-02T10:00:00Z ok 1ms hello
2026-01-02T10:00:01Z ok 1ms hello
2026-01-02T10:00:02Z fail 1ms refused
2026-01-02T10:00:02.5Z fail 1ms refused
2026-01-02T10:00:03.5Z ok 1ms hello
2026-01-02T10:00:04Z fail 1ms refused
`)
	store := write("store", "2026-01-02T10:00:00Z fail 1s timeout\n2026-01-02T10:00:03Z ok 1ms\n")
	l := &Lab{Dir: dir, st: labState{ReadyAt: at("00"), Probes: []probeRunning{
		{ProbeSpec: ProbeSpec{Name: "served", Expect: ExpectReach, Every: 500 * time.Millisecond}, File: served},
		{ProbeSpec: ProbeSpec{Name: "store", Expect: ExpectUnreachable}, File: store},
	}, Steps: []Step{{Name: "take webapp", At: at("01.5")}, {Name: "converge", At: at("03")}}}}
	rows, err := l.StepReport()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 || rows[0].Step != "lab ready" || rows[1].Step != "take webapp" {
		t.Fatalf("rows: %+v", rows)
	}
	if r := rows[0]; r.Calls != 2 || r.Failures != 0 || r.LongestOutage != 0 || r.Refused != 1 || r.Breaches != 0 {
		t.Errorf("lab ready: %+v", r)
	}
	if r := rows[1]; r.Calls != 2 || r.Failures != 2 || r.LongestOutage != 1500*time.Millisecond || r.OutageProbe != "served" || r.Ongoing {
		t.Errorf("take webapp: %+v", r)
	}
	if r := rows[2]; r.Calls != 2 || r.Failures != 1 || r.LongestOutage != 500*time.Millisecond || !r.Ongoing || r.Breaches != 1 || r.Breached[0] != "store" {
		t.Errorf("converge: %+v", r)
	}
	var b strings.Builder
	if err := WriteStepTable(&b, rows); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "1.5s") || !strings.Contains(b.String(), "500ms (still failing)") {
		t.Errorf("table:\n%s", b.String())
	}
}
