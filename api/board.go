package api

import (
	"strings"
	"time"

	"meshd/fsm"
)

// BoardStep is one step of a node's progress track.
type BoardStep struct {
	// Name is enrolled, adopted, tunnel taken, "prepared MODULE", "taken MODULE" or converged.
	// Done is false for a skipped step.
	Name string `json:"name"`
	Done bool   `json:"done"`
	// Skipped, when set, says why the step does not apply to this node and is not to be done:
	// a node that joined converged was never adopted ("joined converged").
	Skipped string `json:"skipped,omitempty"`
}

// Label is the step as the board writes it: "✓ adopted" done, "· taken webapp" to do,
// "– adopted (joined converged)" not applicable.
func (s BoardStep) Label() string {
	switch {
	case s.Skipped != "":
		return "– " + s.Name + " (" + s.Skipped + ")"
	case s.Done:
		return "✓ " + s.Name
	}
	return "· " + s.Name
}

// Class is the step's state in a word, for the status page's style: done, todo or skipped.
func (s BoardStep) Class() string {
	switch {
	case s.Skipped != "":
		return "skipped"
	case s.Done:
		return "done"
	}
	return "todo"
}

// BoardRow is one node on the board.
type BoardRow struct {
	Node  string      `json:"node"`
	Mode  fsm.Mode    `json:"mode"`
	Steps []BoardStep `json:"steps"`
	// Next is the first step not done, "" when every step is.
	Next string `json:"next,omitempty"`
	// Blocking are what is in the way of the next step, read from the last report.
	Blocking []string `json:"blocking,omitempty"`
	// AdoptedFor is how long the node has been adopted (0 once converged).
	AdoptedFor time.Duration `json:"adopted_for_ns,omitempty"`
	// LastHeard is when its last report was made (zero: none yet).
	LastHeard time.Time `json:"last_heard,omitzero"`
}

// Board is where each node stands in its migration (worked out by package board): a row per
// node and the summary line.
type Board struct {
	Summary string     `json:"summary"`
	Rows    []BoardRow `json:"rows"`
	// The summary's counts.
	Nodes, Converged, Modules, Taken, CarriedNotEnrolled int
}

// Track is a row's steps in one line: "✓ enrolled  ✓ adopted  · taken webapp …".
func (row BoardRow) Track() string {
	var parts []string
	for _, s := range row.Steps {
		parts = append(parts, s.Label())
	}
	return strings.Join(parts, "  ")
}
