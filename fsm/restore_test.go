package fsm

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// savedAt applies the script's first n commands to a fresh FSM and returns its snapshot.
func savedAt(t *testing.T, n int) []byte {
	t.Helper()
	f := NewFSM()
	for i, c := range script(t)[:n] {
		if res := f.Apply(&raft.Log{Index: uint64(i + 1), Data: c}).(Result); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sink := &memSink{}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	return sink.Bytes()
}

func indexOf(f *FSM) (i uint64) {
	f.Read(func(_ *Record, idx uint64) { i = idx })
	return i
}

// Restoring an older snapshot is a change: a watcher at the current index wakes, and reads the
// restored record.
func TestRestoreOfOlderSnapshotWakesWatchers(t *testing.T) {
	old := savedAt(t, 2) // webapp assigned to hub, not taken
	f := NewFSM()
	for i, c := range script(t) {
		f.Apply(&raft.Log{Index: uint64(i + 1), Data: c})
	}
	at := indexOf(f)
	woke := make(chan uint64, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		woke <- f.Wait(ctx, at)
	}()
	if err := f.Restore(io.NopCloser(bytes.NewReader(old))); err != nil {
		t.Fatal(err)
	}
	got := <-woke
	if got <= at {
		t.Fatalf("a watcher at index %d was not woken by the restore (Wait returned %d)", at, got)
	}
	var taken []string
	f.Read(func(r *Record, _ uint64) { taken = r.Nodes["hub"].Taken })
	if len(taken) != 0 {
		t.Fatalf("the watcher reads the pre-restore record: hub has taken %v", taken)
	}
}

// A snapshot saved at a higher index than the log has reached: the next Apply does not move the
// index watchers see backwards.
func TestIndexNeverGoesBackwards(t *testing.T) {
	high := savedAt(t, 3)
	var s map[string]json.RawMessage
	if err := json.Unmarshal(high, &s); err != nil {
		t.Fatal(err)
	}
	s["index"] = json.RawMessage("1000")
	high, _ = json.Marshal(s)

	f := NewFSM()
	f.Apply(&raft.Log{Index: 1, Data: genesisCmd(t, Adopted)})
	if err := f.Restore(io.NopCloser(bytes.NewReader(high))); err != nil {
		t.Fatal(err)
	}
	after := indexOf(f)
	if after < 1000 {
		t.Fatalf("index after restoring a snapshot at 1000: %d", after)
	}
	f.Apply(&raft.Log{Index: 5, Data: cmd(t, OpModuleUnassign, t0.Add(time.Hour), ModuleOnNode{Node: "hub", Module: "webapp"})})
	if got := indexOf(f); got <= after {
		t.Fatalf("the next Apply moved the index from %d to %d", after, got)
	}
	if got := f.Applied(); got != 5 {
		t.Fatalf("Applied = %d, want the raft index 5", got)
	}
}

// What Apply returns is the proposer's own: encoding it while the next commands change the same
// node is no data race (go test -race) and shows the node as that command left it.
func TestApplyResultIsACopy(t *testing.T) {
	f := NewFSM()
	f.Apply(&raft.Log{Index: 1, Data: genesisCmd(t, Adopted)})
	res := f.Apply(&raft.Log{Index: 2, Data: cmd(t, OpModuleAssign, t0, ModuleOnNode{Node: "hub", Module: "webapp"})}).(Result)
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	n := res.Value.(*Node)
	want, _ := json.Marshal(n)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 50; i++ {
			op := OpModuleTake
			if i%2 == 1 {
				op = OpModuleUnassign
			}
			f.Apply(&raft.Log{Index: uint64(3 + i), Data: cmd(t, op, t0, ModuleOnNode{Node: "hub", Module: "webapp"})})
			if op == OpModuleUnassign {
				f.Apply(&raft.Log{Index: uint64(100 + i), Data: cmd(t, OpModuleAssign, t0, ModuleOnNode{Node: "hub", Module: "webapp"})})
			}
		}
	}()
	for i := 0; i < 200; i++ {
		if got, _ := json.Marshal(n); !bytes.Equal(got, want) {
			t.Fatalf("the returned node changed under its proposer:\n%s\n%s", want, got)
		}
	}
	wg.Wait()
	var inRecord *Node
	f.Read(func(r *Record, _ uint64) { inRecord = r.Nodes["hub"] })
	if inRecord == n {
		t.Fatal("Apply returned the record's own node")
	}
}

