package agent

import (
	"log/slog"
	"strconv"
	"sync"
	"time"
)

// rateLog bounds how often one kind of line reaches the log: at most burst lines per window; the
// rest are counted, and the next line let through says how many were left out. It is for lines
// anyone on the network can cause (a refused enrolment, a refused Raft handshake), so that a flood
// of them cannot fill the disk.
type rateLog struct {
	log    *slog.Logger
	window time.Duration
	burst  int

	mu         sync.Mutex
	start      time.Time // the current window's start
	n          int       // lines let through in the current window
	suppressed int       // lines left out since the last one let through
	now        func() time.Time
}

func newRateLog(log *slog.Logger, burst int, window time.Duration) *rateLog {
	return &rateLog{log: log, burst: burst, window: window, now: time.Now}
}

// Warn logs msg at warn level unless this window's lines are spent.
func (l *rateLog) Warn(msg string, args ...any) {
	l.mu.Lock()
	now := l.now()
	if now.Sub(l.start) >= l.window {
		l.start, l.n = now, 0
	}
	if l.n >= l.burst {
		l.suppressed++
		l.mu.Unlock()
		return
	}
	l.n++
	left := l.suppressed
	l.suppressed = 0
	l.mu.Unlock()
	if left > 0 {
		args = append(args, "left_out", left)
	}
	l.log.Warn(msg, args...)
}

// clip is s cut to at most n bytes, marked when cut: a caller's text in a log line.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…(" + strconv.Itoa(len(s)) + " bytes)"
}
