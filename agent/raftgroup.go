package agent

// The Raft group: any server answers (a request that reads or writes the record is answered by the
// leader, forwarded over the bus), servers join as non-voters and vote once their log is current
// (autopilot's rule), and the control-node takes leadership back once it is healthy and caught up.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/raft"

	"meshd/fsm"
	"meshd/pki"
)

// The headers the record's answers carry.
const (
	// hdrIndex is the record's index an answer was made at; on a write, the index of the command
	// committed and applied.
	hdrIndex = "X-Meshd-Index"
	// hdrServedBy names the server that answered, and whether it leads.
	hdrServedBy = "X-Meshd-Served-By"
	// hdrStale says how far behind a follower's own record (asked with ?stale=1) may be.
	hdrStale = "X-Meshd-Stale"
	// hdrNotProposed marks a not-leader answer given before anything was proposed: the forwarder
	// may send it again to the new leader without a command being applied twice.
	hdrNotProposed = "X-Meshd-Not-Proposed"
	// hdrForwardedBy names the server that forwarded a request to the leader; such a request is
	// not forwarded again.
	hdrForwardedBy = "X-Meshd-Forwarded-By"
	// hdrRemoteAddr is the address an enrolment came from, as the forwarding server saw it.
	hdrRemoteAddr = "X-Meshd-Remote-Addr"
	// hdrAskedBy names the node whose certificate an operator request came in with on a bus
	// (/v1/op): set by the bus itself, kept only when a server forwards it.
	hdrAskedBy = "X-Meshd-Asked-By"
)

// The autopilot's rule: a server is current when its record is within trailingEntries of the
// leader's commit index, and it must stay current for stabilization before it gets a vote or the
// leadership.
const (
	trailingEntries = 16
	stabilization   = 2 * time.Second
	// forwardPatience is how long a server looks for a leader to forward to before it answers
	// that there is none.
	forwardPatience = 8 * time.Second
)

// evenWarning says why an even count of servers is worth no more than one server fewer; "" for an
// odd count.
func evenWarning(servers int) string {
	if servers < 2 || servers%2 == 1 {
		return ""
	}
	return fmt.Sprintf("%d servers is an even count: a quorum needs %d, so it survives no more losses than %d servers would; run 3 or 5",
		servers, servers/2+1, servers-1)
}

// RaftStateView is one server's Raft as it sees it: `meshd operator raft list-peers` and the
// autopilot ask it of each server.
type RaftStateView struct {
	Node  string `json:"node"`
	ID    string `json:"id"`
	State string `json:"state"`
	Term  uint64 `json:"term"`
	// LastIndex is the last entry in its log; CommitIndex the last it knows committed; Applied
	// the last its record applied.
	LastIndex   uint64 `json:"last_index"`
	CommitIndex uint64 `json:"commit_index"`
	Applied     uint64 `json:"applied"`
	// LastContact is how long ago it last heard from the leader ("" on the leader).
	LastContact string `json:"last_contact,omitempty"`
	Leader      string `json:"leader,omitempty"`
}

func (s *serverRole) raftState() RaftStateView {
	r := s.raft
	st := RaftStateView{Node: s.node.Name, ID: s.node.ID, State: r.State().String(), LastIndex: r.LastIndex(),
		CommitIndex: r.CommitIndex(), Applied: s.raft.Applied(), Leader: s.leader().Node}
	st.Term = r.Term()
	if !r.IsLeader() {
		if lc := r.LastContact(); !lc.IsZero() {
			st.LastContact = time.Since(lc).Round(time.Millisecond).String()
		} else {
			st.LastContact = "never"
		}
	}
	return st
}

func (s *serverRole) getRaftState(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.raftState())
}

// groupServer is a server as the record names it, with its Raft and bus addresses.
type groupServer struct {
	name, id, raftAddr string
	peer               GossipPeer
}

// recordServers lists the record's servers and names the control-node.
func (s *serverRole) recordServers() (servers []groupServer, removed map[string]bool, control string) {
	removed = map[string]bool{}
	s.fsm.Read(func(r *fsm.Record, _ uint64) {
		if r.Genesis != nil {
			control = r.Genesis.ControlNode
		}
		view := gossipViewOf(r, s.node.Name)
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
			p, _ := view.peer(name)
			servers = append(servers, groupServer{name: name, id: n.ID, raftAddr: net.JoinHostPort(n.Advertise, strconv.Itoa(int(port))), peer: p})
		}
	})
	return servers, removed, control
}

// autopilot is the leader's care of the group, one pass each tick while this server leads.
type autopilot struct {
	// current is since when each server has been current (zero: it is not).
	current map[raft.ServerID]time.Time
	// voters is the voter count last warned about.
	voters int
	mu     sync.Mutex
	why    string
}

