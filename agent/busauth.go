package agent

// Who may ask what on the bus. The operator's API under /v1/op takes two credentials: a
// server's certificate (a server forwarding its own socket's request, or one it took from an
// operator, to the leader) and an operator credential the record lists, unrevoked and unexpired.
// A client node's certificate reads its own declaration and posts its own report; /v1/op refuses
// it, naming where to run the command. Every request through /v1/op is marked with who asked
// (api.HeaderAskedBy), which only a server's certificate may set: the record keeps it as the
// command's By.

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"meshd/api"
	"meshd/fsm"
	"meshd/pki"
)

// serveOp serves the operator's API on the bus to a server or an operator credential, marked
// with who asked; a node's own stop is never asked through the bus.
func (s *bus) serveOp(w http.ResponseWriter, req *http.Request) {
	by, ok := s.opAsker(w, req)
	if !ok {
		return
	}
	req.Header.Set(api.HeaderAskedBy, by)
	if strings.TrimPrefix(req.URL.Path, "/v1/op") == "/v1/leave" {
		api.WriteJSON(w, http.StatusForbidden, api.ErrorBody{Error: fmt.Sprintf("server %s leaves the mesh only when asked on its own operator socket (meshd leave there), never through the bus", s.node.Name)})
		return
	}
	http.StripPrefix("/v1/op", s.op()).ServeHTTP(w, req)
}

// opAsker says who asks a /v1/op request, answering it itself (and returning false) when the
// caller may not: "operator NAME" for an operator credential; for a server's certificate, the
// asker it passed on (a server forwarding), else "server NAME". A client node's certificate is
// refused, naming where to run the command.
func (s *bus) opAsker(w http.ResponseWriter, req *http.Request) (string, bool) {
	if req.TLS == nil || len(req.TLS.PeerCertificates) == 0 {
		api.WriteJSON(w, http.StatusUnauthorized, api.ErrorBody{Error: "the operator's API on the bus (" + req.URL.Path + ") needs a server's certificate or an operator credential (mTLS; meshd operator credential create)"})
		return "", false
	}
	cert := req.TLS.PeerCertificates[0]
	if pki.IsOperator(cert) {
		now := time.Now()
		name, err := pki.VerifyOperator(cert, s.caCert, now)
		if err == nil {
			s.rec.Read(func(r *fsm.Record, _ uint64) { err = r.CheckCredential(name, pki.CredentialID(cert), now) })
		}
		if err != nil {
			api.WriteJSON(w, http.StatusForbidden, api.ErrorBody{Error: err.Error() + ": refused"})
			return "", false
		}
		return "operator " + name, true
	}
	name, pub, ok := certIdentity(w, req, "; a machine gets one by `meshd join`")
	if !ok {
		return "", false
	}
	if err := notRevoked(s.rec, cert); err != nil {
		api.WriteJSON(w, http.StatusForbidden, api.ErrorBody{Error: err.Error()})
		return "", false
	}
	var known, server bool
	var servers []string
	s.rec.Read(func(r *fsm.Record, _ uint64) {
		if n := r.Nodes[name]; n != nil && n.PublicKey == pub {
			known, server = true, n.Server
		}
		servers = serversByName(r)
	})
	switch {
	case !known:
		api.WriteJSON(w, http.StatusForbidden, api.ErrorBody{Error: fmt.Sprintf("node %s: the record holds no node of that name with this certificate's key", name)})
		return "", false
	case !server || pki.RoleOf(cert) != pki.ServerCert:
		api.WriteJSON(w, http.StatusForbidden, api.ErrorBody{Error: ClientRefusal(name, servers)})
		return "", false
	}
	if by := req.Header.Get(api.HeaderAskedBy); by != "" {
		return by, true
	}
	return "server " + name, true
}

// ClientRefusal is what a client node is told when it asks for the operator's API: where to run
// the command instead.
func ClientRefusal(node string, servers []string) string {
	where := "the record's servers"
	if len(servers) > 0 {
		where = strings.Join(servers, ", ")
	}
	return fmt.Sprintf("node %s is a client: its certificate reads its own declaration and posts its own report; run this on a server (%s) or with an operator credential (meshd operator credential create)", node, where)
}

// serversByName lists the record's servers, sorted.
func serversByName(r *fsm.Record) []string {
	var out []string
	for _, n := range r.NodeNames() {
		if r.Nodes[n].Server {
			out = append(out, n)
		}
	}
	return out
}

// withSocketAsker marks each request on node's operator socket with who asked: root, or the
// caller's uid, on node's socket. What the caller sent as the mark is overwritten.
func withSocketAsker(node string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		who := "root"
		if pc, _ := req.Context().Value(peerCredKey{}).(peerCred); pc.cred != nil && pc.cred.Uid != 0 {
			who = fmt.Sprintf("uid %d", pc.cred.Uid)
		}
		req.Header.Set(api.HeaderAskedBy, who+" on "+node+"'s socket")
		next.ServeHTTP(w, req)
	})
}
