package raftnode

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"meshd/catalogue"
	"meshd/fsm"
)

// openInmem opens an in-memory server named name; it shuts down with the test.
func openInmem(t *testing.T, name string) (*Node, *fsm.FSM) {
	t.Helper()
	f := fsm.NewFSM()
	rn, err := OpenInmem(Self{Name: name, ID: name + "-id", Server: true}, f, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rn.Shutdown(discardLog()) })
	return rn, f
}

// leaderOf waits until one of nodes leads and returns it.
func leaderOf(t *testing.T, nodes ...*Node) *Node {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, n := range nodes {
			if n.IsLeader() {
				return n
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("no leader among the in-memory servers")
	return nil
}

// An in-memory group runs the real algorithm: three servers elect one leader, a command it
// commits is applied by every record, and cut off from the other two it is replaced.
func TestInmemGroupReplicatesAndElectsAgain(t *testing.T) {
	a, fa := openInmem(t, "a")
	b, fb := openInmem(t, "b")
	c, fc := openInmem(t, "c")
	Connect(a, b)
	Connect(a, c)
	Connect(b, c)
	var servers []raft.Server
	for _, n := range []*Node{a, b, c} {
		servers = append(servers, raft.Server{ID: raft.ServerID(string(n.LocalAddr())), Address: n.LocalAddr()})
	}
	if err := a.Bootstrap(servers); err != nil {
		t.Fatal(err)
	}
	leader := leaderOf(t, a, b, c)
	_, index, err := leader.ApplyAt(fsm.OpGenesis, fsm.Genesis{Node: "a", ID: "a-id", Mode: fsm.Adopted, Advertise: "127.0.0.1",
		Catalogue: catalogue.DefaultSources()}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]*fsm.FSM{"a": fa, "b": fb, "c": fc} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		got := f.Wait(ctx, index-1)
		cancel()
		if got < index {
			t.Fatalf("server %s's record is at %d, want the genesis at %d", name, got, index)
		}
		var node string
		f.Read(func(r *fsm.Record, _ uint64) {
			if r.Nodes["a"] != nil {
				node = r.Nodes["a"].Name
			}
		})
		if node != "a" {
			t.Fatalf("server %s's record has no node a after the genesis", name)
		}
	}
	var rest []*Node
	for _, n := range []*Node{a, b, c} {
		if n != leader {
			Disconnect(leader, n)
			rest = append(rest, n)
		}
	}
	if next := leaderOf(t, rest...); next == leader {
		t.Fatal("the cut-off leader still leads the other two")
	}
}
