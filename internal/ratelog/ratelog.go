package ratelog

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"
)

// maxKinds bounds how many kinds a Log keeps a window for: past it, kinds whose window ended are
// forgotten, and when none has, new kinds share one budget (overflowKind), so even lines whose
// kind the sender chooses cannot grow the map without end.
const maxKinds = 1024

// overflowKind is the budget every new kind shares once maxKinds are in use.
const overflowKind = "\x00overflow"

// Log bounds how often each kind of line reaches the log: at most burst lines per window; the
// rest are counted, and the next line of that kind let through says how many were left out.
// A kind is the message (Warn), or one the caller names (Line) when the text varies.
type Log struct {
	log    *slog.Logger
	window time.Duration
	burst  int

	mu    sync.Mutex
	kinds map[string]*rateWindow
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

// Warn logs msg at warn level unless this window's lines of that message are spent.
func (l *Log) Warn(msg string, args ...any) {
	l.Line(slog.LevelWarn, msg, msg, args...)
}

// Line logs msg at level unless this window's lines of kind are spent: for lines whose text
// carries what varies from one to the next (a sender's address) while their kind does not. A
// line the logger would not show at level is not counted.
func (l *Log) Line(level slog.Level, kind, msg string, args ...any) {
	ctx := context.Background()
	if !l.log.Enabled(ctx, level) {
		return
	}
	l.mu.Lock()
	now := l.now()
	w := l.windowOf(kind, now)
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
	l.log.Log(ctx, level, msg, args...)
}

// windowOf is kind's window, made when new; l.mu is held.
func (l *Log) windowOf(kind string, now time.Time) *rateWindow {
	if w := l.kinds[kind]; w != nil {
		return w
	}
	if len(l.kinds) >= maxKinds {
		for k, w := range l.kinds {
			if now.Sub(w.start) >= l.window {
				delete(l.kinds, k)
			}
		}
	}
	if len(l.kinds) >= maxKinds {
		kind = overflowKind
		if w := l.kinds[kind]; w != nil {
			return w
		}
	}
	w := &rateWindow{}
	l.kinds[kind] = w
	return w
}

// Clip is s cut to at most n bytes, marked when cut: a caller's text in a log line.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…(" + strconv.Itoa(len(s)) + " bytes)"
}
