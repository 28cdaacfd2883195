// Package raftnode is a server's Raft on disk: hashicorp/raft with its log and stable store in
// one raft-boltdb file and snapshots beside it, over a mutual-TLS stream layer that only a server
// of the mesh gets through, and the recovery of a group that lost its quorum (Recover).
//
// Nothing outside this package holds the *raft.Raft: a Node answers what callers need (who
// leads, the configuration and its changes, apply, barrier, snapshot and restore, the figures
// status shows), so the rules of using Raft (wait for the record to catch up with the log before
// trusting it, turn Raft's not-leader error into NotLeaderError) live in one place.
package raftnode
