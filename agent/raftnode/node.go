package raftnode

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"meshd/fsm"
	"meshd/pki"
)

// Node is a running Raft server with the stores it owns. Nothing outside this package holds its
// *raft.Raft: callers ask through its methods.
type Node struct {
	raft *raft.Raft
	// startIndex is the index of the last command in the log when this server started: until the
	// record has applied it, the record is older than what this node already acknowledged.
	startIndex uint64
	// applied is the index of the last command the record applied.
	applied   func() uint64
	caughtUp  chan struct{}
	catchUp   sync.Once
	store     logStore
	transport transport
	// Committed, when set, is told how long each command this server proposed took to commit and
	// apply (the agent's metrics).
	Committed func(time.Duration)
}

// logStore is the log a Node reads entries back from and closes at shutdown: raft-boltdb's on
// disk, raft's own in memory.
type logStore interface {
	raft.LogStore
	Close() error
}

// transport is Raft's transport as a Node closes it at shutdown.
type transport interface {
	raft.Transport
	Close() error
}

// Self is this server as Raft knows it: its node name, ID (its Raft server ID), whether the node
// file says it is a server, and the address and port other servers reach its Raft at.
type Self struct {
	Name      string
	ID        string
	Server    bool
	Advertise string
	Port      uint16
}

// Dir is where Raft keeps its log and snapshots under dataDir.
func Dir(dataDir string) string { return filepath.Join(dataDir, "raft") }

// Open starts Raft for server n on its data dir. The log and stable store are one bolt file;
// snapshots are files beside it; both sealed under seal (seal.go). Its transport is mutual TLS with tlsCfg (pki.RaftTLS), and the
// record f decides who is a server (admit.go): only the record's servers reach the log; refused
// peers are logged to log, a few a minute.
func Open(dataDir string, n Self, f *fsm.FSM, seal *pki.SealKey, tlsCfg *tls.Config, log *slog.Logger, logOut io.Writer) (*Node, error) {
	dir := Dir(dataDir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	store, err := openLog(filepath.Join(dir, "raft.db"), seal, 0)
	if err != nil {
		return nil, fmt.Errorf("open raft log %s: %w", filepath.Join(dir, "raft.db"), err)
	}
	snaps, err := openSnapshots(dir, seal, logOut)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("open raft snapshots in %s: %w", dir, err)
	}
	addr := net.JoinHostPort(n.Advertise, strconv.Itoa(int(n.Port)))
	adv, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("raft address %s: %w", addr, err)
	}
	// The guard asks the Node whether the record is behind; until Open made it, it is.
	var node atomic.Pointer[Node]
	guard := &recordGuard{f: f, behind: func() bool {
		rn := node.Load()
		return rn == nil || rn.behind()
	}}
	stream, err := ListenTLS(addr, adv, tlsCfg, guard, log)
	if err != nil {
		store.Close()
		return nil, fmt.Errorf("raft port %s: %w", addr, err)
	}
	transport := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{Stream: stream, MaxPool: 3, Timeout: 10 * time.Second,
		Logger: hclog.New(&hclog.LoggerOptions{Name: "raft-net", Output: logOut, Level: hclog.Warn})})
	r, err := raft.NewRaft(raftConfig(n, logOut), f, store, store, snaps, transport)
	if err != nil {
		transport.Close()
		store.Close()
		return nil, fmt.Errorf("start raft: %w", err)
	}
	rn := &Node{raft: r, store: store, transport: transport, startIndex: lastCommand(store, snaps), caughtUp: make(chan struct{}),
		applied: f.Applied}
	node.Store(rn)
	return rn, nil
}

// behind says this server's record may not yet know every current server: it has not heard
// from a leader since it started, or has not applied the log it held then. A leader's record
// is never behind.
func (rn *Node) behind() bool {
	if rn.raft.State() == raft.Leader {
		return false
	}
	return rn.raft.LastContact().IsZero() || rn.applied() < rn.startIndex
}

// ElectionTimeout is how long a follower waits without hearing from the leader before it stands
// for election: the time a group takes to elect a new leader after losing one is of this order.
const ElectionTimeout = 500 * time.Millisecond

// raftConfig is Raft's configuration for node n, the same at every start and for recovery.
func raftConfig(n Self, logOut io.Writer) *raft.Config {
	cfg := raft.DefaultConfig()
	cfg.LocalID = raft.ServerID(n.ID)
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "raft", Output: logOut, Level: hclog.Warn})
	cfg.HeartbeatTimeout = ElectionTimeout
	cfg.ElectionTimeout = ElectionTimeout
	cfg.LeaderLeaseTimeout = ElectionTimeout / 2
	cfg.SnapshotThreshold = 1024
	return cfg
}

