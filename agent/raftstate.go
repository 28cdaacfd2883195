package agent

import (
	"fmt"
	"net/http"
	"time"
)

// RaftStateView is one server's Raft as it sees it: `meshd operator raft list-peers` and the
// autopilot ask it of each server.
type RaftStateView struct {
	Node  string `json:"node"`
	ID    string `json:"id"`
	State string `json:"state"`
	Term  uint64 `json:"term"`
	// LastIndex is the last entry in its log; CommitIndex the last it knows committed; Applied
	// the last its record applied.
	LastIndex   uint64 `json:"last_index"`
	CommitIndex uint64 `json:"commit_index"`
	Applied     uint64 `json:"applied"`
	// LastContact is how long ago it last heard from the leader ("" on the leader).
	LastContact string `json:"last_contact,omitempty"`
	Leader      string `json:"leader,omitempty"`
}

func (s *serverRole) raftState() RaftStateView {
	r := s.raft
	st := RaftStateView{Node: s.node.Name, ID: s.node.ID, State: r.State().String(), LastIndex: r.LastIndex(),
		CommitIndex: r.CommitIndex(), Applied: s.raft.Applied(), Leader: s.leader().Node}
	st.Term = r.Term()
	if !r.IsLeader() {
		if lc := r.LastContact(); !lc.IsZero() {
			st.LastContact = time.Since(lc).Round(time.Millisecond).String()
		} else {
			st.LastContact = "never"
		}
	}
	return st
}

func (s *serverRole) getRaftState(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.raftState())
}

// staleText says how far a follower's record may be behind.
func staleText(st RaftStateView) string {
	behind := uint64(0)
	if st.CommitIndex > st.Applied {
		behind = st.CommitIndex - st.Applied
	}
	return fmt.Sprintf("record at index %d, %d entries behind the commit index %d it last heard of; last contact with the leader %s ago",
		st.Applied, behind, st.CommitIndex, st.LastContact)
}
