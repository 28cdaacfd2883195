package main

import (
	"bytes"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer the spinner's goroutine and the test may share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Off a terminal a long act says each step once, on a plain line of its own with the time so far;
// on a terminal it redraws one line with a spinner and ticks each step done; with --json nothing.
func TestProgress(t *testing.T) {
	var plain syncBuffer
	p := newProgress(&plain, false, false)
	p.Step("preflight")
	p.Step("preflight")
	p.Step("starting Raft")
	p.Done(true)
	lines := strings.Split(strings.TrimSpace(plain.String()), "\n")
	if len(lines) != 2 || !regexp.MustCompile(`^\[\d+(\.\d)?m?s\] preflight$`).MatchString(lines[0]) || !strings.HasSuffix(lines[1], "] starting Raft") {
		t.Errorf("plain progress:\n%s", plain.String())
	}
	if strings.ContainsAny(plain.String(), "\r\033") {
		t.Errorf("plain progress has control characters: %q", plain.String())
	}

	var tty syncBuffer
	p = newProgress(&tty, true, false)
	p.Step("waiting for node hub's first report")
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(tty.String(), "(") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // the spinner's redraw, with the time so far
	}
	p.Step("node hub becoming converged")
	p.Done(true)
	out := tty.String()
	for _, want := range []string{"\r\033[K", "✓ waiting for node hub's first report (", "✓ node hub becoming converged ("} {
		if !strings.Contains(out, want) {
			t.Errorf("terminal progress has no %q:\n%q", want, out)
		}
	}

	var quiet syncBuffer
	p = newProgress(&quiet, true, true)
	p.Step("x")
	p.Done(true)
	if quiet.String() != "" {
		t.Errorf("--json progress wrote %q", quiet.String())
	}
}
