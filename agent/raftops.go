package agent

// The operator's Raft commands on a running group: remove-peer and transfer-leader (the leader's
// to do: they come to it forwarded like any write).

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"meshd/agent/autopilot"
	"meshd/api"
	"meshd/fsm"
)

// removePeer takes a server out of the group: first the record (committed: the node stays, no
// longer a server, so no autopilot adds it back), then Raft's configuration.
func (s *recordAPI) removePeer(w http.ResponseWriter, req *http.Request) {
	name := req.PathValue("node")
	v, index, err := s.propose(req, fsm.OpServerRemove, fsm.ServerRemove{Node: name})
	committedAt(w, index)
	if err != nil {
		writeErr(w, err)
		return
	}
	n := v.(*fsm.Node)
	if err := s.rec.RemoveServer(n.ID, applyTimeout); err != nil {
		writeErr(w, fmt.Errorf("node %s is no longer a server in the record (index %d), but raft has not taken it out of the group yet (%w); the leader keeps trying", name, index, err))
		return
	}
	out := api.RemovePeerView{Node: name, ID: n.ID, Index: index, Voters: s.rec.VoterNames()}
	out.Warning = autopilot.EvenWarning(len(out.Voters))
	s.log.Info("raft: server removed by the operator", "server", name, "voters", out.Voters)
	api.WriteJSON(w, http.StatusOK, out)
}

// transferLeader hands leadership to a voter: the one named, else the control-node.
func (s *recordAPI) transferLeader(w http.ResponseWriter, req *http.Request) {
	var in api.TransferRequest
	if err := json.NewDecoder(io.LimitReader(req.Body, 1<<20)).Decode(&in); err != nil && !errors.Is(err, io.EOF) {
		api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: "transfer request: " + err.Error()})
		return
	}
	var servers []autopilot.Server
	var control string
	s.rec.Read(func(r *fsm.Record, _ uint64) { servers, _, _, control = recordServers(r, s.node.Name) })
	to := in.Node
	if to == "" {
		to = control
	}
	if to == s.node.Name {
		api.WriteJSON(w, http.StatusOK, api.TransferView{From: s.node.Name, To: to, Note: "it already leads"})
		return
	}
	var target *autopilot.Server
	for i := range servers {
		if servers[i].Name == to {
			target = &servers[i]
		}
	}
	if target == nil {
		writeErr(w, notFound(fmt.Sprintf("node %s is not a server of the record; the servers are %s", to, serverNames(servers))))
		return
	}
	if err := s.rec.TransferLeadership(target.ID, target.RaftAddr); err != nil {
		if nl := s.rec.NotLeader(err); nl != nil {
			err = nl
		}
		writeErr(w, fmt.Errorf("leadership transfer from %s to %s: %w", s.node.Name, to, err))
		return
	}
	out := api.TransferView{From: s.node.Name, To: to}
	if to != control {
		out.Note = fmt.Sprintf("the control-node %s takes leadership back once it is current; to keep it elsewhere, stop the control-node's agent", control)
	}
	s.log.Info("raft: leadership transferred by the operator", "to", to)
	api.WriteJSON(w, http.StatusOK, out)
}

func serverNames(servers []autopilot.Server) string {
	out := ""
	for i, g := range servers {
		if i > 0 {
			out += ", "
		}
		out += g.Name
	}
	return out
}