// A panic inside Apply refuses the command; the record is as it was and the next command applies.
func TestApplyPanicRefusesTheCommand(t *testing.T) {
	r := NewRecord()
	mustApply(t, r, genesisCmd(t, Adopted))
	// A node that is nil in the record makes the enrolment's checks dereference nil: a fault,
	// standing in for a parser that panics on input it cannot handle.
	r.Nodes["ghost"] = nil
	mustApply(t, r, cmd(t, OpTokenCreate, t0, TokenCreate{Hash: "h1", Mode: Adopted, Expires: t0.Add(time.Hour)}))
	before := marshal(t, r)
	_, err := Apply(r, cmd(t, OpNodeEnrol, t0, Enrol{Node: "peer1", ID: "id-p1", TokenHash: "h1", PublicKey: "k1"}))
	delete(r.Nodes, "ghost")
	before = bytes.Replace(before, []byte(`"ghost":null,`), nil, 1)
	var ref *Refusal
	if err == nil || !strings.Contains(err.Error(), "could not be applied") {
		t.Fatalf("a panic in Apply was not a refusal: %v", err)
	} else if !asRefusal(err, &ref) || ref.Op != OpNodeEnrol {
		t.Fatalf("refusal does not name the command: %#v", err)
	}
	if !bytes.Equal(before, marshal(t, r)) {
		t.Fatal("a command that panicked changed the record")
	}
	mustApply(t, r, cmd(t, OpModuleAssign, t0, ModuleOnNode{Node: "hub", Module: "webapp"}))
}

func asRefusal(err error, ref **Refusal) bool {
	r, ok := err.(*Refusal)
	*ref = r
	return ok
}

// A file that is not a snapshot is refused with what is wrong, in words.
func TestDecodeSnapshotSaysWhatIsWrong(t *testing.T) {
	good := savedAt(t, 3)
	var s map[string]json.RawMessage
	_ = json.Unmarshal(good, &s)
	with := func(key, val string) string {
		c := map[string]json.RawMessage{}
		for k, v := range s {
			c[k] = v
		}
		c[key] = json.RawMessage(val)
		b, _ := json.Marshal(c)
		return string(b)
	}
	rec := func(edit func(r *Record)) string {
		r, err := UnmarshalRecord(s["record"])
		if err != nil {
			t.Fatal(err)
		}
		edit(r)
		b, _ := r.Marshal()
		return with("record", string(b))
	}
	for _, c := range []struct{ name, in, want string }{
		{"empty", "", "is empty"},
		{"not JSON", "hello", "not valid JSON at byte 1"},
		{"cut short", string(good[:len(good)/2]), "ends in the middle"},
		{"no format", `{}`, `no "format"`},
		{"other format", `{"format":"other/1"}`, `format "other/1"`},
		{"no record", with("record", "null"), "holds no record"},
		{"wrong type", with("record", `{"nodes":[1]}`), "nodes holds a JSON array"},
		{"two objects", string(good) + "{}", "something follows"},
		{"node under another name", rec(func(r *Record) { r.Nodes["other"] = r.Nodes["hub"] }), `node "hub" is filed under "other"`},
		{"bad mode", rec(func(r *Record) { r.Nodes["hub"].Mode = "sideways" }), `mode "sideways"`},
		{"taken not assigned", rec(func(r *Record) { r.Nodes["hub"].Taken = []string{"zzz"} }), "taken but not assigned"},
		{"assigned not in catalogue", rec(func(r *Record) { r.Nodes["hub"].Assigned = append(r.Nodes["hub"].Assigned, "zzz") }), "not in the catalogue"},
		{"module under another name", rec(func(r *Record) { r.Catalogue["zzz"] = r.Catalogue["webapp"] }), `module "webapp" is filed under "zzz"`},
		{"nodes without genesis", rec(func(r *Record) { r.Genesis = nil }), "no genesis"},
	} {
		_, _, err := DecodeSnapshot(strings.NewReader(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want it to say %q", c.name, err, c.want)
		}
		if err != nil && strings.Contains(err.Error(), "json:") {
			t.Errorf("%s: a raw Go JSON error: %v", c.name, err)
		}
	}
	if _, _, err := DecodeSnapshot(bytes.NewReader(good)); err != nil {
		t.Fatalf("a good snapshot refused: %v", err)
	}
}
