package agent

import (
	"fmt"
	"meshd/api"
	"net/http"
	"time"
)

func (s *serverRole) raftState() api.RaftStateView {
	r := s.raft
	st := api.RaftStateView{Node: s.node.Name, ID: s.node.ID, State: r.State().String(), LastIndex: r.LastIndex(),
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
	api.WriteJSON(w, http.StatusOK, s.raftState())
}

// staleText says how far a follower's record may be behind.
func staleText(st api.RaftStateView) string {
	behind := uint64(0)
	if st.CommitIndex > st.Applied {
		behind = st.CommitIndex - st.Applied
	}
	return fmt.Sprintf("record at index %d, %d entries behind the commit index %d it last heard of; last contact with the leader %s ago",
		st.Applied, behind, st.CommitIndex, st.LastContact)
}
