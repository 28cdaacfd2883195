package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// progress shows a long act's steps on stderr (stdout stays the command's answer). On a terminal it
// is one line redrawn in place: a spinner, the step, the time so far; each finished step is left
// on a line of its own with a tick. Anywhere else (a pipe, a log, CI) it is one plain line per
// step, "[1.2s] step", with no control characters, and a step said again writes nothing. With
// --json it says nothing: the answer is a program's.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	tty   bool
	quiet bool
	start time.Time
	step  string
	since time.Time
	stop  chan struct{}
	ended chan struct{}
}

// isTerminal says whether f is a terminal.
func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

func (g *globals) progress() *progress {
	return newProgress(os.Stderr, isTerminal(os.Stderr), g.json)
}

func newProgress(w io.Writer, tty, quiet bool) *progress {
	p := &progress{w: w, tty: tty, quiet: quiet, start: time.Now()}
	if tty && !quiet {
		p.stop, p.ended = make(chan struct{}), make(chan struct{})
		go p.spin()
	}
	return p
}

var spinner = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

// spin redraws the terminal's line ten times a second until Done.
func (p *progress) spin() {
	defer close(p.ended)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.mu.Lock()
			if p.step != "" {
				fmt.Fprintf(p.w, "\r\033[K%s %s (%s)", spinner[i%len(spinner)], p.step, time.Since(p.since).Round(100*time.Millisecond))
			}
			p.mu.Unlock()
		}
	}
}

// Step says what the act does now; the same step said again changes nothing.
func (p *progress) Step(step string) {
	if p.quiet {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if step == p.step {
		return
	}
	if p.tty {
		if p.step != "" {
			fmt.Fprintf(p.w, "\r\033[K✓ %s (%s)\n", p.step, time.Since(p.since).Round(100*time.Millisecond))
		}
		fmt.Fprintf(p.w, "\r\033[K%s %s", spinner[0], step)
	} else {
		fmt.Fprintf(p.w, "[%s] %s\n", time.Since(p.start).Round(100*time.Millisecond), step)
	}
	p.step, p.since = step, time.Now()
}

// Done ends the progress: on a terminal the last step is ticked (ok) or its line cleared (failed).
func (p *progress) Done(ok bool) {
	if p.quiet {
		return
	}
	if p.tty {
		close(p.stop)
		<-p.ended
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty && p.step != "" {
		if ok {
			fmt.Fprintf(p.w, "\r\033[K✓ %s (%s)\n", p.step, time.Since(p.since).Round(100*time.Millisecond))
		} else {
			fmt.Fprint(p.w, "\r\033[K")
		}
	}
	p.step = ""
}
