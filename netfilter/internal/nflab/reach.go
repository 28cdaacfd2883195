package nflab

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"meshd/internal/testenv"
)

// Reach is a real TCP connect from ns to addr that reads the server's "ok".
func Reach(ns, addr string, timeout time.Duration) bool { return ReachFrom(ns, "", addr, timeout) }

// WantReach waits (up to 3 s) until a connect from ns to addr succeeds, or fails, as want says.
func (l *Lab) WantReach(ns, addr string, want bool) {
	l.T.Helper()
	// poll with a deadline for reachable; for unreachable a timed-out connect is the answer
	deadline := time.Now().Add(3 * time.Second)
	for {
		got := Reach(ns, addr, 400*time.Millisecond)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			l.T.Fatalf("from %s to %s: reachable=%v, want %v", ns, addr, got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ReachFrom is Reach with the connection's source address chosen (one of ns's addresses; ""
// leaves it to the kernel).
func ReachFrom(ns, local, addr string, timeout time.Duration) bool {
	var c net.Conn
	err := testenv.InNetns(ns, func() error {
		d := net.Dialer{Timeout: timeout}
		if local != "" {
			d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(local)}
		}
		var err error
		c, err = d.Dial("tcp", addr)
		return err
	})
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	b := make([]byte, 2)
	_, err = io.ReadFull(c, b)
	return err == nil && string(b) == "ok"
}

// WantReachFrom is WantReach from one source address of ns.
func (l *Lab) WantReachFrom(ns, local, addr string, want bool) {
	l.T.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		got := ReachFrom(ns, local, addr, 400*time.Millisecond)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			l.T.Fatalf("from %s at %s to %s: reachable=%v, want %v", ns, local, addr, got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Probe polls addr from ns every 50ms and records the longest run of failures.
type Probe struct {
	mu      sync.Mutex
	worst   time.Duration
	downAt  time.Time
	fails   int
	stop    chan struct{}
	stopped chan struct{}
	once    sync.Once
}

// StartProbe starts polling addr from ns; Close stops it.
func StartProbe(ns, addr string) *Probe {
	p := &Probe{stop: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(p.stopped)
		for {
			select {
			case <-p.stop:
				return
			default:
			}
			ok := Reach(ns, addr, 250*time.Millisecond)
			now := time.Now()
			p.mu.Lock()
			if !ok {
				p.fails++
				if p.downAt.IsZero() {
					p.downAt = now
				}
			} else if !p.downAt.IsZero() {
				if d := now.Sub(p.downAt); d > p.worst {
					p.worst = d
				}
				p.downAt = time.Time{}
			}
			p.mu.Unlock()
			time.Sleep(50 * time.Millisecond)
		}
	}()
	return p
}

// Settle waits until the Probe has seen the port reachable again (or the deadline), then
// returns the longest outage.
func (p *Probe) Settle(t testing.TB, within time.Duration) (time.Duration, int) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		p.mu.Lock()
		down := !p.downAt.IsZero()
		since := p.downAt
		p.mu.Unlock()
		if !down || time.Now().After(deadline) {
			if down {
				p.mu.Lock()
				if d := time.Since(since); d > p.worst {
					p.worst = d
				}
				p.mu.Unlock()
			}
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	w, f := p.worst, p.fails
	p.worst, p.fails = 0, 0
	return w, f
}

// RestartWindow starts an outage under way afresh from now: in a reboot, the time before the found
// firewall and Docker are back is the machine's, not meshd's, and meshd answers only for what
// follows.
func (p *Probe) RestartWindow() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.downAt.IsZero() {
		p.downAt = time.Now()
	}
	p.worst, p.fails = 0, 0
}

// Close stops the probe; a second Close does nothing (a test may stop it before its deferred
// Close).
func (p *Probe) Close() { p.once.Do(func() { close(p.stop); <-p.stopped }) }
