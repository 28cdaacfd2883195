package agent

// The autopilot (package autopilot) on this server: the record and the bus as it sees them.

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"

	"meshd/agent/autopilot"
	"meshd/api"
	"meshd/fsm"
)

// recordServers lists the record's servers with a Raft address, with their gossip peers as node
// self's view has them, the IDs of its nodes that are no longer servers, and the control-node.
func recordServers(r *fsm.Record, self string) (servers []autopilot.Server, peers map[string]api.GossipPeer, removed map[string]bool, control string) {
	removed, peers = map[string]bool{}, map[string]api.GossipPeer{}
	if r.Genesis != nil {
		control = r.Genesis.ControlNode
	}
	view := gossipViewOf(r, self)
	for _, name := range r.NodeNames() {
		n := r.Nodes[name]
		if !n.Server {
			removed[n.ID] = true
			continue
		}
		port, err := meshPort(r, n, "raft")
		if err != nil || n.Advertise == "" {
			continue
		}
		peers[name], _ = view.Peer(name)
		servers = append(servers, autopilot.Server{Name: name, ID: n.ID, RaftAddr: net.JoinHostPort(n.Advertise, strconv.Itoa(int(port)))})
	}
	return servers, peers, removed, control
}

// apRecord is the record and the bus as this server's autopilot reads them.
type apRecord struct {
	// self is this server's node name; ask calls another server's bus.
	self string
	rec  reader
	ask  peerAsker
	// peers are the servers' gossip peers as the last Servers call saw them: where to ask each.
	mu    sync.Mutex
	peers map[string]api.GossipPeer
}

func (ar *apRecord) Servers() (servers []autopilot.Server, removed map[string]bool, control string) {
	var peers map[string]api.GossipPeer
	ar.rec.Read(func(r *fsm.Record, _ uint64) { servers, peers, removed, control = recordServers(r, ar.self) })
	ar.mu.Lock()
	ar.peers = peers
	ar.mu.Unlock()
	return servers, removed, control
}

func (ar *apRecord) ControlNode() string {
	control := ""
	ar.rec.Read(func(r *fsm.Record, _ uint64) {
		if r.Genesis != nil {
			control = r.Genesis.ControlNode
		}
	})
	return control
}

// Applied asks server g's bus for its Raft state.
func (ar *apRecord) Applied(ctx context.Context, g autopilot.Server) (uint64, error) {
	ar.mu.Lock()
	p := ar.peers[g.Name]
	ar.mu.Unlock()
	if p.Bus == 0 {
		return 0, fmt.Errorf("server %s has no bus port in the gossip view", g.Name)
	}
	var st api.RaftStateView
	if err := ar.ask.peerJSON(ctx, p, http.MethodGet, "/v1/raft/state", nil, &st); err != nil {
		return 0, err
	}
	return st.Applied, nil
}
