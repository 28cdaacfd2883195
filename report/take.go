package report

// The take preview's types (`meshd module take NODE MODULE --preview`: TakePreview and its
// parts), read by servers and the CLI; host/preview works it out from a report and a declaration.

import (
	"encoding/json"
	"time"

	"meshd/fsm"
)

// TakePreview is what taking Module on Node will do.
type TakePreview struct {
	Node   string `json:"node"`
	Module string `json:"module"`
	// ReportAt is when the node's report the preview reads was made.
	ReportAt time.Time `json:"report_at"`
	// Containers are the found or held containers the take replaces (or adopts in place).
	Containers []PreviewContainer `json:"containers"`
	// Files are the held files the take replaces.
	Files []PreviewFile `json:"files"`
	// Created are the resources the take creates where nothing was found (kind:name).
	Created []string `json:"created"`
	// Guarded are the module's guarded openings: refused from everywhere but the private network
	// and the machine itself once the module is taken.
	Guarded []string `json:"guarded"`
}

// PreviewContainer is one held container a take replaces.
type PreviewContainer struct {
	Name     string `json:"name"`
	FoundID  string `json:"found_id"`
	Image    string `json:"image"`
	NewImage string `json:"new_image"`
	// Differences are what the declaration changes (env values are not shown, only their
	// names); none means it is adopted in place, not replaced.
	Differences []string `json:"differences"`
	// Changed and Reason say something else changed it since it was found.
	Changed bool   `json:"changed,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// Aside is the name it will be kept under, stopped, once replaced.
	Aside string `json:"aside,omitempty"`
	// Losses are the differences that lose something a service may depend on (a network, an
	// alias, a capability, its user, a limit, its health check, what a manifest cannot say):
	// the take is refused unless the operator accepts them (`--accept-loss`).
	Losses []string `json:"losses,omitempty"`
}

// Losses lists every loss of the take, each naming its container ("container api: network
// appnet → bridge, alias api lost").
func (pv TakePreview) Losses() []string {
	var out []string
	for _, c := range pv.Containers {
		for _, l := range c.Losses {
			out = append(out, "container "+c.Name+": "+l)
		}
	}
	return out
}

// PreviewFile is one held file a take replaces.
type PreviewFile struct {
	Path         string `json:"path"`
	RecordedHash string `json:"recorded_hash"`
	CurrentHash  string `json:"current_hash"`
	// Changed: something else changed it since it was found (its latest bytes are recorded
	// beside the original at the take).
	Changed bool   `json:"changed"`
	Reason  string `json:"reason,omitempty"`
}

// Containers is the container kind's part of a report, whether it was made in this
// process or decoded from JSON.
func Containers(rep *Report) *ContainerReport {
	switch c := rep.Kinds[fsm.KindContainer].(type) {
	case *ContainerReport:
		return c
	case ContainerReport:
		return &c
	case nil:
		return nil
	default: // decoded from JSON (a report gossip carried)
		b, err := json.Marshal(c)
		if err != nil {
			return nil
		}
		var cr ContainerReport
		if json.Unmarshal(b, &cr) != nil {
			return nil
		}
		return &cr
	}
}
