package raftnode

// A Node with every store in memory and an in-memory transport: the real Raft algorithm with no
// disk and no network, for tests of what runs over the record (handlers, autopilot's caller).

import (
	"io"
	"time"

	"github.com/hashicorp/raft"

	"meshd/fsm"
)

// inmemTimeout is an in-memory group's heartbeat and election timeout: nothing is slow in
// memory, so a group of one elects itself within tens of milliseconds.
const inmemTimeout = 20 * time.Millisecond

// inmemLog is raft's in-memory log store, which has nothing to close.
type inmemLog struct{ *raft.InmemStore }

func (inmemLog) Close() error { return nil }

// OpenInmem starts Raft for server n with its log, stable store and snapshots in memory, over
// an in-memory transport at the address n.ID. Connect joins two such servers' transports.
// Nothing survives Shutdown; nothing guards the transport (there is no network to guard).
func OpenInmem(n Self, f *fsm.FSM, logOut io.Writer) (*Node, error) {
	store := inmemLog{raft.NewInmemStore()}
	_, trans := raft.NewInmemTransport(raft.ServerAddress(n.ID))
	cfg := raftConfig(n, logOut)
	cfg.HeartbeatTimeout = inmemTimeout
	cfg.ElectionTimeout = inmemTimeout
	cfg.LeaderLeaseTimeout = inmemTimeout / 2
	cfg.CommitTimeout = time.Millisecond
	r, err := raft.NewRaft(cfg, f, store, store, raft.NewInmemSnapshotStore(), trans)
	if err != nil {
		return nil, err
	}
	return &Node{raft: r, store: store, transport: trans, caughtUp: make(chan struct{}), applied: f.Applied}, nil
}

// Connect joins the in-memory transports of a and b both ways, so they reach each other.
// It panics on a Node not opened by OpenInmem: only tests connect.
func Connect(a, b *Node) {
	ta, tb := a.transport.(*raft.InmemTransport), b.transport.(*raft.InmemTransport)
	ta.Connect(tb.LocalAddr(), tb)
	tb.Connect(ta.LocalAddr(), ta)
}

// Disconnect cuts the in-memory transports of a and b apart both ways, as a partition would.
func Disconnect(a, b *Node) {
	ta, tb := a.transport.(*raft.InmemTransport), b.transport.(*raft.InmemTransport)
	ta.Disconnect(tb.LocalAddr())
	tb.Disconnect(ta.LocalAddr())
}
