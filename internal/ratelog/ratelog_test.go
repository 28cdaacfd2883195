package ratelog

import (
	"bytes"
	"log/slog"
	"strconv"
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

// Lines of one kind whose text differs (each from another address) share the kind's budget, at
// the level given; a line the logger would not show is not counted against it.
func TestLineBoundsByKindNotText(t *testing.T) {
	var buf bytes.Buffer
	l := New(slog.New(slog.NewTextHandler(&buf, nil)), 2, time.Minute)
	for i := range 50 {
		l.Line(slog.LevelDebug, "junk", "hidden")
		l.Line(slog.LevelError, "junk", "Decrypt packet failed from=10.0.0."+strconv.Itoa(i)+":7946")
	}
	if got := strings.Count(buf.String(), "Decrypt packet failed"); got != 2 {
		t.Fatalf("50 lines of one kind from 50 addresses logged %d times, want 2:\n%s", got, buf.String())
	}
	if !strings.Contains(buf.String(), "level=ERROR") || strings.Contains(buf.String(), "hidden") {
		t.Fatalf("the level was not kept, or a debug line was shown:\n%s", buf.String())
	}
}

// Kinds past the bound share one budget, and kinds whose window ended are forgotten to make room.
func TestKindsAreBounded(t *testing.T) {
	var buf bytes.Buffer
	l := New(slog.New(slog.NewTextHandler(&buf, nil)), 1, time.Minute)
	now := time.Unix(1_700_000_000, 0)
	l.now = func() time.Time { return now }
	for i := range 3 * maxKinds {
		l.Line(slog.LevelWarn, "kind "+strconv.Itoa(i), "line")
	}
	if n := len(l.kinds); n > maxKinds+1 {
		t.Fatalf("%d kinds kept, want at most %d", n, maxKinds+1)
	}
	if got := strings.Count(buf.String(), "line"); got != maxKinds+1 {
		t.Fatalf("%d lines let through, want one per kind kept (%d)", got, maxKinds+1)
	}
	now = now.Add(time.Minute)
	l.Line(slog.LevelWarn, "a new kind", "fresh")
	if !strings.Contains(buf.String(), "fresh") || len(l.kinds) > maxKinds+1 {
		t.Fatalf("a new kind after the windows ended was not let through (%d kinds kept)", len(l.kinds))
	}
}
