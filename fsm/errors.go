package fsm

import (
	"fmt"
	"strings"
)

// Refusal is a command the record refused. It names the node and module it was about; the record
// is unchanged.
type Refusal struct {
	Op     Op
	Node   string
	Module string
	Reason string
}

func (e *Refusal) Error() string {
	var who []string
	if e.Node != "" {
		who = append(who, "node "+e.Node)
	}
	if e.Module != "" {
		who = append(who, "module "+e.Module)
	}
	if len(who) == 0 {
		return e.Reason
	}
	return strings.Join(who, ", ") + ": " + e.Reason
}

func refuse(op Op, node, module, format string, args ...any) *Refusal {
	return &Refusal{Op: op, Node: node, Module: module, Reason: fmt.Sprintf(format, args...)}
}
