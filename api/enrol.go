package api

// Interim (branch h-raft): the wire types setup.Join needs, moved here so setup need not import
// agent. h-api moves these same types into api; on merging, its definitions win and this file
// goes.

import "meshd/fsm"

// DeclarationView is a declaration with the record index it was composed at.
type DeclarationView struct {
	Index       uint64           `json:"index"`
	Declaration *fsm.Declaration `json:"declaration"`
}

// EnrolRequest is what a joining node sends.
type EnrolRequest struct {
	Token string `json:"token"`
	Node  string `json:"node"`
	ID    string `json:"id"`
	// PublicKey is the node's ed25519 identity key, base64 (std).
	PublicKey string `json:"public_key"`
	// Advertise is the node's underlay address; empty means the address the request came from.
	Advertise string `json:"advertise,omitempty"`
	// Settings are the node's settings from `join --port`, keyed MODULE.SETTING: only the ports a
	// client binds (JoinSettings).
	Settings map[string]string `json:"settings,omitempty"`
	// WireGuardKey is the WireGuard public key of the machine's found tunnel (FoundTunnel): a
	// carried peer with this key keeps its address (ADR 0105).
	WireGuardKey string `json:"wireguard_key,omitempty"`
	FoundTunnel  string `json:"found_tunnel,omitempty"`
	// Server asks to join as a server; the token must be a server's.
	Server bool `json:"server,omitempty"`
}

// EnrolResponse is what an enrolled node gets back, once its enrolment is committed.
type EnrolResponse struct {
	Node        *fsm.Node       `json:"node"`
	CertPEM     string          `json:"cert"`
	CACertPEM   string          `json:"ca"`
	Keyring     [][]byte        `json:"gossip_keyring"`
	Servers     []string        `json:"servers"`
	Declaration DeclarationView `json:"declaration"`
	// CAKey is the mesh CA's private key, for a server only: every server enrols nodes and signs
	// tokens. It travels once, inside the TLS session pinned to the CA, and is sealed on arrival.
	CAKey []byte `json:"ca_key,omitempty"`
	// RaftPort is a server's Raft port as the record settled it (its mesh.raft setting).
	RaftPort uint16 `json:"raft_port,omitempty"`
}
