package report

import "time"

// The three states a hub's tunnel is in, as the report says them.
const (
	TunnelFoundUp = "found-up"
	TunnelMeshUp  = "mesh-up"
	TunnelDark    = "found-down-mesh-not-up"
)

// TunnelDetail is the driver's part of the host report (Report.Kinds["tunnel"]).
type TunnelDetail struct {
	// State is TunnelFoundUp, TunnelMeshUp or TunnelDark; empty when no interface is declared.
	State string `json:"state,omitempty"`
	// Says is the state in words.
	Says      string       `json:"says,omitempty"`
	Interface string       `json:"interface,omitempty"`
	Found     string       `json:"found,omitempty"`
	Address   string       `json:"address,omitempty"`
	Port      uint16       `json:"port,omitempty"`
	PublicKey string       `json:"public_key,omitempty"`
	TakenAt   time.Time    `json:"taken_at,omitzero"`
	Peers     []TunnelPeer `json:"peers,omitempty"`
	Reason    string       `json:"reason,omitempty"`
	// Fields put the found interface a takeover kept beside the mesh's interface as it runs,
	// field by field (wg.Kept.Match); empty where nothing was taken over.
	Fields []TunnelField `json:"fields,omitempty"`
	// FoundUnit is the found interface's wg-quick@ unit as the machine has it: FoundUnitMasked
	// (the takeover's), FoundUnitDisabled, FoundUnitEnabled; empty where nothing is found.
	FoundUnit string `json:"found_unit,omitempty"`
	// Hooks says what meshd did of wg-quick's part when it last raised the interface anew (a
	// boot): the found file's PreUp and PostUp lines, a failing line named, and wg-quick's own
	// nftables tables put back; empty when there was nothing to do.
	Hooks string `json:"hooks,omitempty"`
}

// What a found interface's wg-quick@ unit is (TunnelDetail.FoundUnit).
const (
	FoundUnitMasked   = "masked"
	FoundUnitDisabled = "disabled"
	FoundUnitEnabled  = "enabled"
)

// TunnelField is one field of the found interface beside the mesh's (a preshared key says only
// "set" or "none").
type TunnelField struct {
	Field string `json:"field"`
	Found string `json:"found"`
	Mesh  string `json:"mesh"`
	Same  bool   `json:"same"`
	// Added: the mesh has what the found one had not (wg.Field.Added); nothing was lost.
	Added bool `json:"added,omitempty"`
}

// TunnelPeer is one peer of the hub's tunnel as the device carrying it has it (the mesh's
// interface, or the found one while it is still up), read through wgctrl.
type TunnelPeer struct {
	PublicKey     string    `json:"public_key"`
	Name          string    `json:"name,omitempty"`
	Carried       bool      `json:"carried,omitempty"`
	AllowedIPs    []string  `json:"allowed_ips"`
	Endpoint      string    `json:"endpoint,omitempty"`
	LastHandshake time.Time `json:"last_handshake,omitzero"`
	// LastHeard is the later of its last handshake and the pass that first saw its received
	// bytes grow: WireGuard renews a handshake only every two minutes while traffic flows.
	LastHeard     time.Time `json:"last_heard,omitzero"`
	ReceiveBytes  int64     `json:"rx_bytes"`
	TransmitBytes int64     `json:"tx_bytes"`
}
