package main

// What `meshd status` lists at a fleet's size: the counts always, the nodes one by one when the
// fleet is small (smallFleet) or when asked (--list), or those a filter keeps (--state, --module).

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"meshd/api"
	"meshd/fsm"
)

// statusFilter is status's --list, --state and --module.
type statusFilter struct {
	list   bool
	state  string
	module string
}

// nodeStates are the words --state takes: a mode, a liveness, or where a module stands.
var nodeStates = []string{string(fsm.Adopted), string(fsm.Converged), "alive", "failed", "left", "unknown", api.ModuleInForce, api.ModulePending}

func (f statusFilter) check() error {
	if f.state != "" && !slices.Contains(nodeStates, f.state) {
		return fmt.Errorf("--state %q: give one of %s", f.state, strings.Join(nodeStates, ", "))
	}
	return nil
}

func (f statusFilter) filtering() bool { return f.state != "" || f.module != "" }

// listing says whether the nodes are listed one by one.
func (f statusFilter) listing(nodes int) bool { return f.list || f.filtering() || nodes <= smallFleet }

// keeps says whether n is one the filter keeps: with --module, a node the module is assigned to
// (and with --state too, where it stands in that state); with --state alone, a node in that mode
// or liveness, or with a module in that state ("failed" is a node failed in gossip or a module
// failed on it).
func (f statusFilter) keeps(n api.NodeSummary) bool {
	if f.module != "" {
		st, ok := n.Modules[f.module]
		return ok && (f.state == "" || st == f.state)
	}
	if f.state == "" {
		return true
	}
	if string(n.Mode) == f.state || n.Liveness == f.state {
		return true
	}
	for _, st := range n.Modules {
		if st == f.state {
			return true
		}
	}
	return false
}

// apply keeps the nodes and board rows the filter keeps.
func (f statusFilter) apply(st *api.StatusView) {
	if !f.filtering() {
		return
	}
	kept := map[string]bool{}
	nodes := []api.NodeSummary{}
	for _, n := range st.Nodes {
		if f.keeps(n) {
			nodes = append(nodes, n)
			kept[n.Name] = true
		}
	}
	st.Nodes = nodes
	if st.Board != nil {
		b := *st.Board
		b.Rows = slices.DeleteFunc(slices.Clone(b.Rows), func(r api.BoardRow) bool { return !kept[r.Node] })
		st.Board = &b
	}
}

// writeCounts is status's first word on the fleet: the nodes by mode and liveness, each module by
// where it stands.
func writeCounts(w io.Writer, c *api.StatusCounts) {
	if c == nil {
		return
	}
	fmt.Fprintf(w, "nodes: %d: %s; %s\n", c.Nodes, countsIn(c.ByMode, []string{string(fsm.Adopted), string(fsm.Converged)}),
		countsIn(c.ByLiveness, []string{"alive", "failed", "left", "unknown"}))
	for _, m := range c.Modules {
		fmt.Fprintf(w, "module %s on %d: %d in force, %d pending, %d failed\n", m.Module, m.Assigned, m.InForce, m.Pending, m.Failed)
	}
}

// countsIn says counts in order, leaving out the zeros (and "0 nodes" when all are).
func countsIn(counts map[string]int, order []string) string {
	var out []string
	for _, k := range order {
		if counts[k] > 0 {
			out = append(out, fmt.Sprintf("%d %s", counts[k], k))
		}
	}
	for k, v := range counts {
		if !slices.Contains(order, k) && v > 0 {
			out = append(out, fmt.Sprintf("%d %s", v, k))
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}
