package api

import (
	"sort"

	"meshd/report"
)

// The states a module has on a node (NodeSummary.Modules), as report.ModuleOn says them.
const (
	ModuleInForce = report.InForce
	ModulePending = report.Pending
	ModuleFailed  = report.Failed
)

// StatusCounts are the fleet at a glance, what `meshd status` says first: the nodes by mode and
// by liveness, and each module by where it stands on the nodes it is assigned to.
type StatusCounts struct {
	Nodes      int            `json:"nodes"`
	ByMode     map[string]int `json:"by_mode"`
	ByLiveness map[string]int `json:"by_liveness"`
	// Modules are the modules assigned somewhere, by name.
	Modules []ModuleCount `json:"modules"`
}

// ModuleCount is one module on the nodes it is assigned to: how many, and how many in force,
// pending and failed.
type ModuleCount struct {
	Module   string `json:"module"`
	Assigned int    `json:"assigned"`
	InForce  int    `json:"in_force"`
	Pending  int    `json:"pending"`
	Failed   int    `json:"failed"`
}

// CountNodes counts nodes.
func CountNodes(nodes []NodeSummary) StatusCounts {
	c := StatusCounts{Nodes: len(nodes), ByMode: map[string]int{}, ByLiveness: map[string]int{}, Modules: []ModuleCount{}}
	mods := map[string]*ModuleCount{}
	for _, n := range nodes {
		c.ByMode[string(n.Mode)]++
		c.ByLiveness[n.Liveness]++
		for m, state := range n.Modules {
			mc := mods[m]
			if mc == nil {
				mc = &ModuleCount{Module: m}
				mods[m] = mc
			}
			mc.Assigned++
			switch state {
			case ModuleInForce:
				mc.InForce++
			case ModuleFailed:
				mc.Failed++
			default:
				mc.Pending++
			}
		}
	}
	for _, mc := range mods {
		c.Modules = append(c.Modules, *mc)
	}
	sort.Slice(c.Modules, func(i, j int) bool { return c.Modules[i].Module < c.Modules[j].Module })
	return c
}
