package api

import (
	"fmt"
	"strings"

	"meshd/fsm"
	"meshd/report"
)

// ConvergeRequest is the body of POST /v1/nodes/{node}/converge.
type ConvergeRequest struct {
	// Plan is the plan token of the preview the operator read; "" converges only when nothing
	// will close.
	Plan string `json:"plan,omitempty"`
	// AcceptLoss is the operator's word that the modules the flip takes may lose what their
	// found containers have (the preview's losses).
	AcceptLoss bool `json:"accept_loss,omitempty"`
}

// FlipView answers a flip or a return: the node as the record holds it (its pending flip in
// Node.Flip) and, for a flip, the preview it was checked against.
type FlipView struct {
	Node    *fsm.Node               `json:"node"`
	Preview *report.ConvergePreview `json:"preview,omitempty"`
}

// StaleRefusal is a flip refused because the node changed since the preview its plan token came
// from, or because something will close and no plan token was given.
type StaleRefusal struct {
	Node    string                  `json:"node"`
	Reason  string                  `json:"reason"`
	Changes []string                `json:"changes,omitempty"`
	Preview *report.ConvergePreview `json:"preview,omitempty"`
}

func (e *StaleRefusal) Error() string {
	s := fmt.Sprintf("converge %s refused: %s", e.Node, e.Reason)
	if len(e.Changes) > 0 {
		s += ":\n  " + strings.Join(e.Changes, "\n  ")
	}
	return s
}

// ConvergeRefused is the answer (409) to a refused converge: the error every error answer has
// and the refusal itself, for a reader that wants its parts.
type ConvergeRefused struct {
	Error   string        `json:"error"`
	Refusal *StaleRefusal `json:"refusal"`
}
