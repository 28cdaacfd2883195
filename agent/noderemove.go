package agent

// `meshd node remove`: a node leaves the record for good. The leader's to do, forwarded like any
// write.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"meshd/agent/autopilot"
	"meshd/api"
	"meshd/fsm"
)

// removeNode takes a node out of the record (committed first: its key revoked, its address
// quarantined), then, for a server, out of Raft's configuration.
func (s *recordAPI) removeNode(w http.ResponseWriter, req *http.Request) {
	name := req.PathValue("node")
	var body api.NodeRemoveRequest
	if err := json.NewDecoder(io.LimitReader(req.Body, 1<<16)).Decode(&body); err != nil && err != io.EOF {
		api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: "node remove: bad request: " + err.Error()})
		return
	}
	q := api.DefaultQuarantine
	if body.Quarantine != "" {
		d, err := time.ParseDuration(body.Quarantine)
		if err != nil || d < 0 {
			api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: fmt.Sprintf("node %s: quarantine %q is not a duration of zero or more, such as 24h", name, body.Quarantine)})
			return
		}
		q = d
	}
	until := time.Now().Add(q).UTC().Truncate(time.Second)
	v, index, err := s.propose(req, fsm.OpNodeRemove, fsm.NodeRemove{Node: name, Until: until, Leader: s.node.Name})
	committedAt(w, index)
	if err != nil {
		writeErr(w, err)
		return
	}
	n := v.(*fsm.Node)
	out := api.NodeRemoveView{Node: n.Name, ID: n.ID, Server: n.Server, Address: n.Address, QuarantineUntil: until, RevokedKey: n.PublicKey, Index: index}
	if n.Server {
		if err := s.rec.RemoveServer(n.ID, applyTimeout); err != nil {
			writeErr(w, fmt.Errorf("node %s is out of the record (index %d), but raft has not taken it out of the group yet (%w); its certificate is refused all the same", name, index, err))
			return
		}
		out.Voters = s.rec.VoterNames()
		out.Warning = autopilot.EvenWarning(len(out.Voters))
	}
	s.log.Info("node removed by the operator", "removed", n.Name, "server", n.Server, "address", n.Address, "quarantine_until", until)
	api.WriteJSON(w, http.StatusOK, out)
}
