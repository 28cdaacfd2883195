package lab

import (
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
