// Package agent is the daemon's wiring: the node's identity on disk, the operator's API on a
// local unix socket, the host reconciler fed with the node's own declaration, the node's gossip
// member, the bus between agents, and the lifecycle around them (start, graceful stop on
// SIGTERM, restart with nothing lost). What runs once before it (genesis, join, the preflight,
// the node file, the boot unit) is package setup's.
//
// The agent is a core and a role. The core (agent.go) is what every node runs: its identity and
// sealed secrets, the host reconciler loop, the operator socket, gossip (gossip.go), the peer bus
// other nodes call for keyring operations and reach checks (peerbus.go, keyring.go, reach.go).
// The role (role.go) is what a server and a client do differently, chosen once at Start from the
// node file: serverRole (server.go, handlers.go, bus.go) runs Raft (package raftnode), holds the
// record, serves the operator's whole API and the bus (enrolment, whose used token enrols only
// its own node again, signed by that node's key (enrolproof.go), each node's declaration watch,
// reports clients post); clientRole (clientrole.go) holds no record, watches its declaration on a
// server's bus over mTLS, forwards the operator's reads to a server and refuses writes. What
// crosses the socket and the bus (requests, views, headers, the JSON over HTTP) is package api's.
// The leader's care of the group is package autopilot's; forwarding to the leader (forward.go),
// the quorum error (quorum.go) and who may ask what on the bus (busauth.go) stay here.
//
// Every operator command that changes the record is acknowledged only after Raft committed it and
// the record applied it (invariant 7): the API answers from the apply future's response, never
// before. Reads are served from the local record on a server, from a server's on a client.
package agent
