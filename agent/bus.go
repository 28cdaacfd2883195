package agent

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"meshd/agent/autopilot"
	"meshd/agent/record"
	"meshd/api"
	"meshd/catalogue"
	"meshd/fsm"
	"meshd/internal/ratelog"
	"meshd/pki"
	"meshd/report"
	"meshd/setup"
)

// The bus is a server's TLS API for the other agents and for operators, on the node's mesh.bus
// setting. Enrolment comes without a client certificate (the token is the credential); a node's
// certificate from the mesh CA reads its own declaration, posts its own report and asks the peer
// routes; the operator's API (/v1/op) takes only a server's certificate or an operator credential
// (busauth.go).

// BusPort is node n's bus port: its mesh.bus setting, else the catalogue's default.
func BusPort(r *fsm.Record, n *fsm.Node) (uint16, error) { return meshPort(r, n, "bus") }

// busAddresses lists every server's bus as advertise:port, the way tokens carry them.
func busAddresses(r *fsm.Record) []string {
	var out []string
	for _, name := range r.NodeNames() {
		n := r.Nodes[name]
		if !n.Server || n.Advertise == "" {
			continue
		}
		if p, err := BusPort(r, n); err == nil {
			out = append(out, net.JoinHostPort(n.Advertise, strconv.Itoa(int(p))))
		}
	}
	return out
}

// bus is a server's bus: the TLS API the other agents and the operators call. It holds the
// node, the record, the handler sets it serves (the record API, forwarding, the fleet's
// reports), the identity it serves with and what bounds anonymous callers; nothing of the agent.
type bus struct {
	self
	rec     *record.Service
	records *recordAPI
	fwd     *forwarder
	fleet   *fleet
	// views is the gossip view each node reads, composed once per change (gossipview.go).
	views *viewCache
	// secrets are the node's (the mesh CA signs enrolled nodes' certificates); identity and
	// caCert what the bus serves and verifies callers with.
	secrets  *pki.NodeSecrets
	identity tls.Certificate
	caCert   *x509.Certificate
	// refusals logs what anyone reaching the bus can cause (refused enrolments, connections
	// over the limit), a few lines a minute.
	refusals *ratelog.Log
	// enrolMu takes enrolments one at a time (enrolproof.go).
	enrolMu sync.Mutex
	// op is the operator's whole API, which /v1/op serves to servers and operators.
	op func() http.Handler
	// peers are the routes every node's bus serves (peerbus.go).
	peers peerRouter
	// keyring is the gossip keyring an enrolled node is handed.
	keyring func() [][]byte
}

// peerRouter is the peer bus every node serves (peerbus.go).
type peerRouter interface {
	peerRoutes(mux *http.ServeMux)
	withPeer(serverOnly bool, h func(http.ResponseWriter, *http.Request, string)) http.HandlerFunc
}

// runBus serves the bus on the node's bus port as the record says it, moving when the setting
// changes, until ctx ends.
func (s *bus) runBus(ctx context.Context) {
	var (
		cur   uint16
		srv   *http.Server
		index uint64
	)
	tlsCfg, err := pki.ServerTLS(s.identity, s.caCert)
	if err != nil {
		s.log.Error("bus not served", "err", err)
		return
	}
	errLog := slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)
	for ctx.Err() == nil {
		var port uint16
		var perr error
		s.rec.Read(func(r *fsm.Record, i uint64) {
			index = i
			if n := r.Nodes[s.node.Name]; n != nil {
				port, perr = BusPort(r, n)
			}
		})
		if perr != nil {
			s.log.Error("bus", "err", perr)
		}
		retry := false
		if port != 0 && port != cur {
			ln, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(int(port))))
			if err != nil {
				s.log.Error("bus port", "port", port, "err", err)
				retry = true
			} else {
				if srv != nil {
					_ = srv.Close()
				}
				srv = &http.Server{Handler: http.MaxBytesHandler(s.busRoutes(), busMaxBody), TLSConfig: tlsCfg, ErrorLog: errLog,
					ReadHeaderTimeout: busReadHeaderTimeout, ReadTimeout: busReadTimeout, WriteTimeout: busWriteTimeout,
					IdleTimeout: busIdleTimeout, MaxHeaderBytes: busMaxHeader}
				limited := newLimitListener(ln, busMaxConns, busMaxConnsPerIP, s.refusals, s.recordAddr)
				limited.knownMax = s.recordConns
				go func(hs *http.Server) {
					if err := hs.Serve(tls.NewListener(limited, tlsCfg)); err != nil && !errors.Is(err, http.ErrServerClosed) {
						s.log.Error("bus stopped", "port", port, "err", err)
					}
				}(srv)
				cur = port
				s.log.Info("bus listening", "port", port)
			}
		}
		wctx, cancel := ctx, context.CancelFunc(func() {})
		if retry || port == 0 {
			wctx, cancel = context.WithTimeout(ctx, time.Second)
		}
		s.rec.Wait(wctx, index)
		cancel()
	}
	if srv != nil {
		_ = srv.Close()
	}
}

