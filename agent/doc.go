// Package agent is the daemon's wiring: the node's identity on disk, the operator's API on a
// local unix socket, the host reconciler fed with the node's own declaration, the node's gossip
// member, the bus between agents, and the lifecycle around them (start, graceful stop on
// SIGTERM, restart with nothing lost). What runs once before it (genesis, join, the preflight,
// the node file, the boot unit) is package setup's.
//
// The agent is a core and a role, and the role is rooms. The core (agent.go) is what every node
// runs: its identity and sealed secrets, the host reconciler loop, the operator socket, gossip
// (gossip.go), the keyring (keyring.go), the peer bus other nodes call for keyring operations
// and reach checks (peerbus.go, reach.go). The role (role.go) is what a server and a client do
// differently, chosen once at Start from the node file and made from a core: what the agent
// hands it (the node, its secrets, its host, and the agent's parts as small interfaces), never
// the *Agent itself. clientRole (clientrole.go) holds no record, watches its declaration on a
// server's bus over mTLS, answers its own status (clientstatus.go: the node, the servers it
// follows, where the whole record is read) and refuses the rest of the record's API. serverRole (server.go) holds the record
// service (package agent/record: the FSM and Raft behind typed methods, no HTTP) and the
// handler sets over it, each a type holding only what its handlers use:
//
//   - recordAPI (recordapi.go, handlers.go and the files named by their commands): the
//     operator's API over the record, which the leader answers;
//   - forwarder (forward.go, quorum.go): a follower's hand-off to the leader;
//   - bus (bus.go, busauth.go, enrolproof.go): what agents and operators call, enrolment (whose
//     used token enrols only its own node again, signed by that node's key), each node's
//     declaration watch, the reports clients post, who may ask what;
//   - page (statuspage.go, statuspage_nodes.go): the status page;
//   - fleet (fleet.go): what a server knows of every node besides the record, its reports;
//   - viewCache (gossipview.go): the gossip view every node reads, composed once per change.
//
// A server works on what changed (issue 37): the fleet decodes a report once, when it changes,
// and stamps it with a sequence; the host-events loop, the board and the page's nodes build
// again only what the record or a report's sequence moved; a node holding the current gossip
// view (its index) is answered "unchanged".
//
// A test (rooms_test.go) keeps any receiver under 40 methods and *Agent unembedded. What crosses
// the socket and the bus (requests, views, headers, the JSON over HTTP) is package api's; the
// leader's care of the group is package autopilot's.
//
// Every operator command that changes the record is acknowledged only after Raft committed it and
// the record applied it (invariant 7): the API answers from the apply future's response, never
// before. Reads are served from the local record on a server, from a server's on a client.
package agent
