package report

import (
	"time"

	"meshd/ctrspec"
)

// Container states as the records and the report name them.
const (
	// ContainerHeld is a found container kept exactly as it is until its module is taken.
	ContainerHeld = "held"
	// ContainerCreated is a container the host created where nothing was found.
	ContainerCreated = "created"
	// ContainerAdopted is a found container that already was the declaration when its module was
	// taken: meshd's from then on, never recreated for it.
	ContainerAdopted = "adopted"
	// ContainerReplaced is the declared container put in the place of a found one at take.
	ContainerReplaced = "replaced"
)

// ContainerReport is the container kind's part of the host report (Report.Kinds["container"]).
type ContainerReport struct {
	// Engine is the engine's address; Reachable says whether it answered this pass, EngineError
	// why not.
	Engine      string `json:"engine"`
	Reachable   bool   `json:"reachable"`
	EngineError string `json:"engine_error,omitempty"`
	// Containers are the declared containers and those the records still know (held, or left
	// after their module was unassigned), sorted by name.
	Containers []ContainerView `json:"containers"`
	// Published is every port published by every running container on the machine, meshd's or
	// not, sorted by host port: what the converge preview lists.
	Published []PublishedPort `json:"published"`
}

// ContainerView is one container as the host sees it.
type ContainerView struct {
	Name   string `json:"name"`
	Module string `json:"module"`
	// State is held, created, adopted or replaced; "" for a declared container not there yet
	// (its failure is in the report's errors).
	State   string `json:"state,omitempty"`
	ID      string `json:"id,omitempty"`
	Image   string `json:"image,omitempty"`
	Running bool   `json:"running"`
	// Ports are what it publishes now, "hostip:hostport->containerport/proto".
	Ports []string `json:"ports,omitempty"`
	// Changed is set on a held container whose id or configuration is not what was recorded when
	// it was found, and on a container of meshd's that had to be converged back this pass;
	// Reason says how (ChangedBySomethingElse or RemovedBySomethingElse, and the differences).
	Changed bool   `json:"changed,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// Action is what this pass did to it: created, started, recreated, adopted, replaced, removed.
	Action string    `json:"action,omitempty"`
	Since  time.Time `json:"since,omitzero"`
	// Unassigned is true once no assigned module declares it (held or left: never removed).
	Unassigned bool `json:"unassigned,omitempty"`
	// OriginalKept says the found container's configuration is in the record store
	// (Host.ContainerOriginal).
	OriginalKept bool `json:"original_kept,omitempty"`
	// Aside is the name the container a take replaced is kept under, stopped, until the
	// operator removes it: stepping back is renaming it back and starting it.
	Aside string `json:"aside,omitempty"`
	// Config is a held container's configuration as a module would declare it, for the take's
	// preview.
	Config *ctrspec.Spec `json:"config,omitempty"`
}

// PublishedPort is one port a container publishes on the machine.
type PublishedPort struct {
	Container     string `json:"container"`
	ContainerID   string `json:"container_id"`
	Module        string `json:"module,omitempty"`
	State         string `json:"state,omitempty"` // the host's state of it; "" when not the mesh's
	HostIP        string `json:"host_ip"`
	HostPort      uint16 `json:"host_port"`
	ContainerPort uint16 `json:"container_port"`
	Proto         string `json:"proto"`
}