// lastCommand is the index of the last command in the log store after the newest snapshot, or 0
// when there is none (the snapshot, which NewRaft has already restored, holds everything). Raft's
// own applied index is no measure: it moves when entries are handed to the record, before the
// record applied them, and it counts entries (no-ops, configuration) the record never sees.
func lastCommand(store raft.LogStore, snaps raft.SnapshotStore) uint64 {
	first, err1 := store.FirstIndex()
	last, err2 := store.LastIndex()
	if err1 != nil || err2 != nil {
		return 0
	}
	if metas, err := snaps.List(); err == nil && len(metas) > 0 && metas[0].Index+1 > first {
		first = metas[0].Index + 1
	}
	for i := last; i >= first && i > 0; i-- {
		var l raft.Log
		if err := store.GetLog(i, &l); err != nil {
			return 0
		}
		if l.Type == raft.LogCommand {
			return i
		}
	}
	return 0
}

// WaitCaughtUp blocks until the record has applied every command the log held when this server
// started (a restarted server's record begins at its last snapshot and replays the rest once the
// group has a leader), or ctx ends. Nothing reads the record for a decision before that: a host
// acting on a record older than what it already acted on would undo acknowledged work.
func (rn *Node) WaitCaughtUp(ctx context.Context) error {
	for {
		select {
		case <-rn.caughtUp:
			return nil
		default:
		}
		if rn.applied() >= rn.startIndex {
			rn.catchUp.Do(func() { close(rn.caughtUp) })
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the record is still replaying its log (applied %d of %d): %w", rn.applied(), rn.startIndex, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// WaitLeader waits until some server leads, up to d.
func (rn *Node) WaitLeader(d time.Duration) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if addr, _ := rn.raft.LeaderWithID(); addr != "" {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("no raft leader after %s", d)
}

// Shutdown stops Raft and closes its transport and log.
func (rn *Node) Shutdown(log *slog.Logger) {
	if err := rn.raft.Shutdown().Error(); err != nil {
		log.Warn("raft shutdown", "err", err)
	}
	rn.transport.Close()
	if err := rn.store.Close(); err != nil {
		log.Warn("raft store close", "err", err)
	}
}

// Apply proposes a command and waits until it is committed and applied, returning what the record
// said.
func (rn *Node) Apply(op fsm.Op, body any, timeout time.Duration) (any, error) {
	v, _, err := rn.ApplyAt(op, body, timeout)
	return v, err
}

// ApplyAt is Apply that also says the command's index in the log: the record's index once it is
// applied, which the answer carries.
func (rn *Node) ApplyAt(op fsm.Op, body any, timeout time.Duration) (any, uint64, error) {
	return rn.ApplyBy("", op, body, timeout)
}

// ApplyBy is ApplyAt for a command given by by (fsm.Command.By): "operator NAME", "root on
// NODE's socket".
func (rn *Node) ApplyBy(by string, op fsm.Op, body any, timeout time.Duration) (any, uint64, error) {
	// Right after a start the group may still be electing: give it a moment rather than fail.
	if addr, _ := rn.raft.LeaderWithID(); addr == "" {
		_ = rn.WaitLeader(5 * time.Second)
	}
	b, err := fsm.EncodeBy(op, time.Now(), by, body)
	if err != nil {
		return nil, 0, err
	}
	started := time.Now()
	fut := rn.raft.Apply(b, timeout)
	err = fut.Error()
	if err == nil && rn.Committed != nil {
		rn.Committed(time.Since(started))
	}
	if err != nil {
		if nl := rn.NotLeader(err); nl != nil {
			return nil, 0, nl
		}
		return nil, 0, fmt.Errorf("raft did not commit %s: %w", op, err)
	}
	res, ok := fut.Response().(fsm.Result)
	if !ok {
		return nil, 0, fmt.Errorf("raft returned %T for %s", fut.Response(), op)
	}
	return res.Value, fut.Index(), res.Err
}

// NotLeader is the one place Raft's not-leader error becomes the API's: a NotLeaderError naming
// the leader as this server knows it (the API answers it with 503). It is nil for any other error.
func (rn *Node) NotLeader(err error) *NotLeaderError {
	if !errors.Is(err, raft.ErrNotLeader) {
		return nil
	}
	addr, id := rn.raft.LeaderWithID()
	return &NotLeaderError{Leader: string(addr), LeaderID: string(id)}
}

// NotLeaderError says a write reached a server that does not lead.
type NotLeaderError struct{ Leader, LeaderID string }

func (e *NotLeaderError) Error() string {
	if e.Leader == "" {
		return "no raft leader right now; try again in a moment"
	}
	return fmt.Sprintf("this server does not lead; the leader is at %s", e.Leader)
}

// Entry is the command the log holds at index, as it was proposed (who gave it included).
func (rn *Node) Entry(index uint64) (fsm.Command, error) {
	var l raft.Log
	var c fsm.Command
	if err := rn.store.GetLog(index, &l); err != nil {
		return c, fmt.Errorf("raft log entry %d: %w", index, err)
	}
	if err := json.Unmarshal(l.Data, &c); err != nil {
		return c, fmt.Errorf("raft log entry %d is not a command: %w", index, err)
	}
	return c, nil
}
