package fsm

import (
	"context"
	"encoding/json"
	"io"
	"sync"

	"github.com/hashicorp/raft"
)

// FSM holds the record for hashicorp/raft: Apply, Snapshot and Restore, plus reads under a lock
// and a wait for the next change, which is what blocking queries are built on.
//
// Two indexes: the record's index, which Read and Wait give and blocking queries watch, moves
// forward on every change, a restore included, and never back (the raft index of the command
// applied, or one past the last index when that would not move it); applied is the raft index of
// the last command applied, which says how far the record has replayed its log.
type FSM struct {
	mu      sync.RWMutex
	rec     *Record
	index   uint64
	applied uint64
	changed chan struct{}
	// declared is, by node, the record's index when a command last touched the node's
	// declaration (Touched); allAt the index when one last touched every node's. Neither is
	// encoded: a restore touches every node.
	declared map[string]uint64
	allAt    uint64
}

// Result is what FSM.Apply returns to the proposer through raft's ApplyFuture.
type Result struct {
	Value any
	Err   error
}

// NewFSM returns an FSM holding an empty record.
func NewFSM() *FSM { return &FSM{rec: NewRecord(), changed: make(chan struct{})} }

// Apply applies one committed log entry. What it returns is the proposer's own copy: the record
// goes on changing under the lock after it is returned.
func (f *FSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, t, err := applyAtTouching(f.rec, l.Index, l.Data)
	f.applied = l.Index
	f.advance(l.Index)
	f.touch(t)
	return Result{Value: detach(v), Err: err}
}

// touch records that the command just applied, at the record's index, touched t. Called with
// mu held.
func (f *FSM) touch(t Touched) {
	if t.All {
		f.allAt, f.declared = f.index, nil
		return
	}
	if len(t.Nodes) > 0 && f.declared == nil {
		f.declared = map[string]uint64{}
	}
	for _, n := range t.Nodes {
		f.declared[n] = f.index
	}
}

// declaredAt is the record's index when node's declaration was last touched. Called with mu
// held.
func (f *FSM) declaredAt(node string) uint64 { return max(f.allAt, f.declared[node]) }

// Declared is the record's index when a command last touched node's declaration: a composed
// declaration at index i is still the node's while Declared(node) <= i. A node the record does
// not know has the index of the last command that touched every node (an enrolment does).
func (f *FSM) Declared(node string) uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.declaredAt(node)
}

// WaitDeclared blocks until a command touches node's declaration past index, or ctx is done; it
// returns the record's index then. It wakes on every change and looks at one number, so a
// watch costs nothing when a command is about other nodes.
func (f *FSM) WaitDeclared(ctx context.Context, node string, index uint64) uint64 {
	for {
		f.mu.RLock()
		at, cur, ch := f.declaredAt(node), f.index, f.changed
		f.mu.RUnlock()
		if at > index {
			return cur
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return cur
		}
	}
}

// advance moves the record's index to at least to (and at least one past where it was) and
// wakes every watcher. Called with mu held.
func (f *FSM) advance(to uint64) {
	f.index = max(f.index+1, to)
	close(f.changed)
	f.changed = make(chan struct{})
}

// Applied is the raft index of the last command the record applied (0 before the first since
// the start): how far a restarted server has replayed its log.
func (f *FSM) Applied() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.applied
}

// snapshotFile is what a snapshot holds: the record and the index it was taken at.
type snapshotFile struct {
	Format string          `json:"format"`
	Index  uint64          `json:"index"`
	Record json.RawMessage `json:"record"`
}

// SnapshotFormat names the snapshot encoding; Restore refuses any other.
const SnapshotFormat = "meshd-record/1"

// Snapshot captures the record as it is now.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	b, err := f.rec.Marshal()
	if err != nil {
		return nil, err
	}
	out, err := json.Marshal(snapshotFile{Format: SnapshotFormat, Index: f.index, Record: b})
	if err != nil {
		return nil, err
	}
	return snapshot(out), nil
}

// Restore replaces the record with a snapshot's. The record's index moves forward whatever the
// snapshot's index (an older snapshot restored is a change like any other), and every watcher
// wakes: a host acts on the restored record at once.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	rec, index, err := DecodeSnapshot(rc)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rec = rec
	f.advance(index)
	f.touch(Touched{All: true})
	return nil
}

// Read calls fn with the record and its index under the read lock; fn must not keep or change
// the record.
func (f *FSM) Read(fn func(r *Record, index uint64)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fn(f.rec, f.index)
}

// Wait blocks until the record has changed past index, or ctx is done; it returns the index then.
func (f *FSM) Wait(ctx context.Context, index uint64) uint64 {
	for {
		f.mu.RLock()
		cur, ch := f.index, f.changed
		f.mu.RUnlock()
		if cur > index {
			return cur
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return cur
		}
	}
}

type snapshot []byte

func (s snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s snapshot) Release() {}
