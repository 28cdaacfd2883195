package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"meshd/api"
	"meshd/gossip"
)

// `meshd check reach NODE` tells which of the bus and gossip ports is blocked, and in which
// direction. This node probes NODE's ports (this → NODE); then it asks NODE over the bus to probe
// its own (NODE → this). Every probe leaves from an ephemeral port, so only the port named is
// tested: tcp by connecting; gossip's udp by gossip.Ping, a memberlist ping encrypted with the
// gossip key, which NODE's member answers to the port it came from.

const reachTimeout = 2 * time.Second

// probePeer probes p's bus (tcp) and gossip (tcp and udp) ports from this node.
func (a *Agent) probePeer(ctx context.Context, p api.GossipPeer) []api.ReachCheck {
	var key []byte
	if g := a.member(); g != nil {
		if keys := g.KeyringList(); len(keys) > 0 {
			key = keys[0].Key
		}
	}
	mk := func(port, proto string, n uint16, err error) api.ReachCheck {
		c := api.ReachCheck{From: a.node.Name, To: p.Name, Port: port, Proto: proto, Number: n,
			Address: net.JoinHostPort(p.Advertise, strconv.Itoa(int(n))), OK: err == nil}
		if err != nil {
			c.Error = err.Error()
		}
		return c
	}
	out := []api.ReachCheck{
		mk("bus", "tcp", p.Bus, dialTCP(ctx, p.Advertise, p.Bus)),
		mk("gossip", "tcp", p.Gossip, dialTCP(ctx, p.Advertise, p.Gossip)),
	}
	var uerr error
	if key == nil {
		uerr = fmt.Errorf("node %s has no gossip key to probe with (%w)", a.node.Name, errNoGossip)
	} else {
		uerr = gossip.Ping(ctx, p.Advertise, p.Gossip, key)
	}
	return append(out, mk("gossip", "udp", p.Gossip, uerr))
}

func dialTCP(ctx context.Context, host string, port uint16) error {
	d := net.Dialer{Timeout: reachTimeout}
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort(host, strconv.Itoa(int(port))))
	if err != nil {
		return err
	}
	return c.Close()
}

// postReach is the bus's reach check: probe the asker's ports from here.
func (a *Agent) postReach(w http.ResponseWriter, req *http.Request, peer string) {
	var in api.ReachRequest
	if err := json.NewDecoder(io.LimitReader(req.Body, 1<<16)).Decode(&in); err != nil {
		api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: "reach request: " + err.Error()})
		return
	}
	// Probe only the asker, at the address this node knows for it.
	p, ok := a.peers.gossipView().Peer(peer)
	if !ok {
		api.WriteJSON(w, http.StatusForbidden, api.ErrorBody{Error: fmt.Sprintf("node %s does not know node %s", a.node.Name, peer)})
		return
	}
	api.WriteJSON(w, http.StatusOK, a.probePeer(req.Context(), p))
}

// getReach is `meshd check reach NODE`.
func (a *Agent) getReach(w http.ResponseWriter, req *http.Request) {
	name := req.PathValue("node")
	if err := a.peers.refreshView(req.Context()); err != nil {
		a.log.Warn("reach: the gossip view from a server", "err", err)
	}
	view := a.peers.gossipView()
	p, ok := view.Peer(name)
	if !ok {
		var names []string
		for _, n := range view.Nodes {
			names = append(names, n.Name)
		}
		writeErr(w, notFound(fmt.Sprintf("node %s: no such node (known: %v)", name, names)))
		return
	}
	if name == a.node.Name {
		api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: fmt.Sprintf("node %s is this node: check reach another node", name)})
		return
	}
	v := api.ReachView{From: a.node.Name, To: name, Checks: a.probePeer(req.Context(), p), Blocked: []string{}}
	var back []api.ReachCheck
	ctx, cancel := context.WithTimeout(req.Context(), 20*time.Second)
	err := a.peerJSON(ctx, p, http.MethodPost, "/v1/reach", api.ReachRequest{Target: api.GossipPeer{Name: a.node.Name}}, &back)
	cancel()
	if err != nil {
		v.Reverse = fmt.Sprintf("could not ask node %s to probe back (%v): %s → %s unknown", name, err, name, a.node.Name)
	}
	v.Checks = append(v.Checks, back...)
	for _, c := range v.Checks {
		if !c.OK {
			v.Blocked = append(v.Blocked, fmt.Sprintf("%s %s port %d (%s): blocked %s → %s", c.Port, c.Proto, c.Number, c.Address, c.From, c.To))
		}
	}
	api.WriteJSON(w, http.StatusOK, v)
}
