package fsm

import (
	"sort"
	"time"
)

// The flip (ADR 0100): converging a node, or returning it to adopted, is one act recorded as an
// intent first. OpFlip records the intent (the node's declaration then asks for the mode it
// flips to, with every module taken), the node's host carries it out, and OpFlipDone, proposed
// once the node reports it done, records the node in its new mode. A host that dies halfway
// finds the intent still in its declaration after a restart and finishes the act.

// Flip ops.
const (
	OpFlip     Op = "node.flip"
	OpFlipDone Op = "node.flip.done"
)

// Flip asks to move Node to To (converged: the flip; adopted: the return). Plan is the plan
// token the operator read, kept with the intent for the record's reader.
type Flip struct {
	Node string `json:"node"`
	To   Mode   `json:"to"`
	Plan string `json:"plan,omitempty"`
	// AcceptLoss, on a converge, are the losses the operator accepted (`meshd converge
	// --accept-loss`), as ModuleOnNode.AcceptLoss: kept in the history with who accepted them.
	AcceptLoss []string `json:"accept_loss,omitempty"`
	// Takes, on a converge, are the modules it takes (assigned, not yet taken), as the proposer's
	// preview named them: each is a "taken" event in the history, as a module take's is. A flip
	// without it (one proposed before it was named) appends only its own event, so a replayed
	// log holds the history it held, at the same command version.
	Takes []string `json:"takes,omitempty"`
}

// FlipDone records that Node carried out the intent made at Since: it is now To.
type FlipDone struct {
	Node  string    `json:"node"`
	To    Mode      `json:"to"`
	Since time.Time `json:"since"`
}

// FlipIntent is a flip recorded and not yet carried out. Since (the intent's command time)
// names it.
type FlipIntent struct {
	To    Mode      `json:"to"`
	Plan  string    `json:"plan,omitempty"`
	Since time.Time `json:"since"`
}

// Target is the mode the node's machine is brought to: the pending flip's, else its mode.
func (n *Node) Target() Mode {
	if n.Flip != nil {
		return n.Flip.To
	}
	return n.Mode
}

func applyFlip(r *Record, c *Command, b *Flip) (any, error) {
	n := r.Nodes[b.Node]
	if n == nil {
		return nil, unknownNode(r, c.Op, b.Node)
	}
	if !b.To.valid() {
		return nil, refuse(c.Op, b.Node, "", "mode %q is not adopted or converged", b.To)
	}
	switch {
	case n.Flip != nil && n.Flip.To == b.To:
		// Asked again (the operator's command was interrupted): the intent stands as it is.
		return n, nil
	case n.Flip == nil && n.Mode == b.To:
		return nil, refuse(c.Op, b.Node, "", "already %s (since %s)", n.Mode, n.ModeSince.Format("2006-01-02 15:04:05Z07:00"))
	}
	// Converging takes every module not yet taken; returning to adopted keeps every module
	// taken as it is (nothing taken is un-taken).
	n.Taken = n.EffectiveTaken()
	if b.To == Converged {
		n.Taken = append([]string{}, n.Assigned...)
		// A spoke converges when its migration is done, and a found tunnel still carrying its
		// traffic is part of that migration: its mesh interface takes the tunnel over in place
		// (ADR 0105: "when such a node's tunnel is taken, or the node converged"). It stays taken
		// after a return to adopted, as an explicit take does.
		if c.V >= takesOnConvergeSince && onFoundTunnel(r, n) {
			n.TookTunnel = true
		}
	}
	sort.Strings(n.Taken)
	n.Flip = &FlipIntent{To: b.To, Plan: b.Plan, Since: c.At}
	return n, nil
}

func applyFlipDone(r *Record, c *Command, b *FlipDone) (any, error) {
	n := r.Nodes[b.Node]
	if n == nil {
		return nil, unknownNode(r, c.Op, b.Node)
	}
	if n.Flip == nil || n.Flip.To != b.To || !n.Flip.Since.Equal(b.Since) {
		return nil, refuse(c.Op, b.Node, "", "no flip to %s since %s is pending (pending: %s)", b.To, b.Since.Format(time.RFC3339Nano), pendingOf(n))
	}
	n.Taken = n.EffectiveTaken()
	n.Mode, n.ModeSince, n.Flip = b.To, c.At, nil
	if n.Mode == Converged {
		n.Taken = append([]string{}, n.Assigned...)
	}
	sort.Strings(n.Taken)
	return n, nil
}

func pendingOf(n *Node) string {
	if n.Flip == nil {
		return "none"
	}
	return "to " + string(n.Flip.To) + " since " + n.Flip.Since.Format(time.RFC3339Nano)
}
