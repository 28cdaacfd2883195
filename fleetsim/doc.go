// Package fleetsim owns meshd's fleet simulator: many simulated client nodes against three real
// servers, measured from outside (cmd/meshsim drives it; its benchmarks and smoke test are this
// package's tests).
//
// A simulated node is a client as the servers see it, built from the same packages a client
// agent uses: its own ed25519 identity enrolled with a join token of its own (setup's signed
// enrolment request, without the machine's preflight), the certificate the servers issued and
// the mesh CA for the bus's mutual TLS (api, pki), a memberlist member of its own (package gossip,
// on its own port, behind a transport that counts its bytes), the declaration watch by blocking
// query, the gossip view read again every 5 s, and its host report published after every new
// declaration and every 10 s at rest. Only its machine is simulated: its report is a Shape's
// (research 012's machine or a bare lab machine) with the declaration's files written, so a
// module assigned to it is in force in its next report. What it does not simulate: its own bus
// (servers call it for keyring rotation and reach checks only), its tunnel, and posting the
// report over the bus when gossip reaches no server.
//
// Nomad's node simulator runs Nomad's own client with its allocation runner and drivers
// replaced; meshd's client role lives inside the agent, tied to the host reconciler and the
// machine, so the simulator speaks the client's protocol with the client's own packages and
// replaces the machine alone. That keeps a thousand nodes in one process: no reconciler, no
// operator socket, no drivers.
//
// The servers are real agents with Raft on disk, each a lab machine of its own (bed.go: genesis,
// server tokens, units, as an operator raises them), and the simulated nodes live in one process
// (meshsim clients) on a fourth lab machine, so the servers' CPU and memory are theirs alone and
// a server can be killed under the fleet. The driver speaks to that process over its standard
// input and output (control.go). Every node's gossip counters (gossip.Stats) say what it held,
// sent and received of other nodes' reports: none, for a client.
package fleetsim
