package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"meshd/api"
	"meshd/fsm"
	"meshd/host"
	"meshd/pki"
	"meshd/report"
)

// role is what a node does by its kind, and the one place the agent's server/client split lives.
// The agent core (the node's identity and secrets, the host reconciler loop, the operator socket,
// gossip, the peer bus, the lifecycle) holds one role, chosen once at Start from the node file,
// and calls it. serverRole (server.go) holds the record service and the handler sets over it
// (the record API, the bus, forwarding, the page); clientRole (clientrole.go) holds no record:
// it watches its declaration on a server's bus over mTLS, answers its own status and refuses the
// rest of the record's API.
//
// A role is its lifecycle alone. What a kind changes in gossip (gossipRole) and in what the
// node shows (roleViews) are interfaces of their own, which the same value satisfies.
type role interface {
	// open starts what the role owns, once the host is open: Raft on a server.
	open() error
	// operatorAPI is the handler the operator's socket serves.
	operatorAPI() http.Handler
	// runLoops says in the log that the agent started, and as what, then starts the role's
	// loops, which end with ctx: what feeds the host its declaration, and the way the node's
	// host reports reach a server besides gossip.
	runLoops(ctx context.Context)
	// waitReady returns once the node serves what it is for (a server: its record replayed the
	// Raft log), for systemd's READY=1 (sdnotify.go).
	waitReady(ctx context.Context) error
	// close stops what open started, leaving everything on disk for the next start.
	close()
}

// gossipRole is how a node's kind takes part in gossip (gossip.go): where its view of the mesh
// comes from (the record on a server, a server's answer on a client), whose keys it trusts and
// whom it joins.
type gossipRole interface {
	// gossipView is the mesh's gossip as this node knows it: every node's endpoints and key.
	gossipView() api.GossipView
	// refreshView brings gossipView up to date before it is used.
	refreshView(ctx context.Context) error
	// enrolledKey is the public key node enrolled with, as the record writes it; "" if unknown.
	enrolledKey(node string) string
	// revokedKey says whether pub (as the record writes keys) is a removed node's: gossip refuses
	// a member announcing it and drops what it signed.
	revokedKey(pub string) bool
	// isServer says whether node is a server: gossip sends the reports to the servers only.
	isServer(node string) bool
	// joinsGossip says whether this node joins p's gossip member.
	joinsGossip(p api.GossipPeer) bool
	// servePeerBus serves the node's bus on port, for the other nodes' calls, once gossip knows
	// the node's own ports.
	servePeerBus(ctx context.Context, port uint16)
	// waitGossipRound waits for the next round of gossip joins, at most d.
	waitGossipRound(ctx context.Context, d time.Duration)
}

// roleViews is what a node's kind shows besides its API (metrics.go).
type roleViews interface {
	// metricReports are the host reports the node's metrics show, by node: every node's on a
	// server, its own on a client.
	metricReports() map[string]*report.Report
	// collectRole adds what only the role knows to a scrape: Raft's state on a server.
	collectRole(ch chan<- prometheus.Metric)
	// statusPage is the status page the metrics listeners serve beside /metrics: a server's
	// (statuspage.go); nil on a client, which holds no record.
	statusPage() http.Handler
}

// core is what the agent hands its role when it makes it: the node and its log, the agent's
// config, the node's secrets and TLS identity, where its declarations go, its host, and the
// agent's own parts a role calls, each a small interface the agent satisfies. A role holds no
// *Agent.
type core struct {
	self
	cfg      Config
	secrets  *pki.NodeSecrets
	identity tls.Certificate
	caCert   *x509.Certificate
	// declarations takes the node's own declaration each time it changes; privateRange keeps
	// the private network's range the last one said.
	declarations chan<- *fsm.Declaration
	privateRange *atomic.Value
	// host is the node's reconciler: its report and its passes.
	host *host.Host
	mx   *metrics
	// pulse wakes the status pages when a report arrives.
	pulse *pulse
	// gossip reads the node's gossip member; ask calls another node's bus; peerBus is the
	// routes every node's bus serves; local the routes about this machine the socket serves
	// whatever the kind; keyring is the gossip keyring in use.
	gossip  gossipReader
	ask     peerAsker
	peerBus peerRouter
	local   localRouter
	keyring func() [][]byte
}

// localRouter adds the operator socket's routes about this machine: its originals, its gossip
// members, leaving, reach checks; and on a server the keyring's, which it fans out.
type localRouter interface {
	localRoutes(mux *http.ServeMux)
	keyringRoutes(mux *http.ServeMux)
}

// core is what this agent hands its role.
func (a *Agent) core() core {
	return core{self: self{node: a.node, log: a.log}, cfg: a.cfg, secrets: a.secrets, identity: a.identity, caCert: a.caCert,
		declarations: a.declarations, privateRange: &a.privateRange, host: a.host, mx: a.mx, pulse: &a.pagePulse,
		gossip: a, ask: a, peerBus: a, local: a, keyring: a.keys.currentKeyring}
}

// localRoutes are the socket's routes about this machine, on every kind of node.
func (a *Agent) localRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/nodes/{node}/original", a.getOriginal)
	mux.HandleFunc("GET /v1/members", a.getMembers)
	mux.HandleFunc("POST /v1/leave", a.postLeave)
	mux.HandleFunc("GET /v1/reach/{node}", a.getReach)
}

// keyringRoutes are the socket's keyring routes, a server's: it changes every node's ring.
func (a *Agent) keyringRoutes(mux *http.ServeMux) {
	a.keys.routes(mux)
}

// nodeKind is a role with its part in gossip and in what the node shows: a server or a client.
type nodeKind interface {
	role
	gossipRole
	roleViews
}

// setKind gives the agent its kind, once, at Start.
func (a *Agent) setKind(k nodeKind) {
	a.role, a.peers, a.views = k, k, k
}
