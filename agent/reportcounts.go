package agent

// What a node's host report holds, as the node view (api.go) counts it for the operator.

import (
	"meshd/api"
	"meshd/fsm"
	"meshd/report"
)

// activeAgain is the kind of the retired found firewall rep reads active again, "" when none.
func activeAgain(rep *report.Report) string {
	var od report.OpeningDetail
	if rep != nil && api.DecodeInto(rep.Kinds[fsm.KindOpening], &od) && od.Firewall.ActiveAgain {
		return od.Firewall.Kind
	}
	return ""
}

// heldCounts counts what a report holds: found files and found containers kept as they are.
func heldCounts(rep *report.Report) (files, containers int) {
	if rep == nil {
		return 0, 0
	}
	files = len(rep.Held)
	if cr := report.Containers(rep); cr != nil {
		for _, c := range cr.Containers {
			if c.State == "held" {
				containers++
			}
		}
	}
	return files, containers
}
