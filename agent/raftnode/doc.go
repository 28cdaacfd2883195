// Package raftnode is a server's Raft on disk: hashicorp/raft with its log and stable store in
// one raft-boltdb file and snapshots beside it, both sealed at rest under the node's seal key
// (seal.go: every entry's data and every snapshot; a data dir from before the seal is sealed
// once when Raft opens it), over a mutual-TLS stream layer that only a server of the mesh gets
// through, and the recovery of a group that lost its quorum (Recover).
//
// Who reaches Raft is the record's to say: a peer's server certificate of the mesh CA must also
// be for the key of one of the record's current servers (admit.go), at either end of a
// connection. While this server's record may not know every server yet (it has not heard from
// a leader since it started, or is replaying its log; a joining server's is empty) a server the
// record does not hold at all is let in; what the record holds as no server never is. Before a
// peer proves itself it holds little (layer.go): a short handshake, a few places per source,
// and the record's servers' addresses have places of their own.
//
// Nothing outside this package holds the *raft.Raft: a Node answers what callers need (who
// leads, the configuration and its changes, apply, barrier, snapshot and restore, the figures
// status shows), so the rules of using Raft (wait for the record to catch up with the log before
// trusting it, turn Raft's not-leader error into NotLeaderError) live in one place.
//
// Two packages import it, and it imports neither: setup (genesis bootstraps the group of one
// before any agent runs) and agent/record (the running server's record service).
//
// OpenInmem runs the same Node with raft's in-memory stores and transport: the real algorithm
// with no disk and no network, so what runs over the record is tested without either. Only
// this package's own tests and the process tests start Raft on disk.
package raftnode
