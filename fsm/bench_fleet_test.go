package fsm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"meshd/catalogue"
)

// BenchmarkComposeFleet is one command on a fleet of N = 100 and 1000 enrolled nodes (each with
// its overlay key, as a joined machine has) and the declaration watches' composes after it, side
// by side:
//   - assign-all is the notes module assigned to every node in one module.assign.many, every
//     declaration changed; assign-one is it assigned to (and then taken off) one node;
//   - before is the server as it was before issue 37: nothing kept between commands (each
//     module's reach worked out afresh from every node, each time it is asked) and every node's
//     watch composing its declaration after every command;
//   - after is today's: the record's kept parts, and only the watches of the nodes the command
//     touched (FSM.Declared) composing.
func BenchmarkComposeFleet(b *testing.B) {
	for _, n := range []int{100, 1000} {
		saved := fleetSnapshot(b, n)
		for _, shape := range []string{"before", "after"} {
			b.Run(fmt.Sprintf("N=%d/assign-all/%s", n, shape), func(b *testing.B) {
				for i := range b.N {
					b.StopTimer()
					f := restoredFleet(b, saved, shape == "before")
					b.StartTimer()
					all := make([]string, n)
					for j := range all {
						all[j] = fleetName(j)
					}
					watchesAfter(b, f, shape == "before", uint64(1_000_000+i), cmd(b, OpModuleAssignMany, t0.Add(time.Hour), ModuleOnNodes{Module: "notes", Nodes: all, Selector: "--all"}))
				}
			})
			b.Run(fmt.Sprintf("N=%d/assign-one/%s", n, shape), func(b *testing.B) {
				f := restoredFleet(b, saved, shape == "before")
				b.ResetTimer()
				for i := range b.N {
					op := OpModuleAssign
					if i%2 == 1 {
						op = OpModuleUnassign
					}
					watchesAfter(b, f, shape == "before", uint64(1_000_000+i), cmd(b, op, t0.Add(time.Hour), ModuleOnNode{Node: fleetName(n / 2), Module: "notes"}))
				}
			})
		}
	}
}

func fleetName(i int) string { return fmt.Sprintf("node-%04d", i) }

// fleetSnapshot is a snapshot of the hub and n enrolled clients, each with an overlay key and an
// underlay address.
func fleetSnapshot(b *testing.B, n int) []byte {
	b.Helper()
	f := NewFSM()
	index := uint64(1)
	apply := func(c []byte) {
		if res := f.Apply(&raft.Log{Index: index, Data: c}).(Result); res.Err != nil {
			b.Fatal(res.Err)
		}
		index++
	}
	apply(cmd(b, OpGenesis, t0, Genesis{Node: "hub", ID: "id-hub", Mode: Adopted, Advertise: "198.51.100.1",
		WireGuardKey: wgKey(b), Settings: map[string]string{"mesh.range": "10.99.0.0/20"},
		Catalogue: catalogue.DefaultSources(), Assign: []string{"broker", "mesh", "registry", "store"}}))
	for i := range n {
		h := fmt.Sprint("t", i)
		apply(cmd(b, OpTokenCreate, t0, TokenCreate{Hash: h, Mode: Adopted, Expires: t0.Add(time.Hour)}))
		apply(cmd(b, OpNodeEnrol, t0, Enrol{Node: fleetName(i), ID: "id-" + h, TokenHash: h, PublicKey: "pk-" + h,
			WireGuardKey: wgKey(b), Advertise: fmt.Sprintf("10.%d.%d.%d", 100+i/65536, i/256%256, i%256)}))
	}
	snap, err := f.Snapshot()
	if err != nil {
		b.Fatal(err)
	}
	var sink memSink
	if err := snap.Persist(&sink); err != nil {
		b.Fatal(err)
	}
	return sink.Bytes()
}

// restoredFleet is a server restored from saved whose watches have each composed once: a fleet
// at rest. before keeps nothing derived.
func restoredFleet(b *testing.B, saved []byte, before bool) *FSM {
	b.Helper()
	f := NewFSM()
	if err := f.Restore(io.NopCloser(bytes.NewReader(saved))); err != nil {
		b.Fatal(err)
	}
	f.rec.derived.fresh = before
	for _, name := range f.rec.NodeNames() {
		if _, err := Compose(f.rec, name); err != nil {
			b.Fatal(err)
		}
	}
	return f
}

// watchesAfter applies data at index and composes, as each watch would and encoded as it is
// sent, the declarations of every node (before) or of the nodes the command touched (after).
func watchesAfter(b *testing.B, f *FSM, before bool, index uint64, data []byte) {
	var from uint64
	f.Read(func(_ *Record, i uint64) { from = i })
	if res := f.Apply(&raft.Log{Index: index, Data: data}).(Result); res.Err != nil {
		b.Fatal(res.Err)
	}
	composed := 0
	for _, name := range f.rec.sortedNames() {
		if !before && f.Declared(name) <= from {
			continue
		}
		d, err := Compose(f.rec, name)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := json.Marshal(d); err != nil {
			b.Fatal(err)
		}
		composed++
	}
	b.ReportMetric(float64(composed), "composes/op")
}
