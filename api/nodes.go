package api

import (
	"time"

	"meshd/fsm"
	"meshd/report"
)

// NodeView is `meshd node show`: the record's node and, when known, its host report.
type NodeView struct {
	Node        *fsm.Node `json:"node"`
	ControlNode bool      `json:"control_node,omitempty"`
	Taken       []string  `json:"taken_effective"`
	// Report is the node's last host report; nil (left out) until its host has reconciled once.
	Report *report.Report `json:"report,omitempty"`
}

// DefaultQuarantine is how long a removed node's private-network address is held back from new
// enrolments when the operator does not say (`meshd node remove --quarantine`): long enough that
// whatever still knows the old node by its address (a peer's config, a firewall rule, a cache)
// is gone before another machine answers there.
const DefaultQuarantine = 24 * time.Hour

// NodeRemoveRequest is `meshd node remove`'s body.
type NodeRemoveRequest struct {
	// Quarantine is how long the node's address stays unassigned, as time.ParseDuration reads
	// it; empty means DefaultQuarantine.
	Quarantine string `json:"quarantine,omitempty"`
}

// NodeRemoveView is what `meshd node remove` did.
type NodeRemoveView struct {
	Node    string `json:"node"`
	ID      string `json:"id"`
	Server  bool   `json:"server"`
	Address string `json:"address,omitempty"`
	// QuarantineUntil is when Address may be given to a new enrolment again.
	QuarantineUntil time.Time `json:"quarantine_until"`
	// RevokedKey is the node's identity key: no certificate for it is let in from now on.
	RevokedKey string `json:"revoked_key"`
	Index      uint64 `json:"index"`
	// Voters are the Raft voters left when the node was a server.
	Voters  []string `json:"voters,omitempty"`
	Warning string   `json:"warning,omitempty"`
}

// SettingsRequest is `meshd node set`: values by "module.setting"; an empty value returns the
// setting to its default.
type SettingsRequest struct {
	Values map[string]string `json:"values"`
}

// SettingsView is what `meshd node set` answers: the node as the record now holds it and the
// ports that were checked on the node before the change was committed.
type SettingsView struct {
	Node    *fsm.Node   `json:"node"`
	Checked []PortCheck `json:"checked"`
}

// PortCheck is one port a settings change moves, as it was checked on the node.
type PortCheck struct {
	Setting string `json:"setting"`
	Proto   string `json:"proto"`
	Address string `json:"address"`
	Port    uint16 `json:"port"`
	By      string `json:"by"`
}
