package agent

// Who may ask what on the bus: an operator request is marked with the node that asked, and what
// hands out the mesh's keys or replaces the record is a server's to ask.

import (
	"fmt"
	"net/http"

	"meshd/api"
	"meshd/fsm"
)

// serveOp serves the operator's API on the bus to node peer's certificate. The request is marked
// with the node that asked: peer itself, or, when a server forwards it, the node that asked that
// server (the mark is the bus's, never the caller's own unless it is a server).
func (s *serverRole) serveOp(w http.ResponseWriter, req *http.Request, peer string) {
	if req.Header.Get(api.HeaderAskedBy) == "" || !s.isServer(peer) {
		req.Header.Set(api.HeaderAskedBy, peer)
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
	by := req.Header.Get(api.HeaderAskedBy)
	if by == "" || s.isServer(by) {
		return true
	}
	api.WriteJSON(w, http.StatusForbidden, api.ErrorBody{Error: fmt.Sprintf("%s is asked on a server, and node %s is a client: run it on a server", what, by)})
	return false
}