// runAutopilot runs the leader's passes until ctx ends.
func (s *serverRole) runAutopilot(ctx context.Context) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !s.raft.IsLeader() {
			s.ap.current = map[raft.ServerID]time.Time{}
			continue
		}
		s.autopilotPass(ctx)
	}
}

// autopilotPass adds the record's servers Raft does not have yet as non-voters, promotes those
// current for stabilization, takes out servers the record removed, and hands leadership back to
// the control-node once it is current.
func (s *serverRole) autopilotPass(ctx context.Context) {
	cfg, err := s.raft.Configuration()
	if err != nil {
		return
	}
	in := map[raft.ServerID]raft.Server{}
	voters := 0
	for _, sv := range cfg {
		in[sv.ID] = sv
		if sv.Suffrage == raft.Voter {
			voters++
		}
	}
	servers, removed, control := s.recordServers()
	commit := s.raft.CommitIndex()
	for _, g := range servers {
		id := raft.ServerID(g.id)
		sv, ok := in[id]
		switch {
		case !ok:
			s.log.Info("raft: adding a server as a non-voter; it votes once its log is current", "server", g.name, "raft", g.raftAddr)
			if err := s.raft.AddNonvoter(g.id, g.raftAddr, 5*time.Second); err != nil {
				s.log.Warn("raft: add non-voter", "server", g.name, "err", err)
			}
		case sv.Suffrage == raft.Nonvoter:
			if s.isCurrent(ctx, g, commit) {
				s.log.Info("raft: promoting a current server to voter", "server", g.name)
				if err := s.raft.AddVoter(g.id, string(sv.Address), 5*time.Second); err != nil {
					s.log.Warn("raft: promote", "server", g.name, "err", err)
				}
			}
		}
	}
	for id := range in {
		if removed[string(id)] && id != raft.ServerID(s.node.ID) {
			s.log.Info("raft: the record removed a server; taking it out of the group", "id", id)
			if err := s.raft.RemoveServer(string(id), 5*time.Second); err != nil {
				s.log.Warn("raft: remove server", "id", id, "err", err)
			}
		}
	}
	s.ap.mu.Lock()
	if voters != s.ap.voters {
		s.ap.voters = voters
		if w := evenWarning(voters); w != "" {
			s.log.Warn("raft: " + w)
		}
	}
	s.ap.mu.Unlock()
	s.leadBack(ctx, control, servers, in, commit)
}

// isCurrent asks server g for its Raft state and says whether it has been current (within
// trailingEntries of commit) for stabilization.
func (s *serverRole) isCurrent(ctx context.Context, g groupServer, commit uint64) bool {
	id := raft.ServerID(g.id)
	if g.peer.Bus == 0 {
		delete(s.ap.current, id)
		return false
	}
	var st RaftStateView
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	err := s.peerJSON(qctx, g.peer, http.MethodGet, "/v1/raft/state", nil, &st)
	cancel()
	if err != nil || st.Applied+trailingEntries < commit {
		delete(s.ap.current, id)
		return false
	}
	since, ok := s.ap.current[id]
	if !ok {
		s.ap.current[id] = time.Now()
		return false
	}
	return time.Since(since) >= stabilization
}

// leadBack hands leadership to the control-node once it is a voter and current, and keeps the
// reason the leader leads for `status`.
func (s *serverRole) leadBack(ctx context.Context, control string, servers []groupServer, in map[raft.ServerID]raft.Server, commit uint64) {
	why := ""
	defer func() {
		s.ap.mu.Lock()
		s.ap.why = why
		s.ap.mu.Unlock()
	}()
	if control == s.node.Name {
		why = "the control-node leads"
		return
	}
	var g *groupServer
	for i := range servers {
		if servers[i].name == control {
			g = &servers[i]
		}
	}
	switch {
	case g == nil:
		why = fmt.Sprintf("the record names no control-node server (%q); %s leads", control, s.node.Name)
		return
	case in[raft.ServerID(g.id)].Suffrage != raft.Voter:
		why = fmt.Sprintf("control-node %s is not a voter (yet); %s leads until it is and its log is current", control, s.node.Name)
		return
	}
	if !s.isCurrent(ctx, *g, commit) {
		why = fmt.Sprintf("control-node %s is down or catching up; %s leads until it has been current for %s", control, s.node.Name, stabilization)
		return
	}
	why = fmt.Sprintf("handing leadership back to control-node %s (it is current)", control)
	s.log.Info("raft: transferring leadership back to the control-node", "to", control)
	if err := s.raft.TransferLeadership(g.id, g.raftAddr); err != nil {
		s.log.Warn("raft: leadership transfer", "to", control, "err", err)
	}
}

