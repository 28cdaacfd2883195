package agent

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"meshd/api"
	"meshd/fsm"
	"meshd/gossip"
	"meshd/pki"
	"meshd/report"
)

// Every agent, server or client, is a gossip member: it listens on its node's mesh.gossip
// setting (tcp and udp, all addresses), tells the others its advertise address, encrypts with
// the node's sealed keyring and signs its host reports with its enrolled identity key. Servers
// verify a report with the key the record holds for its node before they use it; a client
// verifies with the keys a server gave it (GossipView). A node's report goes to the servers only
// (the record's servers on a server, the view's on a client; package gossip's route.go), and a
// client keeps no report but its own. Membership (alive, failed, left) and the verified reports
// are what `meshd status` and `meshd node show` show.

// meshPort is node n's mesh.SETTING port, as fsm works it out for the declaration too (its
// setting, else the catalogue's default): one source, never recomputed here.
func meshPort(r *fsm.Record, n *fsm.Node, setting string) (uint16, error) {
	return fsm.MeshPort(r, n, setting)
}

// GossipPort is node n's gossip port: its mesh.gossip setting, else the catalogue's default.
func GossipPort(r *fsm.Record, n *fsm.Node) (uint16, error) { return meshPort(r, n, "gossip") }

// gossipViewOf composes the gossip view for node from the record.
func gossipViewOf(r *fsm.Record, node string) api.GossipView {
	v := api.GossipView{Node: node, Nodes: []api.GossipPeer{}}
	for _, name := range r.NodeNames() {
		n := r.Nodes[name]
		p := api.GossipPeer{Name: n.Name, Server: n.Server, Advertise: n.Advertise, PublicKey: n.PublicKey}
		p.Bus, _ = BusPort(r, n)
		p.Gossip, _ = GossipPort(r, n)
		v.Nodes = append(v.Nodes, p)
	}
	for _, rv := range r.Revoked {
		v.Revoked = append(v.Revoked, rv.PublicKey)
	}
	return v
}

// gossipState is the agent's gossip member and what it knows of the others.
type gossipState struct {
	mu   sync.Mutex
	g    *gossip.Gossip
	port uint16 // the port g is bound to
	// stop ends the agent's Run (set by Run): `meshd leave` stops the agent after leaving.
	stop context.CancelFunc
}

func (a *Agent) member() *gossip.Gossip {
	a.gs.mu.Lock()
	defer a.gs.mu.Unlock()
	return a.gs.g
}

// verifyKey is gossip's Verify: the key node enrolled with, as the role knows it (from the record
// on a server, from the server's view on a client).
func (a *Agent) verifyKey(node string) (ed25519.PublicKey, bool) {
	s := a.peers.enrolledKey(node)
	if s == "" {
		return nil, false
	}
	pub, err := pki.ParsePublicKey(s)
	if err != nil {
		return nil, false
	}
	return pub, true
}

// revokedIdentity is gossip's Revoked: whether the record revoked pub (a removed node's key), as
// the role knows it.
func (a *Agent) revokedIdentity(pub ed25519.PublicKey) bool {
	return a.peers.revokedKey(pki.PublicKeyString(pub))
}

