package raftnode

// What callers ask of the running server and its group: who leads, the configuration, changes
// to it, and the figures status and metrics show. Each is one call of hashicorp/raft.

import (
	"io"
	"strconv"
	"time"

	"github.com/hashicorp/raft"
)

// IsLeader says whether this server leads now.
func (rn *Node) IsLeader() bool { return rn.raft.State() == raft.Leader }

// State is this server's Raft state (Leader, Follower, Candidate, Shutdown).
func (rn *Node) State() raft.RaftState { return rn.raft.State() }

// Leader is the leader's Raft address and ID as this server knows them; empty when none.
func (rn *Node) Leader() (addr, id string) {
	a, i := rn.raft.LeaderWithID()
	return string(a), string(i)
}

// Configuration is the group's latest configuration as this server holds it.
func (rn *Node) Configuration() ([]raft.Server, error) {
	fut := rn.raft.GetConfiguration()
	if err := fut.Error(); err != nil {
		return nil, err
	}
	return fut.Configuration().Servers, nil
}

// Bootstrap starts a new group of servers (genesis); Raft refuses it on a log that has one.
func (rn *Node) Bootstrap(servers []raft.Server) error {
	return rn.raft.BootstrapCluster(raft.Configuration{Servers: servers}).Error()
}

// LocalAddr is the address this server's transport says it is at.
func (rn *Node) LocalAddr() raft.ServerAddress { return rn.transport.LocalAddr() }

// AddVoter adds server id at addr as a voter, or gives a non-voter its vote, or moves a voter's
// address; the leader's to do.
func (rn *Node) AddVoter(id, addr string, timeout time.Duration) error {
	return rn.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(addr), 0, timeout).Error()
}

// AddNonvoter adds server id at addr without a vote, or moves a non-voter's address.
func (rn *Node) AddNonvoter(id, addr string, timeout time.Duration) error {
	return rn.raft.AddNonvoter(raft.ServerID(id), raft.ServerAddress(addr), 0, timeout).Error()
}

// RemoveServer takes server id out of the configuration.
func (rn *Node) RemoveServer(id string, timeout time.Duration) error {
	return rn.raft.RemoveServer(raft.ServerID(id), 0, timeout).Error()
}

// TransferLeadership hands leadership to server id at addr.
func (rn *Node) TransferLeadership(id, addr string) error {
	return rn.raft.LeadershipTransferToServer(raft.ServerID(id), raft.ServerAddress(addr)).Error()
}

// Barrier waits until every command before it is applied; the leader's to do.
func (rn *Node) Barrier(timeout time.Duration) error { return rn.raft.Barrier(timeout).Error() }

// Snapshot takes a snapshot of the record now.
func (rn *Node) Snapshot() error { return rn.raft.Snapshot().Error() }

// Restore replaces the record with the snapshot in r, through the log, on every server.
func (rn *Node) Restore(meta *raft.SnapshotMeta, r io.Reader, timeout time.Duration) error {
	return rn.raft.Restore(meta, r, timeout)
}

// LastIndex is the last entry in this server's log.
func (rn *Node) LastIndex() uint64 { return rn.raft.LastIndex() }

// CommitIndex is the last entry this server knows committed.
func (rn *Node) CommitIndex() uint64 { return rn.raft.CommitIndex() }

// Applied is the index of the last command the record applied.
func (rn *Node) Applied() uint64 { return rn.applied() }

// LastContact is when this server last heard from the leader; zero when never.
func (rn *Node) LastContact() time.Time { return rn.raft.LastContact() }

// Term is this server's current term.
func (rn *Node) Term() uint64 {
	t, _ := strconv.ParseUint(rn.raft.Stats()["term"], 10, 64)
	return t
}

// Stats are hashicorp/raft's own figures (term, last_log_index, ...), by name.
func (rn *Node) Stats() map[string]string { return rn.raft.Stats() }
