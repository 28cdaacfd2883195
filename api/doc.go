// Package api is meshd's wire contract: every request, view and result that crosses the
// operator's unix socket (the CLI to its agent) or the bus between agents (TLS, each node with its
// certificate from the mesh CA), the headers answers carry, the CLI's socket client (Client) and
// the one way JSON travels over HTTP (Endpoint to call, WriteJSON and ErrorBody to answer).
// The agent serves it; the CLI, the chaos runner and the end-to-end tests read it.
//
// The contract is versioned by its paths: every route is under /v1/, and there is no version
// constant. A change that a CLI or an agent of the version before could not read (a field
// removed, renamed or meaning something else) goes under a new prefix served beside /v1/, not
// into /v1/; a field added is not such a change, since a reader skips the fields it does not know.
//
// The record's types (fsm.Node, fsm.Declaration, catalogue.Module) and the host's report
// (report.Report, which a client posts to a server's bus at POST /v1/report and NodeView carries)
// travel as their own packages define them: a change to them is a change to this contract too.
// Those packages, ctrspec and pki are all it imports of meshd: nothing of the host, the
// firewall, the container engine or the tunnel, so a program that only speaks the API links no
// driver (TestUnitImportsNoDriver holds it).
//
// The files go by topic: status.go (meshd status), board.go (where each node stands, as package
// board works it out), nodes.go (a node, its settings, its removal), modules.go, converge.go,
// tokens.go, enrol.go (the bus's enrolment), tunnel.go, raft.go, gossip.go, keyring.go, reach.go,
// ports.go (a node's port check), snapshot.go, report.go, headers.go, jsonhttp.go and client.go.
package api
