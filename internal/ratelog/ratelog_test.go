package ratelog

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// A kind of line past its burst is left out for the rest of the window; the next one let through
// says how many were; another kind has its own budget.
func TestLogBoundsEachKind(t *testing.T) {
	var buf bytes.Buffer
	l := New(slog.New(slog.NewTextHandler(&buf, nil)), 3, time.Minute)
	now := time.Unix(1_700_000_000, 0)
	l.now = func() time.Time { return now }
	for range 100 {
		l.Warn("enrolment refused", "node", "x")
	}
	l.Warn("bus connection closed")
	if got := strings.Count(buf.String(), "enrolment refused"); got != 3 {
		t.Fatalf("100 lines in one window logged %d times, want 3:\n%s", got, buf.String())
	}
	if !strings.Contains(buf.String(), "bus connection closed") {
		t.Fatal("another kind of line was left out with the first")
	}
	now = now.Add(time.Minute)
	l.Warn("enrolment refused", "node", "y")
	if !strings.Contains(buf.String(), "left_out=97") {
		t.Fatalf("the first line of the next window does not say 97 were left out:\n%s", buf.String())
	}
}
