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
	"meshd/fsm"
)

// DefaultQuarantine is how long a removed node's private-network address is held back from new
// enrolments when the operator does not say (`meshd node remove --quarantine`): long enough that
// whatever still knows the old node by its address (a peer's config, a firewall rule, a cache)
// is gone before another machine answers there.
const DefaultQuarantine = 24 * time.Hour

// NodeRemoveRequest is `meshd node remove`'s body.
type NodeRemoveRequest struct {
	// Quarantine is how long the node's address stays unassigned, as time.ParseDuration reads
	// it; empty means DefaultQuarantine.
	Quarantine string `json:"quarantine,omitempty"`
}

// NodeRemoveView is what `meshd node remove` did.
type NodeRemoveView struct {
	Node    string `json:"node"`
	ID      string `json:"id"`
	Server  bool   `json:"server"`
	Address string `json:"address,omitempty"`
	// QuarantineUntil is when Address may be given to a new enrolment again.
	QuarantineUntil time.Time `json:"quarantine_until"`
	// RevokedKey is the node's identity key: no certificate for it is let in from now on.
	RevokedKey string `json:"revoked_key"`
	Index      uint64 `json:"index"`
	// Voters are the Raft voters left when the node was a server.
	Voters  []string `json:"voters,omitempty"`
	Warning string   `json:"warning,omitempty"`
}

// removeNode takes a node out of the record (committed first: its key revoked, its address
// quarantined), then, for a server, out of Raft's configuration.
func (s *serverRole) removeNode(w http.ResponseWriter, req *http.Request) {
	name := req.PathValue("node")
	var body NodeRemoveRequest
	if err := json.NewDecoder(io.LimitReader(req.Body, 1<<16)).Decode(&body); err != nil && err != io.EOF {
		writeJSON(w, http.StatusBadRequest, apiError{Error: "node remove: bad request: " + err.Error()})
		return
	}
	q := DefaultQuarantine
	if body.Quarantine != "" {
		d, err := time.ParseDuration(body.Quarantine)
		if err != nil || d < 0 {
			writeJSON(w, http.StatusBadRequest, apiError{Error: fmt.Sprintf("node %s: quarantine %q is not a duration of zero or more, such as 24h", name, body.Quarantine)})
			return
		}
		q = d
	}
	until := time.Now().Add(q).UTC().Truncate(time.Second)
	v, index, err := s.raft.ApplyAt(fsm.OpNodeRemove, fsm.NodeRemove{Node: name, Until: until, Leader: s.node.Name}, applyTimeout)
	committedAt(w, index)
	if err != nil {
		writeErr(w, err)
		return
	}
	n := v.(*fsm.Node)
	out := NodeRemoveView{Node: n.Name, ID: n.ID, Server: n.Server, Address: n.Address, QuarantineUntil: until, RevokedKey: n.PublicKey, Index: index}
	if n.Server {
		if err := s.raft.RemoveServer(n.ID, applyTimeout); err != nil {
			writeErr(w, fmt.Errorf("node %s is out of the record (index %d), but raft has not taken it out of the group yet (%w); its certificate is refused all the same", name, index, err))
			return
		}
		out.Voters = s.voterNames()
		out.Warning = autopilot.EvenWarning(len(out.Voters))
	}
	s.log.Info("node removed by the operator", "removed", n.Name, "server", n.Server, "address", n.Address, "quarantine_until", until)
	writeJSON(w, http.StatusOK, out)
}
