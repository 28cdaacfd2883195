package report

// Where a module stands on one node, read from the node's latest report: what `meshd module
// status`, a fleet-sized assign or take following its nodes, and `meshd status`'s module counts
// say.

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// The states of a module on a node.
const (
	// InForce: the latest report is of a pass that had the module as the record has it (assigned,
	// or taken and carried out) and none of its resources failed.
	InForce = "in force"
	// Pending: the node has not reported a pass that carries it out yet.
	Pending = "pending"
	// Failed: the latest pass had a resource of the module fail; the node says why.
	Failed = "failed"
)

// ModuleOn is the state of module on the node whose latest report is rep (nil: none yet), when
// the record has it assigned there and, if taken, taken; why says what it waits for or what
// failed.
func ModuleOn(rep *Report, module string, taken bool) (state, why string) {
	if rep == nil {
		return Pending, "no report from the node yet"
	}
	if taken {
		c := ReportTake(rep, module)
		switch {
		case !c.Seen:
			return Pending, "the node has not reported a pass with it taken yet"
		case len(c.Failed) > 0:
			return Failed, failedWhy(c.Failed)
		case !c.Done:
			return Pending, c.Waiting
		}
		return InForce, ""
	}
	if !slices.Contains(rep.Assigned, module) {
		return Pending, "the node has not reported a pass with it assigned yet"
	}
	var failed []ResourceError
	for _, e := range rep.Errors {
		if e.Module == module {
			failed = append(failed, e)
		}
	}
	if len(failed) > 0 {
		return Failed, failedWhy(failed)
	}
	return InForce, ""
}

func failedWhy(errs []ResourceError) string {
	out := ""
	for i, e := range errs {
		if i > 0 {
			out += "; "
		}
		out += e.Resource + ": " + e.Reason
	}
	return out
}

// Counts says counts by what they count ("3 in force, 1 pending"), in a steady order: the
// sentence a summary of many nodes leads with.
func Counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, fmt.Sprintf("%d %s", m[k], k))
	}
	return strings.Join(out, ", ")
}
