package api

import "meshd/fsm"

// EnrolRequest is what a joining machine sends to a server's bus (POST /v1/enrol), with no
// client certificate: the token is the credential, and the signature proves the machine holds
// the identity key it names (pki.EnrolClaim says what it covers).
type EnrolRequest struct {
	Token string `json:"token"`
	Node  string `json:"node"`
	ID    string `json:"id"`
	// PublicKey is the node's ed25519 identity key, base64 (std).
	PublicKey string `json:"public_key"`
	// Advertise is the node's underlay address; empty means the address the request came from.
	Advertise string `json:"advertise,omitempty"`
	// Settings are the node's settings from `join --port`, keyed MODULE.SETTING: only the ports a
	// client binds (the join's JoinSettings).
	Settings map[string]string `json:"settings,omitempty"`
	// WireGuardKey is the WireGuard public key of the machine's found tunnel (FoundTunnel): a
	// carried peer with this key keeps its address (ADR 0105).
	WireGuardKey string `json:"wireguard_key,omitempty"`
	FoundTunnel  string `json:"found_tunnel,omitempty"`
	// Server asks to join as a server; the token must be a server's.
	Server bool `json:"server,omitempty"`
	// SignedAt is when the machine signed the request, in Unix seconds; the server bounds it.
	SignedAt int64 `json:"signed_at"`
	// Signature is the identity key's ed25519 signature over the request (pki.SignEnrolment).
	Signature []byte `json:"signature"`
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
	// tokens. It travels once, in the first answer, inside the TLS session pinned to the CA, and
	// is sealed on arrival; the answer to the same enrolment again never carries it.
	CAKey []byte `json:"ca_key,omitempty"`
	// Again says this answers the same enrolment again (the first answer was lost): a server's
	// carries no CA key, so that server cannot finish its join.
	Again bool `json:"again,omitempty"`
	// RaftPort is a server's Raft port as the record settled it (its mesh.raft setting).
	RaftPort uint16 `json:"raft_port,omitempty"`
}
