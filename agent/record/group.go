package record

// The group of servers under the record: who leads, the configuration and its changes. Names
// come from the record (a server's Raft ID is its node's ID).

import (
	"bytes"
	"io"
	"time"

	"github.com/hashicorp/raft"

	"meshd/agent/raftnode"
	"meshd/fsm"
)

// IsLeader says whether this server leads now.
func (s *Service) IsLeader() bool { return s.raft.IsLeader() }

// Leader is the leader as this server knows it; all empty when none.
type Leader struct {
	// Node is the leader's node name in the record, ID its Raft ID, Addr its Raft address.
	Node, ID, Addr string
}

// Leader is who leads, named by the record.
func (s *Service) Leader() Leader {
	addr, id := s.raft.Leader()
	l := Leader{ID: id, Addr: addr}
	if id != "" {
		l.Node = s.NamesByID()[id]
	}
	return l
}

// Configuration is the group's latest configuration as this server holds it.
func (s *Service) Configuration() ([]raft.Server, error) { return s.raft.Configuration() }

// NamesByID maps each node's ID in the record to its name.
func (s *Service) NamesByID() map[string]string {
	names := map[string]string{}
	s.fsm.Read(func(r *fsm.Record, _ uint64) {
		for _, n := range r.Nodes {
			names[n.ID] = n.Name
		}
	})
	return names
}

// VoterNames lists the configuration's voters by node name (by ID when the record has none).
func (s *Service) VoterNames() []string {
	servers, err := s.raft.Configuration()
	if err != nil {
		return nil
	}
	names := s.NamesByID()
	var out []string
	for _, sv := range servers {
		if sv.Suffrage == raft.Voter {
			out = append(out, raftnode.OrID(names[string(sv.ID)], string(sv.ID)))
		}
	}
	return out
}

// AddVoter adds server id at addr as a voter, or gives a non-voter its vote.
func (s *Service) AddVoter(id, addr string, timeout time.Duration) error {
	return s.raft.AddVoter(id, addr, timeout)
}

// AddNonvoter adds server id at addr without a vote, or moves a non-voter's address.
func (s *Service) AddNonvoter(id, addr string, timeout time.Duration) error {
	return s.raft.AddNonvoter(id, addr, timeout)
}

// RemoveServer takes server id out of the configuration.
func (s *Service) RemoveServer(id string, timeout time.Duration) error {
	return s.raft.RemoveServer(id, timeout)
}

// TransferLeadership hands leadership to server id at addr.
func (s *Service) TransferLeadership(id, addr string) error {
	return s.leaderErr(s.raft.TransferLeadership(id, addr))
}

// CommitIndex is the last entry this server knows committed.
func (s *Service) CommitIndex() uint64 { return s.raft.CommitIndex() }

// State is this server's Raft figures at one moment.
type State struct {
	State       raft.RaftState
	Term        uint64
	LastIndex   uint64
	CommitIndex uint64
	// Applied is the index of the last command the record applied.
	Applied uint64
	// LastContact is when this server last heard from a leader; zero when never or leading.
	LastContact time.Time
}

// Figures are this server's Raft figures now.
func (s *Service) Figures() State {
	st := State{State: s.raft.State(), Term: s.raft.Term(), LastIndex: s.raft.LastIndex(),
		CommitIndex: s.raft.CommitIndex(), Applied: s.raft.Applied()}
	if st.State != raft.Leader {
		st.LastContact = s.raft.LastContact()
	}
	return st
}

// Stats are hashicorp/raft's own figures by name.
func (s *Service) Stats() map[string]string { return s.raft.Stats() }

// Snapshot takes a snapshot of the record now (compacting the log).
func (s *Service) Snapshot() error { return s.raft.Snapshot() }

// Save writes the record as committed: a barrier first, so every acknowledged command is in.
// Only the leader can; another server answers NotLeaderError.
func (s *Service) Save(w io.Writer) error {
	if err := s.raft.Barrier(ApplyTimeout); err != nil {
		return s.leaderErr(err)
	}
	snap, err := s.fsm.Snapshot()
	if err != nil {
		return err
	}
	var buf sink
	if err := snap.Persist(&buf); err != nil {
		return err
	}
	_, err = w.Write(buf.Bytes())
	return err
}

// Restore replaces the record with a saved one through Raft, so every server gets it. data
// is checked first: what is not a snapshot of a record is refused before Raft sees it, with
// an error wrapping *BadSnapshot.
func (s *Service) Restore(data []byte, timeout time.Duration) error {
	if _, _, err := fsm.DecodeSnapshot(bytes.NewReader(data)); err != nil {
		return &BadSnapshot{Err: err}
	}
	meta := &raft.SnapshotMeta{Version: raft.SnapshotVersionMax, Size: int64(len(data))}
	return s.leaderErr(s.raft.Restore(meta, bytes.NewReader(data), timeout))
}

// BadSnapshot says what was given to Restore is not a snapshot of a record.
type BadSnapshot struct{ Err error }

func (e *BadSnapshot) Error() string { return e.Err.Error() }
func (e *BadSnapshot) Unwrap() error { return e.Err }

// sink is a snapshot written to memory.
type sink struct{ bytes.Buffer }

func (*sink) ID() string    { return "api" }
func (*sink) Cancel() error { return nil }
func (*sink) Close() error  { return nil }