// leadWhy is why this server leads, as its last autopilot pass saw it; before its first pass
// (right after an election or a start), what the record alone says.
func (s *serverRole) leadWhy() string {
	s.ap.mu.Lock()
	why := s.ap.why
	s.ap.mu.Unlock()
	if why != "" {
		return why
	}
	control := ""
	s.fsm.Read(func(r *fsm.Record, _ uint64) {
		if r.Genesis != nil {
			control = r.Genesis.ControlNode
		}
	})
	if control == s.node.Name {
		return "the control-node leads"
	}
	return fmt.Sprintf("%s was elected; why it leads is said after its first autopilot pass", s.node.Name)
}

// leaderAnswers serves h on this server when it leads; otherwise it forwards the request to the
// leader's bus (under prefix there), or, for a read asked with ?stale=1, answers from this
// follower's own record, saying how far behind it may be.
func (s *serverRole) leaderAnswers(prefix string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if s.raft.IsLeader() {
			w.Header().Set(hdrServedBy, s.node.Name+" (leader)")
			h.ServeHTTP(w, req)
			return
		}
		if req.Method == http.MethodGet && isTrue(req.URL.Query().Get("stale")) {
			st := s.raftState()
			w.Header().Set(hdrServedBy, fmt.Sprintf("%s (%s, its own record)", s.node.Name, strings.ToLower(st.State)))
			w.Header().Set(hdrStale, staleText(st))
			h.ServeHTTP(w, req)
			return
		}
		if by := req.Header.Get(hdrForwardedBy); by != "" {
			// Forwarded once already, to a server that no longer leads: the forwarder looks again.
			nl := s.raft.NotLeader(raft.ErrNotLeader)
			writeErr(w, nl)
			return
		}
		if s.forward(w, req, prefix) {
			// This server became the leader while it looked for one: it answers.
			w.Header().Set(hdrServedBy, s.node.Name+" (leader)")
			h.ServeHTTP(w, req)
		}
	})
}

func isTrue(v string) bool { return v == "1" || v == "true" || v == "yes" }

// staleText says how far a follower's record may be behind.
func staleText(st RaftStateView) string {
	behind := uint64(0)
	if st.CommitIndex > st.Applied {
		behind = st.CommitIndex - st.Applied
	}
	return fmt.Sprintf("record at index %d, %d entries behind the commit index %d it last heard of; last contact with the leader %s ago",
		st.Applied, behind, st.CommitIndex, st.LastContact)
}

// forwardClient calls the leader's bus with this server's certificate and no overall timeout (a
// blocking query may wait long; the request's context ends it).
func (s *serverRole) forwardClient() *http.Client {
	s.fwdOnce.Do(func() {
		// the leader is a server: only a server certificate of the mesh CA answers for it
		s.fwd = &http.Client{Transport: &http.Transport{TLSClientConfig: pki.ClientTLS(&s.identity, s.caCert), IdleConnTimeout: time.Minute}}
	})
	return s.fwd
}

