package agent

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"meshd/agent/autopilot"
	"meshd/agent/record"
	"meshd/api"
	"meshd/fsm"
	"meshd/internal/ratelog"
	"meshd/pki"
)

// serverRole is a server node's role: it runs Raft with the record (fsm), answers the operator's
// whole API (handlers.go) and serves the bus (bus.go): enrolment, each node's declaration watch, the
// reports clients post. Its gossip view and the keys it verifies reports with are the record's.
type serverRole struct {
	core
	// rec is the record and the Raft group under it (package record).
	rec *record.Service

	// fleet is every node's last report and gossip's word on it (fleet.go); records the
	// operator's API over the record (recordapi.go).
	fleet   *fleet
	records *recordAPI
	// views is the gossip view, composed once per change of the record (gossipview.go).
	views *viewCache
	// page is the status page (statuspage.go).
	page *page

	// bus is what the other agents and operators call (bus.go), made once Raft is open.
	bus *bus
	// ap is the leader's care of the group (package autopilot, made at open); fwd hands what the
	// leader answers to it (forward.go).
	ap  *autopilot.Autopilot
	fwd *forwarder
	// api is the operator's API, built once: the socket serves it, and the bus serves it under
	// /v1/op to other nodes (a follower forwarding to the leader, a client for its operator).
	apiOnce sync.Once
	api     http.Handler
}

// newServerRole checks that the node can act as a server: it holds the mesh CA key.
func newServerRole(c core) (*serverRole, error) {
	if c.secrets.CA == nil {
		return nil, fmt.Errorf("server node %s has no mesh CA key (%s): it cannot enrol nodes or sign tokens", c.node.Name, pki.Path(c.cfg.DataDir, pki.CAKeyFile))
	}
	s := &serverRole{core: c, rec: record.New()}
	s.views = &viewCache{rec: s.rec}
	s.fleet = newFleet(c.node.Name, c.host.Report, s.rec, c.gossip, c.pulse, c.log)
	s.fwd = &forwarder{self: c.self, rec: s.rec, identity: c.identity, caCert: c.caCert}
	s.page = &page{self: c.self, rec: s.rec, fleet: s.fleet}
	return s, nil
}

func (s *serverRole) open() error {
	raftTLS, err := pki.RaftTLS(s.identity, s.caCert)
	if err != nil {
		return fmt.Errorf("server node %s: %w (%s)", s.node.Name, err, pki.Path(s.cfg.DataDir, pki.NodeCertFile))
	}
	// A removed server's certificate is still the CA's: the record's revocations refuse it.
	verify := raftTLS.VerifyConnection
	raftTLS.VerifyConnection = func(cs tls.ConnectionState) error {
		if err := verify(cs); err != nil {
			return err
		}
		return notRevoked(s.rec, cs.PeerCertificates[0])
	}
	if err := s.rec.Open(s.cfg.DataDir, s.node.RaftSelf(), s.secrets.Seal, raftTLS, s.log.With("part", "raft"), s.cfg.LogOutput); err != nil {
		return err
	}
	s.started()
	return nil
}

// started wires what runs over the record once Raft is open: the commit metric, the autopilot.
func (s *serverRole) started() {
	if s.mx != nil {
		s.rec.OnCommit(func(d time.Duration) { s.mx.commitTime.Observe(d.Seconds()) })
	}
	ar := &apRecord{self: s.node.Name, rec: s.rec, ask: s.ask}
	s.ap = autopilot.New(autopilot.Config{Name: s.node.Name, ID: s.node.ID, Raft: s.rec, Record: ar, Asker: ar, Log: s.log})
	s.records = &recordAPI{self: s.self, rec: s.rec, fleet: s.fleet, why: s.ap.Why,
		secrets: s.secrets, dockerHost: s.cfg.DockerHost, ask: s.ask}
	s.bus = &bus{self: s.self, rec: s.rec, records: s.records, fwd: s.fwd, fleet: s.fleet, views: s.views, secrets: s.secrets,
		identity: s.identity, caCert: s.caCert, refusals: ratelog.New(s.log.With("part", "bus"), 10, time.Minute), op: s.operatorAPI,
		peers: s.peerBus, keyring: s.keyring}
}

// notRevoked refuses a certificate whose key the record revoked (a removed node's).
func notRevoked(rec reader, cert *x509.Certificate) error {
	key, _ := cert.PublicKey.(ed25519.PublicKey)
	pub := pki.PublicKeyString(key)
	var rev *fsm.Revocation
	rec.Read(func(r *fsm.Record, _ uint64) {
		for i := range r.Revoked {
			if r.Revoked[i].PublicKey == pub {
				v := r.Revoked[i]
				rev = &v
			}
		}
	})
	if rev != nil {
		return fmt.Errorf("the certificate of node %s is revoked: the node was removed at %s", rev.Node, rev.At.Format(time.RFC3339))
	}
	return nil
}

