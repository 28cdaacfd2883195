// Package fsm owns the record: the controller's authoritative state, changed only by typed,
// versioned commands applied through Raft, and the declarations composed from it.
//
// Apply is pure. It reads no clock, does no I/O and draws no random numbers: a time or an ID a
// command needs is decided by whoever proposes it and carried in the command, so every server that
// applies the same log holds the same record, byte for byte. Apply validates before it changes
// anything; a refused command leaves the record exactly as it was and says which node and which
// module it was about.
//
// Compose(record, node) is the only place that decides what a node is told: its mode, its
// assigned and taken modules, and every resource of its assigned modules with the node's settings
// filled in. Every declaration says the mode and the taken modules (ADR 0100).
//
// A module is kept to its own places (catalogue.CheckPlaces) from command version 6; one that may
// be root on a machine needs the operator's word, given at catalogue.add or, for a module the
// record took in before version 6 and that the allowlist now finds root-equivalent, by
// module.confirm (privileged.go). Such an unconfirmed module keeps working where it is assigned
// and is listed (Record.Unconfirmed) until the word is given; nothing at upgrade changes the
// record. Compose tells the host which resources are confined (Resource.Confined).
//
// A command costs what it is about, not the fleet (issue 37). What is worked out from the whole
// record (each module's reach, the servers' addresses, the names, the tunnel's peers) is kept in
// the record, never encoded, and brought up to date by Apply for what each command changed
// (derived.go); and each applied command names the nodes whose declarations it may have changed
// (Touched, declared.go), which the FSM keeps by node (FSM.Declared) for the declaration watches.
// Naming a node that did not change costs a compose; missing one would leave a node behind, so a
// command the rules do not know touches every node and drops what is kept.
package fsm
