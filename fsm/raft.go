package fsm

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"github.com/hashicorp/raft"
)

// FSM holds the record for hashicorp/raft: Apply, Snapshot and Restore, plus reads under a lock
// and a wait for the next change, which is what blocking queries are built on.
type FSM struct {
	mu      sync.RWMutex
	rec     *Record
	index   uint64
	changed chan struct{}
}

// Result is what FSM.Apply returns to the proposer through raft's ApplyFuture.
type Result struct {
	Value any
	Err   error
}

// NewFSM returns an FSM holding an empty record.
func NewFSM() *FSM { return &FSM{rec: NewRecord(), changed: make(chan struct{})} }

// Apply applies one committed log entry.
func (f *FSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, err := Apply(f.rec, l.Data)
	f.index = l.Index
	close(f.changed)
	f.changed = make(chan struct{})
	return Result{Value: v, Err: err}
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

// Restore replaces the record with a snapshot's.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	rec, index, err := DecodeSnapshot(rc)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rec, f.index = rec, max(index, f.index)
	close(f.changed)
	f.changed = make(chan struct{})
	return nil
}

// DecodeSnapshot reads a snapshot written by Snapshot, refusing anything else.
func DecodeSnapshot(r io.Reader) (*Record, uint64, error) {
	var s snapshotFile
	if err := json.NewDecoder(r).Decode(&s); err != nil {
		return nil, 0, fmt.Errorf("not a meshd record snapshot: %w", err)
	}
	if s.Format != SnapshotFormat {
		return nil, 0, fmt.Errorf("snapshot format %q is not %q", s.Format, SnapshotFormat)
	}
	rec, err := UnmarshalRecord(s.Record)
	if err != nil {
		return nil, 0, fmt.Errorf("snapshot record: %w", err)
	}
	return rec, s.Index, nil
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
