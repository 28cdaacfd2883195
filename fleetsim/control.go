package fleetsim

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// The fleet runs in a process of its own on the simulator's machine (the lab's sim machine, in
// its network namespace), while the servers are measured and killed from outside. The two speak
// over the process's standard input and output: one JSON request a line in, one JSON answer a
// line out, in order.

// Request is one step asked of the fleet's process.
type Request struct {
	// Op is enrol (N nodes more), stats, traffic (over Window), module (add Module), assign
	// (Module to every node, in force within Window), reached, or watchback (the nodes that
	// watched on the server at Bus, killed At, within Window).
	Op     string        `json:"op"`
	N      int           `json:"n,omitempty"`
	Module string        `json:"module,omitempty"`
	Window time.Duration `json:"window_ns,omitempty"`
	Bus    string        `json:"bus,omitempty"`
	At     time.Time     `json:"at,omitzero"`
}

// Answer is the fleet's answer to one request: Err, or the step's result.
type Answer struct {
	Err    string          `json:"err,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
}

// WatchBackResult is a watchback's answer.
type WatchBackResult struct {
	Moved int           `json:"moved"`
	Last  time.Duration `json:"last_ns"`
}

// Serve answers requests from in on out until in ends.
func Serve(ctx context.Context, f *Fleet, in io.Reader, out io.Writer) error {
	sc := bufio.NewScanner(in)
	enc := json.NewEncoder(out)
	for sc.Scan() {
		var req Request
		var res any
		var err error
		if err = json.Unmarshal(sc.Bytes(), &req); err == nil {
			res, err = f.do(ctx, req)
		}
		var a Answer
		if err != nil {
			a.Err = err.Error()
		} else if a.Result, err = json.Marshal(res); err != nil {
			a.Err = err.Error()
		}
		if err := enc.Encode(&a); err != nil {
			return err
		}
	}
	return sc.Err()
}

func (f *Fleet) do(ctx context.Context, req Request) (any, error) {
	switch req.Op {
	case "enrol":
		return f.Enrol(ctx, req.N)
	case "stats":
		return f.Stats(), nil
	case "traffic":
		return f.Traffic(ctx, req.Window)
	case "module":
		return struct{}{}, f.AddModule(ctx, req.Module)
	case "assign":
		return f.AssignAll(ctx, req.Module, req.Window)
	case "reached":
		return struct{}{}, f.Reached(ctx)
	case "watchback":
		last, moved, err := f.WatchBack(ctx, req.Bus, req.At, req.Window)
		return WatchBackResult{Moved: moved, Last: last}, err
	}
	return nil, fmt.Errorf("no step %q (enrol, stats, traffic, module, assign, reached, watchback)", req.Op)
}

// Remote is the fleet's process as its driver sees it.
type Remote struct {
	mu   sync.Mutex
	in   io.WriteCloser
	out  *bufio.Scanner
	wait func() error

	closeOnce sync.Once
	closeErr  error
}

// NewRemote speaks to a fleet's process through its standard input (in) and output (out); wait
// waits for the process to end.
func NewRemote(in io.WriteCloser, out io.Reader, wait func() error) *Remote {
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	return &Remote{in: in, out: sc, wait: wait}
}

// Call sends one request and decodes its result into res.
func (r *Remote) Call(req Request, res any) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	b, _ := json.Marshal(req)
	if _, err := r.in.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("fleet process: %s: %w", req.Op, err)
	}
	if !r.out.Scan() {
		if err := r.out.Err(); err != nil {
			return fmt.Errorf("fleet process: %s: %w", req.Op, err)
		}
		return fmt.Errorf("fleet process: %s: it ended without answering", req.Op)
	}
	var a Answer
	if err := json.Unmarshal(r.out.Bytes(), &a); err != nil {
		return fmt.Errorf("fleet process: %s: answer %q: %w", req.Op, r.out.Bytes(), err)
	}
	if a.Err != "" {
		return fmt.Errorf("fleet process: %s: %s", req.Op, a.Err)
	}
	if res == nil {
		return nil
	}
	return json.Unmarshal(a.Result, res)
}

// Close ends the fleet's process (its input closes) and waits for it; again, it says the same.
func (r *Remote) Close() error {
	r.closeOnce.Do(func() {
		r.closeErr = r.in.Close()
		if werr := r.wait(); werr != nil && !errors.Is(werr, io.EOF) {
			r.closeErr = werr
		}
	})
	return r.closeErr
}
