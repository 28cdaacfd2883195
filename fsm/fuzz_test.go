package fsm

import (
	"bytes"
	"io"
	"testing"

	"github.com/hashicorp/raft"
)

// FuzzDecodeSnapshot feeds the snapshot decoder arbitrary bytes, starting from real snapshots.
// It never panics; a snapshot it accepts restores into an FSM and saves back to one that decodes
// to the same record.
func FuzzDecodeSnapshot(f *testing.F) {
	fsm := NewFSM()
	for i, c := range script(f) {
		fsm.Apply(&raft.Log{Index: uint64(i + 1), Data: c})
		if i == 0 || i == len(script(f))-1 {
			snap, _ := fsm.Snapshot()
			sink := &memSink{}
			_ = snap.Persist(sink)
			f.Add(sink.Bytes())
		}
	}
	for _, s := range []string{"", "{}", `{"format":"meshd-record/1"}`, `{"format":"meshd-record/1","index":1,"record":{"nodes":{"a":null}}}`,
		`{"format":"meshd-record/1","index":1,"record":{"nodes":{}}}{}`, "hello"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		rec, _, err := DecodeSnapshot(bytes.NewReader(data))
		if err != nil {
			return
		}
		g := NewFSM()
		if err := g.Restore(io.NopCloser(bytes.NewReader(data))); err != nil {
			t.Fatalf("decoded but not restored: %v", err)
		}
		snap, err := g.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		sink := &memSink{}
		if err := snap.Persist(sink); err != nil {
			t.Fatal(err)
		}
		again, _, err := DecodeSnapshot(bytes.NewReader(sink.Bytes()))
		if err != nil {
			t.Fatalf("a restored record saves to a snapshot that does not decode: %v", err)
		}
		a, _ := rec.Marshal()
		b, _ := again.Marshal()
		if !bytes.Equal(a, b) {
			t.Fatalf("round trip changed the record:\n%s\n%s", a, b)
		}
	})
}