func (s *bus) busRoutes() http.Handler {
	mux := http.NewServeMux()
	// Enrolment writes the record: a follower forwards it to the leader, as it came.
	mux.Handle("POST /v1/enrol", s.fwd.leaderAnswers("", http.HandlerFunc(s.enrol)))
	// The operator's API: a follower forwarding to the leader, or an operator credential.
	mux.HandleFunc("/v1/op/", s.serveOp)
	mux.HandleFunc("GET /v1/raft/state", s.peers.withPeer(true, func(w http.ResponseWriter, r *http.Request, _ string) { s.records.getRaftState(w, r) }))
	// What a node asks for itself.
	mux.HandleFunc("GET /v1/declaration/{node}", s.withNode(s.ownDeclaration))
	mux.HandleFunc("POST /v1/report", s.withNode(s.postReport))
	mux.HandleFunc("GET /v1/gossip", s.withNode(s.getGossipView))
	s.peers.peerRoutes(mux)
	return caughtUpOnly(s.rec, mux)
}

// withNode lets a request through only with a client certificate from the mesh CA (the TLS layer
// verified the chain) for a node the record holds with that very key, and passes the node's name.
func (s *bus) withNode(h func(http.ResponseWriter, *http.Request, string)) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		name, pub, ok := certIdentity(w, req, "; a machine gets one by `meshd join`")
		if !ok {
			return
		}
		known := false
		s.rec.Read(func(r *fsm.Record, _ uint64) {
			if n := r.Nodes[name]; n != nil && n.PublicKey == pub {
				known = true
			}
		})
		if err := notRevoked(s.rec, req.TLS.PeerCertificates[0]); err != nil {
			api.WriteJSON(w, http.StatusForbidden, api.ErrorBody{Error: err.Error()})
			return
		}
		if !known {
			api.WriteJSON(w, http.StatusForbidden, api.ErrorBody{Error: fmt.Sprintf("node %s: the record holds no node of that name with this certificate's key", name)})
			return
		}
		h(w, req, name)
	}
}

// certIdentity reads the node name and public key (as the record writes it) of a bus request's
// client certificate, answering the request itself when there is none or it names no node.
func certIdentity(w http.ResponseWriter, req *http.Request, hint string) (name, pub string, ok bool) {
	if req.TLS == nil || len(req.TLS.PeerCertificates) == 0 {
		api.WriteJSON(w, http.StatusUnauthorized, api.ErrorBody{Error: "the bus needs the node's client certificate for " + req.URL.Path + " (mTLS)" + hint})
		return "", "", false
	}
	cert := req.TLS.PeerCertificates[0]
	name, err := pki.NodeName(cert)
	if err != nil {
		api.WriteJSON(w, http.StatusForbidden, api.ErrorBody{Error: err.Error()})
		return "", "", false
	}
	key, _ := cert.PublicKey.(ed25519.PublicKey)
	return name, pki.PublicKeyString(key), true
}

// ownDeclaration is the operator API's blocking declaration query, for the asking node alone.
// The caller is a known node, so its long poll is freed from the bus's read and write timeouts
// (which would end it), within a bound of its own.
func (s *bus) ownDeclaration(w http.ResponseWriter, req *http.Request, peer string) {
	if want := req.PathValue("node"); want != peer {
		api.WriteJSON(w, http.StatusForbidden, api.ErrorBody{Error: fmt.Sprintf("node %s may read only its own declaration, not node %s's", peer, want)})
		return
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Now().Add(10 * time.Minute))
	s.records.getDeclaration(w, req)
}

