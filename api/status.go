package api

import (
	"time"

	"meshd/fsm"
)

// StatusView is `meshd status`.
type StatusView struct {
	Leader LeaderView    `json:"leader"`
	Index  uint64        `json:"index"`
	Nodes  []NodeSummary `json:"nodes"`
	// Gossip is the answering server's gossip: whether it runs, and the reports it rejected.
	Gossip GossipSummary `json:"gossip"`
	// Tunnel is the private network as `meshd tunnel show` says it: each peer carried or enrolled,
	// and when the hub last heard it. Nil before genesis.
	Tunnel *TunnelView `json:"tunnel,omitempty"`
	// ServedBy is the server that answered; Stale, set when a follower answered from its own
	// record (--stale), says how far behind it may be.
	ServedBy string `json:"served_by"`
	Stale    string `json:"stale,omitempty"`
	// Voters are the Raft group's voters; Warning is said when they are an even count.
	Voters  []string `json:"voters"`
	Warning string   `json:"warning,omitempty"`
	// Board is where each node stands in its migration and what is in the way (board.go), with
	// the summary line.
	Board *Board `json:"board,omitempty"`
	// Privileged are the modules that are root on a machine (ModulePrivilege), the unconfirmed
	// ones first: `meshd status` names each unconfirmed one until an operator confirms it.
	Privileged []ModulePrivilege `json:"privileged,omitempty"`
	// Counts are the nodes and modules counted (CountNodes): what the status says first.
	Counts *StatusCounts `json:"counts,omitempty"`
	// Client is set when a client's own socket answered: it holds no record, so the fields above
	// are empty and Client says what the node itself knows.
	Client *ClientStatus `json:"client,omitempty"`
}

// ClientStatus is `meshd status` on a client's socket: the node, its declaration as a server last
// gave it, the servers it follows, its gossip view, and where the whole record is read.
type ClientStatus struct {
	Node string `json:"node"`
	// Mode, Assigned, Taken and Address are the node's declaration at record index Index, as a
	// server last gave it; Mode is "" before the first.
	Mode     fsm.Mode `json:"mode,omitempty"`
	Index    uint64   `json:"index"`
	Assigned []string `json:"assigned"`
	Taken    []string `json:"taken"`
	Address  string   `json:"address,omitempty"`
	// Servers are the servers' bus addresses the node follows; Answered is the one that answered
	// last, at AnsweredAt ("" before any did).
	Servers    []string  `json:"servers"`
	Answered   string    `json:"answered,omitempty"`
	AnsweredAt time.Time `json:"answered_at,omitzero"`
	// Members is the node's gossip view.
	Members []MemberView `json:"members"`
	// Record says where the whole record is read: on a server (named), or with an operator
	// credential.
	Record string `json:"record"`
}

// GossipSummary is the answering server's gossip at a glance.
type GossipSummary struct {
	Node     string            `json:"node"`
	Running  bool              `json:"running"`
	Rejected map[string]uint64 `json:"rejected"`
}

// LeaderView names the Raft leader.
type LeaderView struct {
	Node    string `json:"node,omitempty"`
	ID      string `json:"id,omitempty"`
	Address string `json:"address,omitempty"`
	// Why says why this server leads: the control-node leads, or why it does not right now.
	Why string `json:"why,omitempty"`
}

// NodeSummary is one node's line in the status.
type NodeSummary struct {
	Name        string    `json:"name"`
	Mode        fsm.Mode  `json:"mode"`
	ModeSince   time.Time `json:"mode_since"`
	ControlNode bool      `json:"control_node,omitempty"`
	Server      bool      `json:"server,omitempty"`
	Address     string    `json:"address,omitempty"`
	Assigned    int       `json:"assigned"`
	Taken       int       `json:"taken"`
	// Liveness is the node's state in the answering server's gossip view: alive, failed, left,
	// or unknown (never seen). Since when is in `meshd members` (the status stays the same while
	// nothing changes, also across a restart of the answering agent).
	Liveness string `json:"liveness"`
	// HeldFiles and HeldContainers count what the node's last report holds as found.
	HeldFiles      int `json:"held_files"`
	HeldContainers int `json:"held_containers"`
	// ReportFrom says how the node's last report came: local (the answering node's own), gossip
	// (signed and verified), bus (posted over mTLS while the node's gossip could not reach a
	// server), or "" (none yet). When it was made is in `meshd node show` (the status stays the
	// same while nothing changes).
	ReportFrom string `json:"report_from,omitempty"`
	// Tunnel is the node's tunnel state from its last report (report.TunnelMeshUp, TunnelFoundUp,
	// TunnelDark), "" when it raises none.
	Tunnel string `json:"tunnel,omitempty"`
	// FirewallActiveAgain is the kind of the found firewall meshd retired at the flip when the
	// node's last report reads it active again (enabled by hand: it filters beside meshd's
	// filter), "" otherwise.
	FirewallActiveAgain string `json:"firewall_active_again,omitempty"`
	// Modules are the modules assigned to the node, each with where it stands there
	// (ModuleInForce, ModulePending, ModuleFailed: report.ModuleOn).
	Modules map[string]string `json:"modules,omitempty"`
}
