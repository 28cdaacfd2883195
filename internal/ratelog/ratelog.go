package ratelog

import (
	"log/slog"
	"strconv"
	"sync"
	"time"
)

// Log bounds how often each kind of line (its message) reaches the log: at most burst lines
// per window; the rest are counted, and the next line of that kind let through says how many
// were left out.
type Log struct {
	log    *slog.Logger
	window time.Duration
	burst  int

	mu    sync.Mutex
	kinds map[string]*rateWindow // by message
	now   func() time.Time
}

type rateWindow struct {
	start      time.Time // the current window's start
	n          int       // lines let through in the current window
	suppressed int       // lines left out since the last one let through
}

// New is a Log over log letting burst lines of each kind through per window.
func New(log *slog.Logger, burst int, window time.Duration) *Log {
	return &Log{log: log, burst: burst, window: window, now: time.Now, kinds: map[string]*rateWindow{}}
}

// Warn logs msg at warn level unless this window's lines are spent.
func (l *Log) Warn(msg string, args ...any) {
	l.mu.Lock()
	w := l.kinds[msg]
	if w == nil {
		w = &rateWindow{}
		l.kinds[msg] = w
	}
	now := l.now()
	if now.Sub(w.start) >= l.window {
		w.start, w.n = now, 0
	}
	if w.n >= l.burst {
		w.suppressed++
		l.mu.Unlock()
		return
	}
	w.n++
	left := w.suppressed
	w.suppressed = 0
	l.mu.Unlock()
	if left > 0 {
		args = append(args, "left_out", left)
	}
	l.log.Warn(msg, args...)
}

// Clip is s cut to at most n bytes, marked when cut: a caller's text in a log line.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…(" + strconv.Itoa(len(s)) + " bytes)"
}
