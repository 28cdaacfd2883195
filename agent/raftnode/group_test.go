package raftnode

import (
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"meshd/fsm"
	"meshd/pki"
)

// groupServer is one server of an in-process group on 127.0.0.1.
type groupServer struct {
	m    member
	self Self
	rn   *Node
	f    *fsm.FSM
	addr string
}

// openServer opens m's Raft in a new data dir on a free port of 127.0.0.1.
func openServer(t *testing.T, ca *pki.CA, m member) *groupServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	g := &groupServer{m: m, f: fsm.NewFSM(), addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port))),
		self: Self{Name: m.name, ID: m.name + "-id", Server: true, Advertise: "127.0.0.1", Port: port}}
	log := discardLog()
	g.rn, err = Open(t.TempDir(), g.self, g.f, testSeal, m.raftTLS(t, ca), log, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.rn.Shutdown(log) })
	return g
}

// servers says how many servers g's record holds.
func (g *groupServer) servers() int {
	n := 0
	g.f.Read(func(r *fsm.Record, _ uint64) {
		for _, nd := range r.Nodes {
			if nd.Server {
				n++
			}
		}
	})
	return n
}

// threeServers is a group of three: hub bootstraps and records genesis, s2 and s3 enrol as
// servers in the record and are made voters; it returns once every record holds all three.
func threeServers(t *testing.T) []*groupServer {
	t.Helper()
	ca, err := pki.NewCA("hub", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var g []*groupServer
	for _, name := range []string{"hub", "s2", "s3"} {
		g = append(g, openServer(t, ca, issue(t, ca, name, pki.ServerCert)))
	}
	hub := g[0]
	if err := hub.rn.Bootstrap([]raft.Server{{ID: raft.ServerID(hub.self.ID), Address: hub.rn.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	if err := hub.rn.WaitLeader(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	do := func(op fsm.Op, body any) {
		if _, err := hub.rn.Apply(op, body, 10*time.Second); err != nil {
			t.Fatalf("%s: %v", op, err)
		}
	}
	do(fsm.OpGenesis, genesisOf(hub.m, hub.self.Port))
	for _, s := range g[1:] {
		enrolment(s.m, true, do)
		if err := hub.rn.AddVoter(s.self.ID, s.addr, 10*time.Second); err != nil {
			t.Fatalf("add %s: %v", s.m.name, err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, s := range g {
		for s.servers() != 3 {
			if time.Now().After(deadline) {
				t.Fatalf("%s's record holds %d servers, want 3", s.m.name, s.servers())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return g
}

// A group of three under a flood of silent connections to every Raft port, from 100 addresses
// each (the attacker of finding 7): its leader stops, and the two left elect one of them, which
// takes new connections between them. Before the record's servers had handshake places of
// their own, the flood held all 64 and no vote got through for as long as it lasted.
func TestRaftGroupElectsUnderFlood(t *testing.T) {
	t.Parallel()
	g := threeServers(t)
	for i, s := range g {
		flood(t, s.addr, loopbacks(10+i, 100), 1)
	}
	g[0].rn.Shutdown(discardLog())
	deadline := time.Now().Add(7 * time.Second)
	for {
		for _, s := range g[1:] {
			if s.rn.IsLeader() {
				t.Logf("%s leads", s.m.name)
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no leader among s2 and s3 under the flood: %s, %s", g[1].rn.State(), g[2].rn.State())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
