package fsm

// A module assigned or taken on many nodes in one command (module.assign.many,
// module.take.many, from command version 8): what `meshd module assign MODULE --match 'web-*'`
// records. The proposer resolves the operator's selector (a list, globs, --all) to node names
// before proposing, so the record applies exactly the nodes the preview showed: a node enrolled
// between the preview and the command is not swept in unseen. The command is all or nothing:
// each node is judged on a copy as the one-node command would judge it, and a node refused
// refuses the whole command, naming every refused node and why. One history event names each
// node, all under the command's one raft index.

import (
	"encoding/json"
	"fmt"
	"strings"
)

// manySince is the first command version with module.assign.many and module.take.many.
const manySince = 8

// The many-node ops.
const (
	OpModuleAssignMany Op = "module.assign.many"
	OpModuleTakeMany   Op = "module.take.many"
)

// One is the one-node op a many-node op does on each node.
func (op Op) One() Op {
	switch op {
	case OpModuleAssignMany:
		return OpModuleAssign
	case OpModuleTakeMany:
		return OpModuleTake
	}
	return op
}

// ModuleOnNodes names a module and the nodes it is assigned to or taken on.
type ModuleOnNodes struct {
	Module string `json:"module"`
	// Nodes are the nodes the command changes, each once: the selector as the proposer resolved
	// it, less the nodes already as asked (the preview says those are unchanged).
	Nodes []string `json:"nodes"`
	// Selector is what the operator gave ("--match web-*", "--all"), said in the history.
	Selector string `json:"selector,omitempty"`
	// AcceptLoss, on a take, are the losses the operator accepted, by node (as
	// ModuleOnNode.AcceptLoss is for one).
	AcceptLoss map[string][]string `json:"accept_loss,omitempty"`
}

// ManyApplied is what a many-node command produced: each node as it now is, in the command's
// order.
type ManyApplied struct {
	Op     Op      `json:"op"`
	Module string  `json:"module"`
	Nodes  []*Node `json:"nodes"`
}

// maxRefusalsNamed bounds how many refused nodes a refusal names one by one; the rest are
// counted.
const maxRefusalsNamed = 20

func applyModuleMany(r *Record, c *Command, b *ModuleOnNodes) (any, error) {
	if c.V < manySince {
		return nil, refuse(c.Op, "", b.Module, "a module on many nodes needs command version %d", manySince)
	}
	if len(b.Nodes) == 0 {
		return nil, refuse(c.Op, "", b.Module, "no nodes named")
	}
	one := *c
	one.Op = c.Op.One()
	seen := map[string]bool{}
	trials := make([]*Node, 0, len(b.Nodes))
	var refused []string
	for _, name := range b.Nodes {
		n := r.Nodes[name]
		switch {
		case seen[name]:
			refused = append(refused, fmt.Sprintf("node %s: named twice", name))
			continue
		case n == nil:
			refused = append(refused, fmt.Sprintf("node %s: no such node", name))
			continue
		}
		seen[name] = true
		trial := detach(n).(*Node)
		if err := moduleOnNode(r, &one, trial, b.Module); err != nil {
			reason := err.Error()
			if ref, ok := err.(*Refusal); ok {
				reason = ref.Reason
			}
			refused = append(refused, fmt.Sprintf("node %s: %s", name, reason))
			continue
		}
		trials = append(trials, trial)
	}
	if len(refused) > 0 {
		shown := refused
		if len(shown) > maxRefusalsNamed {
			shown = shown[:maxRefusalsNamed]
		}
		more := ""
		if len(refused) > len(shown) {
			more = fmt.Sprintf("; and %d more", len(refused)-len(shown))
		}
		return nil, refuse(c.Op, "", b.Module, "refused on %d of %d node(s), so on none (the record is as it was): %s%s",
			len(refused), len(b.Nodes), strings.Join(shown, "; "), more)
	}
	for _, t := range trials {
		n := r.Nodes[t.Name]
		n.Assigned, n.Taken = t.Assigned, t.Taken
	}
	out := &ManyApplied{Op: c.Op, Module: b.Module}
	for _, name := range b.Nodes {
		out.Nodes = append(out.Nodes, r.Nodes[name])
	}
	return out, nil
}

// events are the history's events of a many-node command: one naming each node.
func (m *ManyApplied) events(c *Command) []Event {
	var b ModuleOnNodes
	_ = json.Unmarshal(c.Body, &b)
	with := fmt.Sprintf(" (one of %d", len(m.Nodes))
	if b.Selector != "" {
		with += ", " + b.Selector
	}
	with += ")"
	out := make([]Event, 0, len(m.Nodes))
	for _, n := range m.Nodes {
		e := Event{Node: n.Name, Module: m.Module}
		if m.Op == OpModuleAssignMany {
			e.What = fmt.Sprintf("%s assigned to %s%s", m.Module, n.Name, with)
		} else {
			e.What = fmt.Sprintf("%s taken on %s%s", m.Module, n.Name, with)
			if l := b.AcceptLoss[n.Name]; len(l) > 0 {
				e.What += ", accepting the loss of: " + strings.Join(l, "; ")
			}
		}
		out = append(out, e)
	}
	return out
}

// TryModuleOn is the node as assigning or taking (op, the one-node op) module on it would leave
// it, refused as the record would refuse the command; the record is not changed. A many-node
// preview judges each node with it.
func TryModuleOn(r *Record, op Op, node, module string) (*Node, error) {
	n := r.Nodes[node]
	if n == nil {
		return nil, refuse(op, node, module, "no such node")
	}
	trial := detach(n).(*Node)
	c := Command{V: Version, Op: op}
	if err := moduleOnNode(r, &c, trial, module); err != nil {
		return nil, err
	}
	return trial, nil
}
