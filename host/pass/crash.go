package pass

import (
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// CrashEnv names the environment variable that arms a crash point (see the package doc): its value
// is a point's name, or "name#n" to crash at the n-th time the point is reached.
const CrashEnv = "MESHD_TEST_CRASH_AT"

func parseCrash(v string) (string, int) {
	if v == "" {
		return "", 0
	}
	name, nth, ok := strings.Cut(v, "#")
	n := 1
	if ok {
		if x, err := strconv.Atoi(nth); err == nil && x > 0 {
			n = x
		}
	}
	return name, n
}

// Crasher is the armed crash point of one process part (the host, a driver).
type Crasher struct {
	at        string // CrashEnv's point, "" in production
	nth, hits int
	log       *slog.Logger
	// kill ends the process (SIGKILL); the unit tests put a panic in its place.
	kill func()
}

// NewCrasher reads CrashEnv: its point, or none in production.
func NewCrasher(log *slog.Logger) *Crasher {
	c := &Crasher{log: log}
	c.at, c.nth = parseCrash(os.Getenv(CrashEnv))
	return c
}

// Arm arms point at its nth reach, calling kill there before the SIGKILL: how a unit test
// arms a point in-process (kill panics, so the SIGKILL is never sent).
func (c *Crasher) Arm(point string, nth int, kill func()) {
	c.at, c.nth, c.hits, c.kill = point, nth, 0, kill
}

// Reach SIGKILLs the process when point is the armed crash point.
func (c *Crasher) Reach(point string) {
	if c.at != point {
		return
	}
	c.hits++
	if c.hits < c.nth {
		return
	}
	c.log.Warn("crash point reached: killing the process", "point", point)
	if c.kill != nil {
		c.kill()
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal arrives; nothing after this point runs
}
