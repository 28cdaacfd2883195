package agent

import (
	"context"
	"log/slog"
	"net/http"

	"meshd/agent/record"
	"meshd/api"
	"meshd/fsm"
	"meshd/pki"
	"meshd/setup"
)

// self is the node a part of the agent serves on: its node file and its log.
type self struct {
	node *setup.NodeFile
	log  *slog.Logger
}

// recordAPI is the operator's API over the record: the handlers that read or write it, which
// the leader answers (a follower forwards them, forward.go). It holds what they need: the
// record, what the server knows of every node, the converge plans it handed out, the mesh CA
// for tokens and credentials, and a way to ask another node's agent; nothing of the agent.
type recordAPI struct {
	self
	rec   *record.Service
	fleet *fleet
	// plans are the converge previews this server handed out, by plan token.
	plans plans
	// why says why the leader leads (the autopilot's answer).
	why func() string
	// secrets are the node's: the mesh CA (tokens, credentials) and its identity key.
	secrets *pki.NodeSecrets
	// dockerHost is the node's Docker engine, for port checks run here.
	dockerHost string
	// ask calls another node's agent over the peer bus.
	ask peerAsker
}

// peerAsker calls another node's agent over the peer bus (peerbus.go).
type peerAsker interface {
	peerJSON(ctx context.Context, p api.GossipPeer, method, path string, in, out any) error
}

// routes are the record API's routes, for the operator's socket and the bus's /v1/op.
func (s *recordAPI) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", s.getStatus)
	mux.HandleFunc("GET /v1/history", s.getHistory)
	mux.HandleFunc("POST /v1/history/keep", s.postHistoryKeep)
	mux.HandleFunc("GET /v1/nodes/{node}", s.getNode)
	mux.HandleFunc("GET /v1/modules", s.listModules)
	mux.HandleFunc("GET /v1/modules/{module}", s.getModule)
	mux.HandleFunc("POST /v1/modules", s.addModule)
	mux.HandleFunc("POST /v1/modules/{module}/confirm", s.confirmModule)
	many := manyActs{s}
	mux.HandleFunc("POST /v1/modules/{module}/assign", many.act("assign"))
	mux.HandleFunc("POST /v1/modules/{module}/take", many.act("take"))
	mux.HandleFunc("GET /v1/modules/{module}/nodes", many.nodes)
	mux.HandleFunc("POST /v1/nodes/{node}/modules/{module}/{action}", s.moduleAction)
	mux.HandleFunc("GET /v1/nodes/{node}/modules/{module}/take-preview", s.takePreview)
	mux.HandleFunc("GET /v1/nodes/{node}/converge-preview", s.convergePreview)
	mux.HandleFunc("POST /v1/nodes/{node}/converge", s.postConverge)
	mux.HandleFunc("POST /v1/nodes/{node}/adopt", s.postAdopt)
	mux.HandleFunc("POST /v1/nodes/{node}/settings", s.postSettings)
	mux.HandleFunc("GET /v1/declaration/{node}", s.getDeclaration)
	mux.HandleFunc("GET /v1/snapshot", s.snapshotSave)
	mux.HandleFunc("POST /v1/snapshot", s.snapshotRestore)
	mux.HandleFunc("POST /v1/tokens", s.createToken)
	mux.HandleFunc("GET /v1/operator/credentials", s.listCredentials)
	mux.HandleFunc("POST /v1/operator/credentials", s.createCredential)
	mux.HandleFunc("POST /v1/operator/credentials/{name}/revoke", s.revokeCredential)
	mux.HandleFunc("GET /v1/tunnel", s.getTunnel)
	mux.HandleFunc("POST /v1/tunnel/take", s.postTunnelTake)
	mux.HandleFunc("POST /v1/raft/peers/{node}/remove", s.removePeer)
	mux.HandleFunc("POST /v1/nodes/{node}/remove", s.removeNode)
	mux.HandleFunc("POST /v1/raft/transfer-leader", s.transferLeader)
	return mux
}

// propose commits a command given by who asked req (api.HeaderAskedBy, set by the socket or the
// bus, never by the caller) and waits until it is applied.
func (s *recordAPI) propose(req *http.Request, op fsm.Op, body any) (any, uint64, error) {
	return s.rec.Propose(req.Header.Get(api.HeaderAskedBy), op, body)
}
