package agent

import (
	"fmt"
	"net/http"
	"time"

	"github.com/hashicorp/raft"

	"meshd/agent/record"
	"meshd/api"
	"meshd/setup"
)

func (s *recordAPI) raftState() api.RaftStateView { return raftStateOf(s.node, s.rec) }

// raftStateOf is node's Raft state as its record service has it.
func raftStateOf(node *setup.NodeFile, rec *record.Service) api.RaftStateView {
	f := rec.Figures()
	st := api.RaftStateView{Node: node.Name, ID: node.ID, State: f.State.String(), LastIndex: f.LastIndex,
		CommitIndex: f.CommitIndex, Applied: f.Applied, Leader: rec.Leader().Node, Term: f.Term}
	if f.State != raft.Leader {
		if !f.LastContact.IsZero() {
			st.LastContact = time.Since(f.LastContact).Round(time.Millisecond).String()
		} else {
			st.LastContact = "never"
		}
	}
	return st
}

func (s *recordAPI) getRaftState(w http.ResponseWriter, _ *http.Request) {
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
