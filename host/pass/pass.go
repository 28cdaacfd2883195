package pass

import (
	"meshd/fsm"
	"meshd/report"
)

// Pass is what one driver gets in one pass.
type Pass struct {
	Declaration *fsm.Declaration
	// Resources are the declared resources of the driver's kind, in declaration order.
	Resources []fsm.Resource
	// Records is the driver's own durable memory in the record store.
	Records *Records
	// Own are meshd's own paths on this machine, which no resource may touch.
	Own Own
}

// Outcome is what a driver reports of one pass.
type Outcome struct {
	// Errors name each resource that failed and why; the others still converged.
	Errors []report.ResourceError
	// Changes counts what the pass changed on the machine or in the record store.
	Changes int
	// Detail is the driver's part of the report (held containers, openings in force, …), put in
	// Report.Kinds under the driver's kind. It must encode as JSON.
	Detail any
}
