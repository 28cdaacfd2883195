package api

import (
	"time"

	"meshd/fsm"
	"meshd/report"
)

// TunnelTakeRequest is `meshd tunnel take NODE IFACE`, with the placement the operator asks for.
type TunnelTakeRequest struct {
	Node      string        `json:"node"`
	Interface string        `json:"interface"`
	Requested fsm.Placement `json:"requested"`
	// DryRun asks for the preview alone (TunnelTakePreview): nothing is recorded.
	DryRun bool `json:"dry_run,omitempty"`
}

// TunnelTakePreview is `meshd tunnel take --dry-run`: the found interface as read beside what
// the node's host will raise in its place, field by field, and anything that refuses the take.
type TunnelTakePreview struct {
	Node      string               `json:"node"`
	Interface string               `json:"interface"`
	Fields    []report.TunnelField `json:"fields"`
	// From says where the fields were read: "this server" (the hub's own tunnel), or the spoke's
	// report and its age.
	From string `json:"from"`
}

// TunnelView is `meshd tunnel show` (and the tunnel part of `meshd status`): the record's private
// network and the hub's tunnel as the hub's host last reported it. Any server composes it from
// the hub's signed report that gossip carried to it, so it says the same on every server.
type TunnelView struct {
	Range      string `json:"range"`
	Hub        string `json:"hub"`
	HubAddress string `json:"hub_address"`
	Port       uint16 `json:"port,omitempty"`
	// Taken is the found interface the hub took over ("" when none).
	Taken string `json:"taken,omitempty"`
	// State is the hub's tunnel state from its last report (report.TunnelFoundUp, TunnelMeshUp,
	// TunnelDark), "" when it has not reported one.
	State string `json:"state,omitempty"`
	Says  string `json:"says,omitempty"`
	// Reason is why, when the hub's report has a tunnel error.
	Reason string `json:"reason,omitempty"`
	// ReportAt is when the hub made the report the peers' liveness comes from; ReportFrom how it
	// reached the answering server (local, gossip, bus), "" when there is none.
	ReportAt   time.Time    `json:"report_at,omitzero"`
	ReportFrom string       `json:"report_from,omitempty"`
	Peers      []TunnelPeer `json:"peers"`
	// Interface is the hub's mesh interface as its report names it: the found interface's name
	// once it took one over (fsm.NodeInterface).
	Interface string `json:"interface,omitempty"`
	// Fields put the found interface the hub took over beside its mesh interface as it runs,
	// field by field, from its report; empty where nothing was taken over.
	Fields []report.TunnelField `json:"fields,omitempty"`
	// FoundUnit is the found interface's wg-quick@ unit on the hub, from its report (masked once
	// taken over); "" when the hub has not said.
	FoundUnit string `json:"found_unit,omitempty"`
	// Hooks says what the found wg-quick file's PreUp/PostUp lines did when the hub last raised
	// its interface anew (a boot), from its report; "" when none ran.
	Hooks string `json:"hooks,omitempty"`
}

// TunnelPeer is one peer of the tunnel: carried (not a node yet) or enrolled (a node now), with
// when the hub last heard from it and the bytes moved, as the hub's device counts them.
type TunnelPeer struct {
	PublicKey     string    `json:"public_key"`
	Address       string    `json:"address"`
	Enrolled      bool      `json:"enrolled"`
	Node          string    `json:"node,omitempty"`
	Endpoint      string    `json:"endpoint,omitempty"`
	LastHandshake time.Time `json:"last_handshake,omitzero"`
	// LastHeard is the later of its last handshake and the hub's last pass that saw it send.
	LastHeard     time.Time `json:"last_heard,omitzero"`
	ReceiveBytes  int64     `json:"rx_bytes"`
	TransmitBytes int64     `json:"tx_bytes"`
}
