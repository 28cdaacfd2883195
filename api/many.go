package api

import (
	"meshd/fsm"
	"meshd/report"
)

// ModuleManyRequest assigns or takes a module on the nodes it selects (POST
// /v1/modules/{module}/assign or /take): the nodes named, those whose names match a glob, or
// every node; their union.
type ModuleManyRequest struct {
	Nodes []string `json:"nodes,omitempty"`
	// Match are globs on node names (path.Match: `web-*`, `db-[0-9]`).
	Match []string `json:"match,omitempty"`
	All   bool     `json:"all,omitempty"`
	// Preview says what would change on each node and changes nothing.
	Preview bool `json:"preview,omitempty"`
	// AcceptLoss, on a take, accepts what each node's take preview marks LOSS.
	AcceptLoss bool `json:"accept_loss,omitempty"`
}

// The changes a many-node act makes on a node (ModuleManyNode.Change).
const (
	ChangeAssign = "assign"
	// ChangeAssignTake is an assign on a converged node: assigning is taking.
	ChangeAssignTake = "assign and take"
	ChangeTake       = "take"
	// ChangeNone: the node already has the module as asked; the command leaves it out.
	ChangeNone = "unchanged"
	// ChangeRefused: the record refuses it on this node, so on every node.
	ChangeRefused = "refused"
)

// ModuleManyView is what a many-node act touches (its preview) or touched: each selected node
// and what changes there.
type ModuleManyView struct {
	Module string `json:"module"`
	// Action is assign or take.
	Action string `json:"action"`
	// Selector is the selection in the operator's words ("--match web-*").
	Selector string `json:"selector"`
	// Preview: nothing was proposed.
	Preview bool `json:"preview,omitempty"`
	// Index is the raft index of the one command that changed every node (0 when previewed or
	// when no node needed a change).
	Index uint64 `json:"index,omitempty"`
	// Counts are the nodes by Change.
	Counts map[string]int   `json:"counts"`
	Nodes  []ModuleManyNode `json:"nodes"`
}

// ModuleManyNode is one selected node: what the act changes there and why not, if it does not.
type ModuleManyNode struct {
	Node   string   `json:"node"`
	Mode   fsm.Mode `json:"mode"`
	Change string   `json:"change"`
	// Why says why a node is refused or unchanged.
	Why string `json:"why,omitempty"`
	// Take is, on a take's preview, what the take replaces on the node (from its latest report);
	// TakeError why it could not be read.
	Take      *report.TakePreview `json:"take,omitempty"`
	TakeError string              `json:"take_error,omitempty"`
	// Losses are what the node's found containers lose by the take.
	Losses []string `json:"losses,omitempty"`
}

// ModuleNodesView is where a module stands on each node it is assigned to (GET
// /v1/modules/{module}/nodes): in force, pending or failed (report.ModuleOn), counted first.
type ModuleNodesView struct {
	Module string `json:"module"`
	Index  uint64 `json:"index"`
	// Counts are the nodes by state.
	Counts map[string]int `json:"counts"`
	Nodes  []ModuleOnNode `json:"nodes"`
}

// ModuleOnNode is a module on one node it is assigned to.
type ModuleOnNode struct {
	Node  string   `json:"node"`
	Mode  fsm.Mode `json:"mode"`
	Taken bool     `json:"taken"`
	// State is report.InForce, report.Pending or report.Failed; Why what it waits for or what
	// failed.
	State string `json:"state"`
	Why   string `json:"why,omitempty"`
}
