package report

import (
	"fmt"
	"time"

	"meshd/fsm"
)

// Report is what the host saw and did in one pass: what the agent serves for `meshd node show`.
type Report struct {
	Node string    `json:"node"`
	Mode fsm.Mode  `json:"mode"`
	When time.Time `json:"when"`
	// Taken are the modules the pass's declaration had taken (on a converged node every assigned
	// one): what tells a reader following a take that this report is of a pass that knew it.
	Taken []string `json:"taken"`
	// Assigned are the modules the pass's declaration had assigned: a take preview reads a
	// report only once it knows of the module's assignment. Nil in a report from an agent that
	// did not say (an older meshd).
	Assigned []string `json:"assigned"`
	// Held are found files kept as they are until their module is taken, including those whose
	// module has been unassigned since (they stay, never removed).
	Held []HeldFile `json:"held"`
	// Written are the declared files the host wrote (or, create_once, keeps as they are).
	Written []WrittenFile `json:"written"`
	// Errors are the resources that failed this pass, each with why.
	Errors []ResourceError `json:"errors"`
	// Changes counts the files written or removed and records stored this pass; 0 is a pass that
	// wrote nothing.
	Changes int `json:"changes"`
	// Kinds holds the other drivers' parts of the report, by resource kind.
	Kinds map[string]any `json:"kinds,omitempty"`
	// Listeners are the machine's listening sockets this pass (Listeners: a read of
	// /proc/net), what a converge preview marks; nil in a report from an agent that did not
	// read them, ListenersError why a read failed.
	Listeners      []Listener `json:"listeners"`
	ListenersError string     `json:"listeners_error,omitempty"`
}

// ChangedBySomethingElse is a held file's reason when its content is not what was recorded.
const ChangedBySomethingElse = "changed by something else"

// RemovedBySomethingElse is a held file's reason when it is gone.
const RemovedBySomethingElse = "removed by something else"

// HeldFile is a found file kept as it is.
type HeldFile struct {
	Path   string `json:"path"`
	Module string `json:"module"`
	// RecordedHash is the hash of the original recorded when it was found; CurrentHash is the
	// hash now ("" when the file is gone).
	RecordedHash string `json:"recorded_hash"`
	CurrentHash  string `json:"current_hash"`
	Changed      bool   `json:"changed"`
	// Reason says why Changed: ChangedBySomethingElse or RemovedBySomethingElse.
	Reason string    `json:"reason,omitempty"`
	Since  time.Time `json:"since"`
	// Unassigned is true once no assigned module declares the file: it stays where it is.
	Unassigned bool `json:"unassigned,omitempty"`
}

// WrittenFile is a declared file the host converges.
type WrittenFile struct {
	Path   string    `json:"path"`
	Module string    `json:"module"`
	Hash   string    `json:"hash"`
	At     time.Time `json:"at,omitzero"`
	// Kept is true for a create_once file that was there already: it is never rewritten.
	Kept bool `json:"kept,omitempty"`
}

// ResourceError is one resource that failed, and why.
type ResourceError struct {
	Resource string `json:"resource"`
	Module   string `json:"module"`
	Reason   string `json:"reason"`
}

func (e ResourceError) Error() string {
	return fmt.Sprintf("%s (module %s): %s", e.Resource, e.Module, e.Reason)
}