func (s *serverRole) close() {
	s.rec.Close(s.log)
}

func (s *serverRole) logStarted() {
	s.log.Info("agent started", "id", s.node.ID, "data_dir", s.cfg.DataDir, "socket", s.cfg.Socket,
		"raft", fmt.Sprintf("%s:%d", s.node.Advertise, s.node.RaftPort))
}

// runLoops composes the node's own declaration from the record and serves the bus.
func (s *serverRole) runLoops(ctx context.Context) {
	s.logStarted()
	go s.watchOwnDeclaration(ctx)
	go s.bus.runBus(ctx)
	go s.followRaftPort(ctx)
	go s.finishFlips(ctx)
	go s.recordHostEvents(ctx)
	go s.ap.Run(ctx)
	go s.followReports(ctx)
}

// gossipView is the record's: it is always current, so refreshView has nothing to do.
func (s *serverRole) gossipView() api.GossipView {
	v := s.views.current()
	v.Node = s.node.Name
	return v
}

func (s *serverRole) refreshView(context.Context) error { return nil }

func (s *serverRole) enrolledKey(node string) string {
	var key string
	s.rec.Read(func(r *fsm.Record, _ uint64) {
		if n := r.Nodes[node]; n != nil {
			key = n.PublicKey
		}
	})
	return key
}

func (s *serverRole) revokedKey(pub string) bool {
	var revoked bool
	s.rec.Read(func(r *fsm.Record, _ uint64) { revoked = r.IsRevoked(pub) })
	return revoked
}

// isServer says whether the record holds node as a server; this node is one, whatever the record
// says yet (it may still be catching up).
func (s *serverRole) isServer(node string) bool {
	if node == s.node.Name {
		return true
	}
	var server bool
	s.rec.Read(func(r *fsm.Record, _ uint64) { server = r.Nodes[node] != nil && r.Nodes[node].Server })
	return server
}

// joinsGossip is true for every node: servers join every node the record holds.
func (s *serverRole) joinsGossip(api.GossipPeer) bool { return true }

// servePeerBus does nothing: a server's bus (runBus) serves the peer routes too, on the port the
// record says.
func (s *serverRole) servePeerBus(context.Context, uint16) {}

// waitGossipRound wakes on a record change (a node enrolled) or after d.
func (s *serverRole) waitGossipRound(ctx context.Context, d time.Duration) {
	var index uint64
	s.rec.Read(func(_ *fsm.Record, i uint64) { index = i })
	wctx, cancel := context.WithTimeout(ctx, d)
	s.rec.Wait(wctx, index)
	cancel()
}

// operatorAPI is the operator's whole API, served once the record has caught up with the log.
// What reads or writes the record is the leader's to answer: on a follower it is forwarded to the
// leader's bus (or, read with ?stale=1, answered from this server's own record). What is about
// this machine (its gossip, its originals, its keyring fan-out, its reach, its Raft) is answered
// here.
func (s *serverRole) operatorAPI() http.Handler {
	s.apiOnce.Do(func() {
		local := http.NewServeMux()
		s.local.localRoutes(local)
		s.local.keyringRoutes(local)
		local.HandleFunc("GET /v1/raft/peers", s.records.raftPeers)
		local.HandleFunc("GET /v1/raft/state", s.records.getRaftState)
		local.Handle("/", s.fwd.leaderAnswers("/v1/op", s.records.routes()))
		s.api = caughtUpOnly(s.rec, local)
	})
	return s.api
}

// watchOwnDeclaration composes the node's declaration each time a command touches it and passes
// it on when it differs from the last one.
func (s *serverRole) watchOwnDeclaration(ctx context.Context) {
	if err := s.rec.WaitCaughtUp(ctx); err != nil {
		return
	}
	var last []byte
	var index uint64
	for ctx.Err() == nil {
		var d *fsm.Declaration
		var err error
		s.rec.Read(func(r *fsm.Record, i uint64) {
			index = i
			if r.Nodes[s.node.Name] != nil {
				d, err = fsm.Compose(r, s.node.Name)
			}
		})
		if err != nil {
			s.log.Error("compose own declaration", "err", err)
		}
		if d != nil {
			b, _ := json.Marshal(d)
			if !bytes.Equal(b, last) {
				last = b
				s.log.Info("declaration", "index", index, "mode", d.Mode, "assigned", d.Assigned, "taken", d.Taken, "resources", len(d.Resources))
				s.privateRange.Store(d.Tunnel.Range)
				select {
				case s.declarations <- d:
				case <-ctx.Done():
					return
				}
			}
		}
		s.rec.WaitDeclared(ctx, s.node.Name, index)
	}
}
