package fsm

import (
	"encoding/json"
	"sort"
	"time"

	"meshd/catalogue"
)

// Mode is a node's mode: adopted (what is found is kept until its module is taken) or converged
// (everything declared converges).
type Mode string

// The two modes.
const (
	Adopted   Mode = "adopted"
	Converged Mode = "converged"
)

func (m Mode) valid() bool { return m == Adopted || m == Converged }

// Record is the controller's authoritative state.
type Record struct {
	// Genesis is set by the first command and never again.
	Genesis   *GenesisInfo        `json:"genesis,omitempty"`
	Nodes     map[string]*Node    `json:"nodes"`
	Catalogue catalogue.Catalogue `json:"catalogue"`
	Tunnel    Tunnel              `json:"tunnel"`
	Tokens    map[string]*Token   `json:"tokens,omitempty"`
	// Revoked are the identity keys of removed nodes: the bus and Raft refuse a certificate for
	// any of them, whatever name it carries.
	Revoked []Revocation `json:"revoked,omitempty"`
	// Quarantined are the private-network addresses of removed nodes, not given to an enrolment
	// before their Until.
	Quarantined []Quarantine `json:"quarantined,omitempty"`
	// Credentials are the operator credentials, by name: the bus takes one only while it is
	// listed here with its certificate's ID, unrevoked and unexpired.
	Credentials map[string]*Credential `json:"credentials,omitempty"`
	// Privileged are the operator's words that a module may be root on the machines it is
	// assigned to, by module (privileged.go); nil until the first of command version 6.
	Privileged map[string]*Grant `json:"privileged,omitempty"`
	// History is what happened when and who did it (history.go); nil until the first command of
	// version 5.
	History *History `json:"history,omitempty"`

	// derived is what is worked out from the rest and kept between commands (derived.go):
	// never encoded.
	derived derived
}

// Revocation is a removed node's identity key.
type Revocation struct {
	Node      string    `json:"node"`
	PublicKey string    `json:"public_key"`
	At        time.Time `json:"at"`
}

// Quarantine is a removed node's address, held back from new enrolments until Until.
type Quarantine struct {
	Address string    `json:"address"`
	Node    string    `json:"node"`
	Until   time.Time `json:"until"`
}

// IsRevoked says whether pub (as the record writes keys) is a removed node's key.
func (r *Record) IsRevoked(pub string) bool {
	for _, v := range r.Revoked {
		if v.PublicKey == pub {
			return true
		}
	}
	return false
}

// GenesisInfo says when and where the mesh began.
type GenesisInfo struct {
	ControlNode string    `json:"control_node"`
	At          time.Time `json:"at"`
}

// Node is a machine known to the record.
type Node struct {
	Name string `json:"name"`
	// ID is the node's persistent identity, made once when it first runs.
	ID   string `json:"id"`
	Mode Mode   `json:"mode"`
	// Server nodes vote in Raft; the others are clients.
	Server bool `json:"server,omitempty"`
	// Settings are the node's values by "module.setting"; a setting not here takes the
	// catalogue's default.
	Settings map[string]string `json:"settings,omitempty"`
	Assigned []string          `json:"assigned"`
	Taken    []string          `json:"taken"`
	// Address is the node's address on the private network.
	Address string `json:"address,omitempty"`
	// Advertise is the node's address on the underlay, where its bus and raft ports are reached.
	Advertise string `json:"advertise,omitempty"`
	PublicKey string `json:"public_key,omitempty"`
	// WireGuardKey is the node's overlay key: the WireGuard public key its mesh interface has
	// (the found tunnel's, on a hub that took it over). Its ed25519 identity is PublicKey.
	WireGuardKey string `json:"wireguard_key,omitempty"`
	// FoundTunnel is the found interface whose key the node presented at enrolment: it keeps
	// carrying the node's traffic until the node is migrated, so no mesh interface is raised
	// beside it.
	FoundTunnel string `json:"found_tunnel,omitempty"`
	// TookTunnel says the operator had the node's mesh interface take FoundTunnel over in place
	// (`meshd tunnel take NODE IFACE` on a spoke): from then on it raises the mesh's interface
	// with the found key, address and port, and peers the other nodes directly.
	TookTunnel bool      `json:"took_tunnel,omitempty"`
	EnrolledAt time.Time `json:"enrolled_at"`
	ModeSince  time.Time `json:"mode_since"`
	// Flip is a flip to the other mode recorded and not yet carried out by the node (OpFlip):
	// its declaration already asks for Flip.To.
	Flip *FlipIntent `json:"flip,omitempty"`
}