// runGossip starts the node's gossip member on its mesh.gossip port once it is known, joins the
// mesh through the nodes it knows (servers join every node, clients the servers), joins again
// whichever of those it does not see alive, and publishes the host's reports.
func (a *Agent) runGossip(ctx context.Context) {
	var (
		lastErr  string
		lastJoin time.Time
	)
	warn := func(msg string, err error, args ...any) {
		if err.Error() != lastErr {
			a.log.Warn(msg, append(args, "err", err)...)
			lastErr = err.Error()
		}
	}
	go a.publishReports(ctx)
	for ctx.Err() == nil {
		wait := 5 * time.Second
		if err := a.peers.refreshView(ctx); err != nil {
			warn("gossip: no server gave the mesh's gossip view; retrying", err, "servers", a.node.Servers)
			if a.member() == nil {
				wait = 2 * time.Second
			}
			sleepCtx(ctx, wait)
			continue
		}
		view := a.peers.gossipView()
		self, ok := view.Peer(a.node.Name)
		if !ok {
			warn("gossip: the record does not hold this node yet", fmt.Errorf("node %s unknown", a.node.Name))
			sleepCtx(ctx, time.Second)
			continue
		}
		a.peers.servePeerBus(ctx, self.Bus)
		if port := a.gossipPort(); port != 0 && port != self.Gossip {
			// The record moved the node's gossip port (`meshd node set NODE mesh.gossip=N`): leave
			// on the old one, so the others take the new address at once, and rejoin on the new.
			a.log.Info("gossip port changed in the record; rejoining on the new one", "from", port, "to", self.Gossip)
			a.dropGossip(5 * time.Second)
			lastJoin = time.Time{}
		}
		g := a.member()
		if g == nil {
			var err error
			if g, err = a.startGossip(self); err != nil {
				warn("gossip not started; retrying", err, "port", self.Gossip)
				sleepCtx(ctx, 2*time.Second)
				continue
			}
		}
		lastErr = ""
		// Join whom we know but do not see alive, at most every 10 s.
		if time.Since(lastJoin) >= 10*time.Second {
			alive := map[string]bool{}
			for _, m := range g.Members() {
				alive[m.Name] = m.State == gossip.StateAlive
			}
			var targets []string
			for _, p := range view.Nodes {
				if p.Name == a.node.Name || alive[p.Name] || p.Advertise == "" || p.Gossip == 0 || !a.peers.joinsGossip(p) {
					continue
				}
				targets = append(targets, net.JoinHostPort(p.Advertise, strconv.Itoa(int(p.Gossip))))
			}
			if len(targets) > 0 {
				lastJoin = time.Now()
				if n, err := g.Join(targets); err != nil {
					a.log.Debug("gossip join", "targets", targets, "err", err)
				} else {
					a.log.Info("gossip joined", "via", targets, "answered", n)
				}
			}
		}
		a.peers.waitGossipRound(ctx, wait)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// startGossip starts the node's member on self's gossip port.
func (a *Agent) startGossip(self api.GossipPeer) (*gossip.Gossip, error) {
	if self.Gossip == 0 {
		return nil, fmt.Errorf("node %s has no mesh.gossip port", a.node.Name)
	}
	adv := self.Advertise
	if net.ParseIP(adv) == nil {
		adv = ""
	}
	keys := a.keys.currentKeyring()
	g, err := gossip.Start(gossip.Config{
		Name: a.node.Name, BindAddr: "0.0.0.0", BindPort: int(self.Gossip),
		AdvertiseAddr: adv, AdvertisePort: int(self.Gossip),
		Keyring: keys, Identity: a.secrets.NodeKey, Verify: a.verifyKey, Revoked: a.revokedIdentity, Server: a.peers.isServer,
		Logger: a.log, OnReport: func(gossip.Report) { a.pagePulse.fire() },
	})
	if err != nil {
		return nil, fmt.Errorf("node %s: gossip on port %d (tcp and udp, all addresses): %w", a.node.Name, self.Gossip, err)
	}
	a.gs.mu.Lock()
	a.gs.g, a.gs.port = g, self.Gossip
	a.gs.mu.Unlock()
	return g, nil
}

// gossipPort is the port the node's member is bound to; 0 when none runs.
func (a *Agent) gossipPort() uint16 {
	a.gs.mu.Lock()
	defer a.gs.mu.Unlock()
	if a.gs.g == nil {
		return 0
	}
	return a.gs.port
}

// dropGossip leaves gracefully (the others record the node as left, so its next join may come
// from another address) and shuts the member down.
func (a *Agent) dropGossip(timeout time.Duration) {
	a.gs.mu.Lock()
	g := a.gs.g
	a.gs.g, a.gs.port = nil, 0
	a.gs.mu.Unlock()
	if g == nil {
		return
	}
	if err := g.Leave(timeout); err != nil {
		a.log.Warn("gossip leave before moving", "err", err)
	}
	if err := g.Shutdown(); err != nil {
		a.log.Warn("gossip shutdown before moving", "err", err)
	}
}

// stopGossip shuts the member down without a leave (the others find it failed until it is back).
func (a *Agent) stopGossip() {
	a.gs.mu.Lock()
	g := a.gs.g
	a.gs.mu.Unlock()
	if g != nil {
		_ = g.Shutdown()
	}
}

// reportKey is a report without its time: two passes that saw the same thing publish once.
func reportKey(rep report.Report) []byte {
	rep.When = time.Time{}
	b, _ := json.Marshal(rep)
	return b
}

// publishInterval is how often an unchanged report is published again, so a member that missed
// it (or a server that restarted) has it back without waiting for push-pull.
const publishInterval = 10 * time.Second

// publishCheck is how often the publisher looks without a pass to wake it while it has nothing
// published yet (the member coming up, no report yet) or its last try failed.
const publishCheck = time.Second

// publishReports signs and publishes the host's report as soon as a pass changed it (the host
// wakes it after every pass: a drift seen on the machine is in the mesh within the gossip
// interval), and again every publishInterval. Between passes it sleeps until the report is due
// again rather than looking every second: an agent at rest wakes for it once a publishInterval.
func (a *Agent) publishReports(ctx context.Context) {
	var last []byte
	var at time.Time
	passed := a.host.Passed()
	t := time.NewTimer(publishCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-passed:
		case <-t.C:
		}
		next := publishCheck
		if a.publishOnce(&last, &at) {
			next = max(publishCheck, time.Until(at.Add(publishInterval)))
		}
		t.Reset(next)
	}
}

// publishOnce publishes the host's report if it changed since last or was published at at more
// than publishInterval ago; false when it could not (no member or no report yet, or publishing
// failed): the publisher looks again after publishCheck.
func (a *Agent) publishOnce(last *[]byte, at *time.Time) bool {
	g := a.member()
	if g == nil {
		return false
	}
	rep := a.host.Report()
	if rep.When.IsZero() {
		return false
	}
	key := reportKey(rep)
	if bytes.Equal(key, *last) && time.Since(*at) < publishInterval {
		return true
	}
	b, err := json.Marshal(rep)
	if err == nil {
		err = g.Publish(b)
	}
	if err != nil {
		a.log.Warn("host report not published", "err", err)
		return false
	}
	*last, *at = key, time.Now()
	return true
}

// reportFeed is the running member's verified reports (fleet.go reads them by what changed);
// nil before gossip starts.
func (a *Agent) reportFeed() reportFeed {
	if g := a.member(); g != nil {
		return g
	}
	return nil
}

// liveness is node's state in this member's gossip view: alive, failed, left, or unknown.
func liveness(members map[string]gossip.Member, node string) (string, time.Time) {
	m, ok := members[node]
	if !ok {
		return "unknown", time.Time{}
	}
	return string(m.State), m.Since
}

func (a *Agent) membersByName() map[string]gossip.Member {
	out := map[string]gossip.Member{}
	if g := a.member(); g != nil {
		for _, m := range g.Members() {
			out[m.Name] = m
		}
	}
	return out
}

func (a *Agent) getMembers(w http.ResponseWriter, _ *http.Request) {
	v := api.MembersView{Node: a.node.Name, Members: []api.MemberView{}, Rejected: map[string]uint64{}}
	if g := a.member(); g != nil {
		v.Running = true
		v.Members = memberViews(g)
		v.DetectionBound = g.DetectionBound().String()
		for r, n := range g.Rejected() {
			v.Rejected[string(r)] = n
		}
	}
	api.WriteJSON(w, http.StatusOK, v)
}

// memberViews are g's members as `meshd members` and a client's status show them.
func memberViews(g *gossip.Gossip) []api.MemberView {
	out := []api.MemberView{}
	for _, m := range g.Members() {
		out = append(out, api.MemberView{Name: m.Name, Address: m.Addr, State: string(m.State), Since: m.Since})
	}
	return out
}

// postLeave is `meshd leave`: the node leaves gossip (the others record it as left, not failed)
// and the agent stops.
func (a *Agent) postLeave(w http.ResponseWriter, _ *http.Request) {
	g := a.member()
	if g == nil {
		writeErr(w, fmt.Errorf("node %s is not in the mesh's gossip (not started): nothing to leave", a.node.Name))
		return
	}
	if err := g.Leave(15 * time.Second); err != nil {
		writeErr(w, err)
		return
	}
	a.log.Info("left the mesh's gossip; the agent stops")
	api.WriteJSON(w, http.StatusOK, api.LeaveView{Left: true, Node: a.node.Name})
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
	a.gs.mu.Lock()
	stop := a.gs.stop
	a.gs.mu.Unlock()
	if stop != nil {
		stop()
	}
}

var errNoGossip = errors.New("gossip is not running on this node")