// postReport keeps a client's host report in memory, for `meshd node show`.
func (s *bus) postReport(w http.ResponseWriter, req *http.Request, peer string) {
	var rep report.Report
	if err := json.NewDecoder(io.LimitReader(req.Body, 16<<20)).Decode(&rep); err != nil {
		api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: "host report from node " + peer + ": " + err.Error()})
		return
	}
	if rep.Node != "" && rep.Node != peer {
		api.WriteJSON(w, http.StatusForbidden, api.ErrorBody{Error: fmt.Sprintf("node %s may report only for itself, not for node %s", peer, rep.Node)})
		return
	}
	rep.Node = peer
	s.fleet.post(peer, rep)
	w.WriteHeader(http.StatusNoContent)
}

// enrol admits a node: the token's signature is checked with the CA, the request's with the key
// it names (the machine holds that key), the record spends the token (single use and expiry are
// the record's), and the node gets its certificate only after Raft committed it. The same
// enrolment again (same token, name and key, signed by that key: its answer was lost) is
// answered as the first was, with the same address and certificate, but never with the CA key;
// another key, or the same key unsigned, is refused as a used token.
//
// Anyone may call it, so what it logs is bounded: refusals go to busRefusals (a few a minute),
// with the caller's node name and the reason cut short.
func (s *bus) enrol(w http.ResponseWriter, req *http.Request) {
	var in api.EnrolRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, req.Body, enrolMaxBody)).Decode(&in); err != nil {
		code := http.StatusBadRequest
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			code = http.StatusRequestEntityTooLarge
		}
		api.WriteJSON(w, code, api.ErrorBody{Error: "enrolment request: " + ratelog.Clip(err.Error(), 200)})
		return
	}
	refuse := func(code int, err error) {
		s.refusals.Warn("enrolment refused", "node", ratelog.Clip(in.Node, 64), "from", req.RemoteAddr, "err", ratelog.Clip(err.Error(), 300))
		api.WriteJSON(w, code, api.ErrorBody{Error: fmt.Sprintf("enrolment of node %s refused: %s", ratelog.Clip(in.Node, 64), ratelog.Clip(err.Error(), 1000))})
	}
	if _, err := pki.VerifyToken(in.Token, s.caCert, time.Now()); err != nil {
		refuse(http.StatusForbidden, err)
		return
	}
	pub, err := pki.ParsePublicKey(in.PublicKey)
	if err != nil {
		refuse(http.StatusBadRequest, err)
		return
	}
	// The proof covers the request as the machine sent it (before the advertise is filled in).
	proof := pki.VerifyEnrolment(setup.EnrolClaim(&in), in.Signature, time.Now())
	// One enrolment at a time: whether this is the same enrolment again is read before it is
	// applied, and must still hold when it is.
	s.enrolMu.Lock()
	defer s.enrolMu.Unlock()
	again, err := s.enrolledBefore(&in, proof)
	if err != nil {
		refuse(http.StatusForbidden, err)
		return
	}
	if in.Advertise == "" {
		in.Advertise, _, _ = net.SplitHostPort(req.RemoteAddr)
		// Forwarded by a follower: the machine's address is the one the follower saw.
		if fwd := req.Header.Get(api.HeaderRemoteAddr); fwd != "" && req.Header.Get(api.HeaderForwardedBy) != "" {
			in.Advertise = fwd
		}
	}
	var cat catalogue.Catalogue
	s.rec.Read(func(r *fsm.Record, _ uint64) { cat = r.Catalogue })
	if _, err := setup.JoinSettings(cat, in.Settings, in.Server); err != nil {
		refuse(http.StatusBadRequest, err)
		return
	}
	// A server's enrolment gets a server's certificate (Raft and the bus accept only those); the
	// record refuses a server enrolment without a server token, and the certificate goes out only
	// once the record took the enrolment.
	role := pki.ClientCert
	if in.Server {
		role = pki.ServerCert
	}
	// The certificate is checked issuable before the token is spent, and issued once the record
	// took the enrolment, at the record's enrolment time: the same enrolment again (its answer
	// was lost) gets the very same certificate.
	if _, err := s.secrets.CA.IssueNode(in.Node, pub, role, time.Now()); err != nil {
		refuse(http.StatusBadRequest, err)
		return
	}
	applied := time.Now()
	v, index, err := s.rec.Propose("", fsm.OpNodeEnrol, fsm.Enrol{Node: in.Node, ID: in.ID, TokenHash: pki.TokenHash(in.Token),
		PublicKey: in.PublicKey, Advertise: in.Advertise, Settings: in.Settings, WireGuardKey: in.WireGuardKey, FoundTunnel: in.FoundTunnel,
		Server: in.Server})
	committedAt(w, index)
	if err != nil {
		var ref *fsm.Refusal
		if errors.As(err, &ref) {
			refuse(http.StatusUnprocessableEntity, errors.New(ref.Reason))
			return
		}
		writeErr(w, err)
		return
	}
	node := v.(*fsm.Node)
	// A node enrolled before this command was the record's answer to the same enrolment again
	// (one a leader before this one took, not yet in this server's record when it was read). The
	// second's margin keeps a clock stepped back under the apply from taking a first for one.
	again = again || node.EnrolledAt.Before(applied.Add(-time.Second))
	cert, err := s.secrets.CA.IssueNode(node.Name, pub, role, node.EnrolledAt)
	if err != nil {
		writeErr(w, fmt.Errorf("node %s is enrolled (index %d), but its certificate: %w; join again with the same token and key", node.Name, index, err))
		return
	}
	out := api.EnrolResponse{Node: node, CertPEM: string(cert), CACertPEM: string(s.secrets.CACertPEM), Keyring: s.keyring(), Again: again}
	s.rec.Read(func(r *fsm.Record, index uint64) {
		out.Servers = busAddresses(r)
		out.Declaration.Index = index
		out.Declaration.Declaration, err = fsm.Compose(r, in.Node)
		if n := r.Nodes[in.Node]; n != nil && n.Server && err == nil {
			out.RaftPort, err = meshPort(r, n, "raft")
			if !again { // the CA key goes out once, in the first answer
				out.CAKey = s.secrets.CA.Key
			}
		}
	})
	if err != nil {
		writeErr(w, err)
		return
	}
	s.log.Info("node enrolled", "enrolled", in.Node, "again", again, "mode", out.Node.Mode, "address", out.Node.Address, "advertise", in.Advertise)
	api.WriteJSON(w, http.StatusOK, out)
}