// Tunnel is the private network.
type Tunnel struct {
	Range      string `json:"range,omitempty"`
	Hub        string `json:"hub,omitempty"`
	HubAddress string `json:"hub_address,omitempty"`
	// Taken names the found interface the hub took over in place (ADR 0105); the range and the
	// carried peers came from it, and outlive the node's flip to converged.
	Taken string `json:"taken,omitempty"`
	// Carried are peers of an adopted tunnel that have not enrolled as nodes yet.
	Carried []CarriedPeer `json:"carried,omitempty"`
}

// CarriedPeer is a peer of an adopted tunnel: known by key and address, not yet a node.
type CarriedPeer struct {
	PublicKey string `json:"public_key"`
	Address   string `json:"address"`
	// Endpoint is where the found interface last saw the peer (host:port), "" when unknown.
	Endpoint string `json:"endpoint,omitempty"`
}

// Token is an enrolment token, recorded by hash only.
type Token struct {
	Hash    string    `json:"hash"`
	Mode    Mode      `json:"mode"`
	Expires time.Time `json:"expires"`
	Created time.Time `json:"created"`
	// Server tokens enrol servers.
	Server bool      `json:"server,omitempty"`
	UsedBy string    `json:"used_by,omitempty"`
	UsedAt time.Time `json:"used_at"`
	// CreatedBy is who made the token (the command's By).
	CreatedBy string `json:"created_by,omitempty"`
}

// NewRecord returns an empty record.
func NewRecord() *Record {
	return &Record{Nodes: map[string]*Node{}, Catalogue: catalogue.Catalogue{}, Tokens: map[string]*Token{},
		Credentials: map[string]*Credential{}}
}

// Marshal encodes the record deterministically: maps by sorted key, slices kept sorted by Apply.
func (r *Record) Marshal() ([]byte, error) { return json.Marshal(r) }

// UnmarshalRecord decodes a record written by Marshal.
func UnmarshalRecord(b []byte) (*Record, error) {
	r := NewRecord()
	if err := json.Unmarshal(b, r); err != nil {
		return nil, err
	}
	if r.Nodes == nil {
		r.Nodes = map[string]*Node{}
	}
	if r.Catalogue == nil {
		r.Catalogue = catalogue.Catalogue{}
	}
	if r.Tokens == nil {
		r.Tokens = map[string]*Token{}
	}
	if r.Credentials == nil {
		r.Credentials = map[string]*Credential{}
	}
	return r, nil
}

// NodeNames returns the nodes' names, sorted.
func (r *Record) NodeNames() []string {
	out := make([]string, 0, len(r.Nodes))
	for n := range r.Nodes {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// IsTaken says whether module counts as taken on node: taken explicitly on an adopted node, or
// merely assigned on a converged one (or one a pending flip converges).
func (n *Node) IsTaken(module string) bool {
	if !has(n.Assigned, module) {
		return false
	}
	return n.Target() == Converged || has(n.Taken, module)
}

// EffectiveTaken lists the modules that count as taken on the node.
func (n *Node) EffectiveTaken() []string {
	if n.Target() == Converged {
		return append([]string{}, n.Assigned...)
	}
	return append([]string{}, n.Taken...)
}

func has(xs []string, x string) bool {
	i := sort.SearchStrings(xs, x)
	return i < len(xs) && xs[i] == x
}

func insert(xs []string, x string) []string {
	i := sort.SearchStrings(xs, x)
	if i < len(xs) && xs[i] == x {
		return xs
	}
	xs = append(xs, "")
	copy(xs[i+1:], xs[i:])
	xs[i] = x
	return xs
}

func remove(xs []string, x string) []string {
	i := sort.SearchStrings(xs, x)
	if i < len(xs) && xs[i] == x {
		return append(xs[:i:i], xs[i+1:]...)
	}
	return xs
}
