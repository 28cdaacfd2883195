package record

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"time"

	"github.com/hashicorp/raft"

	"meshd/agent/raftnode"
	"meshd/fsm"
	"meshd/pki"
)

// ApplyTimeout is how long a proposed command may take to commit and apply.
const ApplyTimeout = 15 * time.Second

// Service is a server's record and the Raft node that feeds it. Made by New, it reads an
// empty record until Open or OpenInmem starts Raft.
type Service struct {
	fsm  *fsm.FSM
	raft *raftnode.Node
}

// New is a service over an empty record, Raft not started: what reads the record before the
// start (a TLS check at Open) reads it empty.
func New() *Service { return &Service{fsm: fsm.NewFSM()} }

// Open starts Raft for self on its data dir, its log and snapshots sealed under seal, over
// mutual TLS with tlsCfg (raftnode.Open).
func (s *Service) Open(dataDir string, self raftnode.Self, seal *pki.SealKey, tlsCfg *tls.Config, log *slog.Logger, logOut io.Writer) error {
	rn, err := raftnode.Open(dataDir, self, s.fsm, seal, tlsCfg, log, logOut)
	if err != nil {
		return err
	}
	s.raft = rn
	return nil
}

// OpenInmem starts Raft for self in memory (raftnode.OpenInmem); Connect joins two services.
func (s *Service) OpenInmem(self raftnode.Self, logOut io.Writer) error {
	rn, err := raftnode.OpenInmem(self, s.fsm, logOut)
	if err != nil {
		return err
	}
	s.raft = rn
	return nil
}

// Connect joins two in-memory services' transports both ways.
func Connect(a, b *Service) { raftnode.Connect(a.raft, b.raft) }

// Started says whether Raft runs under the record.
func (s *Service) Started() bool { return s.raft != nil }

// Close stops Raft, leaving everything on disk for the next start.
func (s *Service) Close(log *slog.Logger) {
	if s.raft != nil {
		s.raft.Shutdown(log)
	}
}

// OnCommit, when given, is told how long each command this server proposed took to commit
// and apply (the agent's metrics). It is set before the first proposal.
func (s *Service) OnCommit(fn func(time.Duration)) { s.raft.Committed = fn }

// Read calls fn with the record and its index; fn must not keep or change the record.
func (s *Service) Read(fn func(r *fsm.Record, index uint64)) { s.fsm.Read(fn) }

// Wait blocks until the record changed past index, or ctx ends; it returns the index then.
func (s *Service) Wait(ctx context.Context, index uint64) uint64 { return s.fsm.Wait(ctx, index) }

// Declared is the record's index when a command last touched node's declaration.
func (s *Service) Declared(node string) uint64 { return s.fsm.Declared(node) }

// WaitDeclared blocks until a command touched node's declaration past index, or ctx ends
// (fsm.FSM.WaitDeclared).
func (s *Service) WaitDeclared(ctx context.Context, node string, index uint64) uint64 {
	return s.fsm.WaitDeclared(ctx, node, index)
}

// Index is the index of the last command the record applied.
func (s *Service) Index() uint64 { return s.fsm.Applied() }

// WaitCaughtUp blocks until the record applied every command the log held at the start.
func (s *Service) WaitCaughtUp(ctx context.Context) error { return s.raft.WaitCaughtUp(ctx) }

// Propose gives a command by by ("operator NAME", "root on NODE's socket", "" for the agent
// itself) and waits until it is committed and applied; it returns what the record said and
// the command's index. A refusal is the record's own *fsm.Refusal; a server that does not lead
// answers *raftnode.NotLeaderError.
func (s *Service) Propose(by string, op fsm.Op, body any) (any, uint64, error) {
	return s.raft.ApplyBy(by, op, body, ApplyTimeout)
}

// Entry is the command the log holds at index, with who gave it.
func (s *Service) Entry(index uint64) (fsm.Command, error) { return s.raft.Entry(index) }

// NotLeader turns Raft's not-leader error into a NotLeaderError naming the leader; nil for
// any other error.
func (s *Service) NotLeader(err error) *raftnode.NotLeaderError { return s.raft.NotLeader(err) }

// leaderErr is err, or the NotLeaderError it means.
func (s *Service) leaderErr(err error) error {
	if nl := s.raft.NotLeader(err); nl != nil {
		return nl
	}
	return err
}

// Bootstrap starts a new group of servers; Raft refuses it on a log that has one.
func (s *Service) Bootstrap(servers []raft.Server) error { return s.raft.Bootstrap(servers) }

// BootstrapSelf starts a group of this server alone, as genesis does.
func (s *Service) BootstrapSelf(id string) error {
	return s.raft.Bootstrap([]raft.Server{{ID: raft.ServerID(id), Address: s.raft.LocalAddr()}})
}

// LocalAddr is the address this server's transport says it is at.
func (s *Service) LocalAddr() raft.ServerAddress { return s.raft.LocalAddr() }

// WaitLeader waits until some server leads, up to d.
func (s *Service) WaitLeader(d time.Duration) error { return s.raft.WaitLeader(d) }
