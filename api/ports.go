package api

import "net/netip"

// Finding is one result of a preflight (genesis, join) or of a node's port check before a
// settings change. Check is a stable name scripts can match on.
type Finding struct {
	Check   string `json:"check"`
	Level   string `json:"level"` // "error" refuses genesis; "warning" does not
	Message string `json:"message"`
	// Holder names what holds a port: a process and pid, or a container.
	Holder string `json:"holder,omitempty"`
}

// The levels of a finding.
const (
	LevelError   = "error"
	LevelWarning = "warning"
)

// PortBind is one port a node will bind: by the agent itself or a foundation container. It
// has no JSON tags: on the bus its fields travel by their Go names.
type PortBind struct {
	Key   string // the setting, "registry.port"
	Proto string
	Addr  netip.Addr
	Port  uint16
	By    string // what binds it: "meshd (bus)", "container meshd-registry"
}

// PortCheckRequest asks a node's agent, over the peer bus (POST /v1/ports/check), to check
// ports on its machine.
type PortCheckRequest struct {
	Binds []PortBind `json:"binds"`
}

// PortCheckAnswer is the node's findings; an error-level finding refuses the change.
type PortCheckAnswer struct {
	Node     string    `json:"node"`
	Findings []Finding `json:"findings"`
}
