package agent

// A request that reads or writes the record is answered by the leader: any other server forwards
// it over the bus, so any server answers.

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/raft"

	"meshd/agent/record"
	"meshd/api"
	"meshd/fsm"
	"meshd/pki"
)

// forwardPatience is how long a server looks for a leader to forward to before it answers that
// there is none.
const forwardPatience = 8 * time.Second

// forwarder hands a request for the leader to it over the bus, with this server's certificate.
type forwarder struct {
	self
	rec *record.Service
	// identity and caCert are this server's TLS identity and the mesh CA, for the leader's bus.
	identity tls.Certificate
	caCert   *x509.Certificate
	once     sync.Once
	client   *http.Client
}

// leaderAnswers serves h on this server when it leads; otherwise it forwards the request to the
// leader's bus (under prefix there), or, for a read asked with ?stale=1, answers from this
// follower's own record, saying how far behind it may be.
func (s *forwarder) leaderAnswers(prefix string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if s.rec.IsLeader() {
			w.Header().Set(api.HeaderServedBy, s.node.Name+" (leader)")
			h.ServeHTTP(w, req)
			return
		}
		if req.Method == http.MethodGet && isTrue(req.URL.Query().Get("stale")) {
			st := raftStateOf(s.node, s.rec)
			w.Header().Set(api.HeaderServedBy, fmt.Sprintf("%s (%s, its own record)", s.node.Name, strings.ToLower(st.State)))
			w.Header().Set(api.HeaderStale, staleText(st))
			h.ServeHTTP(w, req)
			return
		}
		if by := req.Header.Get(api.HeaderForwardedBy); by != "" {
			// Forwarded once already, to a server that no longer leads: the forwarder looks again.
			nl := s.rec.NotLeader(raft.ErrNotLeader)
			writeErr(w, nl)
			return
		}
		if s.forward(w, req, prefix) {
			// This server became the leader while it looked for one: it answers.
			w.Header().Set(api.HeaderServedBy, s.node.Name+" (leader)")
			h.ServeHTTP(w, req)
		}
	})
}

func isTrue(v string) bool { return v == "1" || v == "true" || v == "yes" }

// forwardClient calls the leader's bus with this server's certificate and no overall timeout (a
// blocking query may wait long; the request's context ends it).
func (s *forwarder) forwardClient() *http.Client {
	s.once.Do(func() {
		// the leader is a server: only a server certificate of the mesh CA answers for it
		s.client = &http.Client{Transport: &http.Transport{TLSClientConfig: pki.ClientTLS(&s.identity, s.caCert), IdleConnTimeout: time.Minute}}
	})
	return s.client
}

// leaderBus is the leader's name and bus address, as this server knows them.
func (s *forwarder) leaderBus() (name, addr string, err error) {
	id := s.rec.Leader().ID
	if id == "" {
		return "", "", errors.New("no raft leader right now")
	}
	s.rec.Read(func(r *fsm.Record, _ uint64) {
		for _, n := range r.Nodes {
			if n.ID == string(id) {
				name = n.Name
				if p, e := BusPort(r, n); e == nil && n.Advertise != "" {
					addr = net.JoinHostPort(n.Advertise, strconv.Itoa(int(p)))
				}
			}
		}
	})
	if addr == "" {
		return "", "", fmt.Errorf("the leader (raft id %s) has no bus address in this server's record yet", id)
	}
	return name, addr, nil
}

// forward sends the request to the leader's bus and copies its answer back. It sends again only
// when nothing was proposed (the leader could not be reached, or answered that it no longer
// leads before proposing), so a command is never applied twice; when no leader is found within
// forwardPatience it answers with what the quorum lacks. It returns true, having answered
// nothing, when this server itself became the leader meanwhile (req's body is restored for it).
func (s *forwarder) forward(w http.ResponseWriter, req *http.Request, prefix string) (lead bool) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 256<<20))
	if err != nil {
		api.WriteJSON(w, http.StatusBadRequest, api.ErrorBody{Error: "request body: " + err.Error()})
		return false
	}
	deadline := time.Now().Add(forwardPatience)
	var last error
	for {
		if s.rec.IsLeader() {
			req.Body = io.NopCloser(bytes.NewReader(body))
			return true
		}
		name, addr, err := s.leaderBus()
		if err == nil {
			resp, err := s.sendToLeader(req, addr, prefix, body)
			if err == nil {
				if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get(api.HeaderNotProposed) != "" && time.Now().Before(deadline) {
					// The leader stepped down before proposing: look for the next one.
					resp.Body.Close()
					sleepCtx(req.Context(), 100*time.Millisecond)
					continue
				}
				copyAnswer(w, resp)
				return false
			}
			if !nothingSent(err) {
				api.WriteJSON(w, http.StatusBadGateway, api.ErrorBody{Error: fmt.Sprintf("forwarded to leader %s (bus %s), which did not answer: %v; a write's outcome is unknown: check with `meshd status` before sending it again", name, addr, err)})
				return false
			}
			last = fmt.Errorf("leader %s (bus %s): %w", name, addr, err)
		} else {
			last = err
		}
		if time.Now().After(deadline) || req.Context().Err() != nil {
			writeErr(w, s.quorumError(last))
			return false
		}
		sleepCtx(req.Context(), 100*time.Millisecond)
	}
}

func (s *forwarder) sendToLeader(req *http.Request, addr, prefix string, body []byte) (*http.Response, error) {
	fwd, err := http.NewRequestWithContext(req.Context(), req.Method, "https://"+addr+prefix+req.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if ct := req.Header.Get("Content-Type"); ct != "" {
		fwd.Header.Set("Content-Type", ct)
	}
	fwd.Header.Set(api.HeaderForwardedBy, s.node.Name)
	if by := req.Header.Get(api.HeaderAskedBy); by != "" {
		fwd.Header.Set(api.HeaderAskedBy, by)
	}
	if host, _, err := net.SplitHostPort(req.RemoteAddr); err == nil {
		fwd.Header.Set(api.HeaderRemoteAddr, host)
	}
	return s.forwardClient().Do(fwd)
}

// nothingSent says whether a request failed before it reached the other side: a refused or failed
// dial, or a TLS handshake that did not complete.
func nothingSent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED) || strings.Contains(err.Error(), "tls: ")
}

// copyAnswer copies an answer (its JSON type, meshd's headers, status and body) to w.
func copyAnswer(w http.ResponseWriter, resp *http.Response) {
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		if k == "Content-Type" || strings.HasPrefix(k, "X-Meshd-") {
			for _, v := range vs {
				w.Header().Add(k, v)
			}
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// committedAt marks an answer with the index its command was committed and applied at.
func committedAt(w http.ResponseWriter, index uint64) {
	if index > 0 {
		w.Header().Set(api.HeaderIndex, strconv.FormatUint(index, 10))
	}
}
