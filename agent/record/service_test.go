package record

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"meshd/agent/raftnode"
	"meshd/catalogue"
	"meshd/fsm"
)

// openGroup opens n in-memory services, joins them and bootstraps them as one group; it
// returns them once one leads, the leader first.
func openGroup(t *testing.T, names ...string) []*Service {
	t.Helper()
	var svcs []*Service
	var servers []raft.Server
	for _, name := range names {
		s := New()
		if err := s.OpenInmem(raftnode.Self{Name: name, ID: name + "-id", Server: true}, io.Discard); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close(slog.New(slog.NewTextHandler(io.Discard, nil))) })
		for _, o := range svcs {
			Connect(s, o)
		}
		svcs = append(svcs, s)
		servers = append(servers, raft.Server{ID: raft.ServerID(name + "-id"), Address: s.LocalAddr()})
	}
	if err := svcs[0].Bootstrap(servers); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for i, s := range svcs {
			if s.IsLeader() {
				svcs[0], svcs[i] = svcs[i], svcs[0]
				return svcs
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatal("no leader in the in-memory group")
	return nil
}

func genesis(node string) fsm.Genesis {
	return fsm.Genesis{Node: node, ID: node + "-id", Mode: fsm.Adopted, Advertise: "127.0.0.1", Catalogue: catalogue.DefaultSources()}
}

// A proposal is answered once applied: the record read right after holds it at the index the
// answer gave, the log holds who gave it, and a refusal is the record's own, changing nothing.
func TestProposeAnswersOnceApplied(t *testing.T) {
	s := openGroup(t, "hub")[0]
	_, index, err := s.Propose("root on hub's socket", fsm.OpGenesis, genesis("hub"))
	if err != nil {
		t.Fatal(err)
	}
	var at uint64
	var found bool
	s.Read(func(r *fsm.Record, i uint64) { at, found = i, r.Nodes["hub"] != nil })
	if !found || at != index {
		t.Fatalf("after the genesis at %d the record is at %d, holding hub: %v", index, at, found)
	}
	if c, err := s.Entry(index); err != nil || c.By != "root on hub's socket" || c.Op != fsm.OpGenesis {
		t.Fatalf("log entry %d: %+v, %v", index, c, err)
	}
	_, _, err = s.Propose("", fsm.OpGenesis, genesis("other"))
	var ref *fsm.Refusal
	if !errors.As(err, &ref) {
		t.Fatalf("a second genesis answered %v, want the record's refusal", err)
	}
	s.Read(func(r *fsm.Record, _ uint64) { found = r.Nodes["other"] != nil })
	if found {
		t.Fatal("a refused genesis changed the record")
	}
	if l := s.Leader(); l.Node != "hub" || l.ID != "hub-id" {
		t.Fatalf("leader %+v, want hub named by the record", l)
	}
}

// A follower refuses a proposal by naming the leader, and every server's record follows the
// leader's; the voters are named by the record.
func TestFollowerNamesTheLeader(t *testing.T) {
	g := openGroup(t, "a", "b", "c")
	leader, follower := g[0], g[1]
	if _, _, err := leader.Propose("", fsm.OpGenesis, genesis("a")); err != nil {
		t.Fatal(err)
	}
	_, _, err := follower.Propose("", fsm.OpTokenCreate, fsm.TokenCreate{Hash: "h", Mode: fsm.Adopted, Expires: time.Now().Add(time.Hour)})
	var nl *raftnode.NotLeaderError
	if !errors.As(err, &nl) || nl.LeaderID != leader.Leader().ID {
		t.Fatalf("a follower's proposal answered %v, want NotLeaderError naming %s", err, leader.Leader().ID)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for follower.Index() < leader.Index() && ctx.Err() == nil {
		follower.Wait(ctx, follower.Index())
	}
	if follower.Index() != leader.Index() {
		t.Fatalf("follower at %d, leader at %d", follower.Index(), leader.Index())
	}
	if v := leader.VoterNames(); len(v) != 3 {
		t.Fatalf("voters %v, want three", v)
	}
}

// Save writes the committed record; Restore puts it back through the log, and refuses what is
// not a snapshot before Raft sees it.
func TestSaveAndRestore(t *testing.T) {
	s := openGroup(t, "hub")[0]
	if _, _, err := s.Propose("", fsm.OpGenesis, genesis("hub")); err != nil {
		t.Fatal(err)
	}
	var saved bytes.Buffer
	if err := s.Save(&saved); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Propose("", fsm.OpTokenCreate, fsm.TokenCreate{Hash: "later", Mode: fsm.Adopted, Expires: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := s.Restore([]byte("not a snapshot"), time.Minute); !errors.As(err, new(*BadSnapshot)) {
		t.Fatalf("restoring junk answered %v, want BadSnapshot", err)
	}
	if err := s.Restore(saved.Bytes(), time.Minute); err != nil {
		t.Fatal(err)
	}
	var later, hub bool
	s.Read(func(r *fsm.Record, _ uint64) { later, hub = r.Tokens["later"] != nil, r.Nodes["hub"] != nil })
	if later || !hub {
		t.Fatalf("after the restore: token made after the save %v, hub %v; want only what was saved", later, hub)
	}
}
