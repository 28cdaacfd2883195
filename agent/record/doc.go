// Package record is a server's record as a service: the FSM holding the record and the Raft
// node that feeds it its log, behind typed Go methods. Propose gives a command and waits for
// its apply (an answer only once committed, invariant 7); Read and Wait read the record at its
// index; the rest is the group (who leads, the servers, adding and removing them, handing
// leadership over), snapshots and restores, and the figures status and metrics show.
//
// It speaks no HTTP and knows no handler: the agent's handler sets take the part of it they
// need as small interfaces, so they are tested over a Service opened in memory (OpenInmem: the
// real Raft algorithm with no disk and no network) or over a fake. The Raft node itself stays
// in agent/raftnode, which alone holds a *raft.Raft.
package record
