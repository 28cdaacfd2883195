// Package autopilot is the Raft leader's care of its group, one pass each tick while it leads:
// it adds the servers the record has and Raft has not as non-voters, promotes a non-voter once
// it has been current (its record within TrailingEntries of the leader's commit index) for
// Stabilization, takes out of the group the servers the record no longer counts, and hands
// leadership back to the control-node once that is a voter and current. It keeps why the leader
// leads, for status, and warns when the voters are an even count.
//
// It works behind three small interfaces, so a unit test runs it on fakes: Raft (what it asks of
// the leader's Raft node, raftnode.Node in the agent), Record (the servers the record names and
// its control-node) and Asker (a server's Raft state, asked over the bus).
package autopilot