// createToken signs a single-use token with the CA and records its hash through Raft; the token
// is shown only once the record committed it.
func (s *recordAPI) createToken(w http.ResponseWriter, req *http.Request) {
	var in api.TokenRequest
	if err := json.NewDecoder(io.LimitReader(req.Body, 1<<20)).Decode(&in); err != nil {
		api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: "token request: " + err.Error()})
		return
	}
	// The mode is the operator's to say: a forgotten one must not make a machine converged (its
	// first pass would load a drop-by-default filter), nor silently adopted.
	if in.Mode != fsm.Adopted && in.Mode != fsm.Converged {
		api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: fmt.Sprintf("token mode %q: say the joining node's mode, adopted or converged", in.Mode)})
		return
	}
	ttl, err := time.ParseDuration(in.TTL)
	if err != nil || ttl < time.Second {
		api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: fmt.Sprintf("--ttl %q: give a duration of at least 1s, such as 1h", in.TTL)})
		return
	}
	var bus []string
	var rng string
	s.rec.Read(func(r *fsm.Record, _ uint64) { bus, rng = busAddresses(r), r.Tunnel.Range })
	if len(bus) == 0 {
		writeErr(w, errors.New("the record names no server with a bus address to put in the token"))
		return
	}
	exp := time.Now().Add(ttl).Truncate(time.Second).Add(time.Second)
	p := pki.TokenPayload{ID: pki.NewTokenID(), Mode: string(in.Mode), Exp: exp.Unix(), Bus: bus, Range: rng, Server: in.Server}
	tok, err := pki.SignToken(s.secrets.CA, p)
	if err != nil {
		writeErr(w, err)
		return
	}
	hash := pki.TokenHash(tok)
	_, index, err := s.propose(req, fsm.OpTokenCreate, fsm.TokenCreate{Hash: hash, Mode: in.Mode, Expires: exp.UTC(), Server: in.Server})
	committedAt(w, index)
	if err != nil {
		writeErr(w, err)
		return
	}
	tv := api.TokenView{Token: tok, ID: p.ID, Mode: in.Mode, Expires: exp.UTC(), Bus: bus, CA: pki.Fingerprint(s.secrets.CA.Cert), Hash: hash, Server: in.Server}
	if in.Server {
		var servers int
		s.rec.Read(func(r *fsm.Record, _ uint64) {
			for _, n := range r.Nodes {
				if n.Server {
					servers++
				}
			}
		})
		tv.Warning = autopilot.EvenWarning(servers + 1)
	}
	api.WriteJSON(w, http.StatusOK, tv)
}