// leaderBus is the leader's name and bus address, as this server knows them.
func (s *serverRole) leaderBus() (name, addr string, err error) {
	_, id := s.raft.Leader()
	if id == "" {
		return "", "", errors.New("no raft leader right now")
	}
	s.fsm.Read(func(r *fsm.Record, _ uint64) {
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
func (s *serverRole) forward(w http.ResponseWriter, req *http.Request, prefix string) (lead bool) {
	body, err := io.ReadAll(io.LimitReader(req.Body, 256<<20))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{Error: "request body: " + err.Error()})
		return false
	}
	deadline := time.Now().Add(forwardPatience)
	var last error
	for {
		if s.raft.IsLeader() {
			req.Body = io.NopCloser(bytes.NewReader(body))
			return true
		}
		name, addr, err := s.leaderBus()
		if err == nil {
			resp, err := s.sendToLeader(req, addr, prefix, body)
			if err == nil {
				if resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get(hdrNotProposed) != "" && time.Now().Before(deadline) {
					// The leader stepped down before proposing: look for the next one.
					resp.Body.Close()
					sleepCtx(req.Context(), 100*time.Millisecond)
					continue
				}
				copyAnswer(w, resp)
				return false
			}
			if !nothingSent(err) {
				writeJSON(w, http.StatusBadGateway, apiError{Error: fmt.Sprintf("forwarded to leader %s (bus %s), which did not answer: %v; a write's outcome is unknown: check with `meshd status` before sending it again", name, addr, err)})
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

func (s *serverRole) sendToLeader(req *http.Request, addr, prefix string, body []byte) (*http.Response, error) {
	fwd, err := http.NewRequestWithContext(req.Context(), req.Method, "https://"+addr+prefix+req.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if ct := req.Header.Get("Content-Type"); ct != "" {
		fwd.Header.Set("Content-Type", ct)
	}
	fwd.Header.Set(hdrForwardedBy, s.node.Name)
	if by := req.Header.Get(hdrAskedBy); by != "" {
		fwd.Header.Set(hdrAskedBy, by)
	}
	if host, _, err := net.SplitHostPort(req.RemoteAddr); err == nil {
		fwd.Header.Set(hdrRemoteAddr, host)
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

// NoQuorumError is a request no leader could answer: it names the voters this server cannot reach.
type NoQuorumError struct {
	Server  string
	Voters  []string
	Missing []string
	Cause   error
}

func (e *NoQuorumError) Error() string {
	need := len(e.Voters)/2 + 1
	reach := len(e.Voters) - len(e.Missing)
	msg := fmt.Sprintf("no raft leader: the record needs a quorum of %d of its %d voters (%s), and server %s reaches %d",
		need, len(e.Voters), strings.Join(e.Voters, ", "), e.Server, reach)
	if len(e.Missing) > 0 {
		msg += fmt.Sprintf("; missing: %s", strings.Join(e.Missing, ", "))
	}
	if reach < need {
		msg += ". Bring them back; if they are lost for good, stop the agent on each surviving server and run `meshd operator raft recover` there (docs/runbook.md)"
	} else {
		msg += "; an election may be under way: try again in a moment"
	}
	if e.Cause != nil {
		msg += fmt.Sprintf(" (%v)", e.Cause)
	}
	return msg
}

// quorumError names the voters of the configuration this server holds and which of them it
// cannot reach on their Raft port.
func (s *serverRole) quorumError(cause error) error {
	e := &NoQuorumError{Server: s.node.Name, Cause: cause}
	cfg, err := s.raft.Configuration()
	if err != nil {
		return e
	}
	names := map[string]string{}
	s.fsm.Read(func(r *fsm.Record, _ uint64) {
		for _, n := range r.Nodes {
			names[n.ID] = n.Name
		}
	})
	for _, sv := range cfg {
		if sv.Suffrage != raft.Voter {
			continue
		}
		name := names[string(sv.ID)]
		if name == "" {
			name = string(sv.ID)
		}
		e.Voters = append(e.Voters, name)
		if string(sv.ID) == s.node.ID {
			continue
		}
		c, err := net.DialTimeout("tcp", string(sv.Address), 500*time.Millisecond)
		if err != nil {
			e.Missing = append(e.Missing, fmt.Sprintf("%s (raft %s: %v)", name, sv.Address, errors.Unwrap(err)))
			continue
		}
		c.Close()
	}
	sort.Strings(e.Voters)
	return e
}

// committedAt marks an answer with the index its command was committed and applied at.
func committedAt(w http.ResponseWriter, index uint64) {
	if index > 0 {
		w.Header().Set(hdrIndex, strconv.FormatUint(index, 10))
	}
}

// serveOp serves the operator's API on the bus to node peer's certificate. The request is marked
// with the node that asked: peer itself, or, when a server forwards it, the node that asked that
// server (the mark is the bus's, never the caller's own unless it is a server).
func (s *serverRole) serveOp(w http.ResponseWriter, req *http.Request, peer string) {
	if req.Header.Get(hdrAskedBy) == "" || !s.isServer(peer) {
		req.Header.Set(hdrAskedBy, peer)
	}
	http.StripPrefix("/v1/op", s.operatorAPI()).ServeHTTP(w, req)
}

func (s *serverRole) isServer(node string) bool {
	server := false
	s.fsm.Read(func(r *fsm.Record, _ uint64) {
		if n := r.Nodes[node]; n != nil {
			server = n.Server
		}
	})
	return server
}

// serversOnly refuses a request a client node's certificate asked for: what hands out the mesh's
// keys (a server token brings the CA key) or replaces the whole record is a server's to ask. The
// operator's socket on a server, and a server forwarding its own socket's request, pass.
func (s *serverRole) serversOnly(w http.ResponseWriter, req *http.Request, what string) bool {
	by := req.Header.Get(hdrAskedBy)
	if by == "" || s.isServer(by) {
		return true
	}
	writeJSON(w, http.StatusForbidden, apiError{Error: fmt.Sprintf("%s is asked on a server, and node %s is a client: run it on a server", what, by)})
	return false
}
