package fsm

import (
	"encoding/json"
	"fmt"
	"time"

	"meshd/catalogue"
)

// Version is the newest command version this build applies. A server meeting a newer command
// refuses it rather than guess, so a mixed-version group never diverges silently.
//
// Version 2: a tunnel.take on a running mesh carries the node's signed key announcement and is
// refused without one. A version 1 take (in a log written before) applies as it did then, so
// replaying an acknowledged command never refuses it.
//
// Version 3: converging a spoke that still rides its found tunnel also has its mesh interface
// take that tunnel over (TookTunnel), as `meshd tunnel take` does. A version 2 flip applies as
// it did then, so a replayed log composes what it composed.
//
// Version 4: a module that declares what makes it root on a machine (a cron or sudoers file, a
// setuid mode, a mount of the engine's socket: catalogue.CheckDenied) must say privileged:
// true, at catalogue.add and, with the node's settings filled in, at module.assign and
// node.settings; the operator credential commands (operator.credential.create and .revoke); and
// every command's By (who gave it) kept in the record where it says something: on a credential,
// and on a token. A version 3 command carries no By and applies as it did then.
//
// Version 5: every command applied appends an event to the record's history (history.go), and
// the history's own commands (history.host, history.keep) exist. A version 4 command appends
// nothing, so a replayed log holds the record it held.
//
// Version 6: a module is judged by the allowlist (catalogue.CheckPlaces: files and mounts only in
// its own places, judged as the system spells them) instead of the deny list; a module saying
// privileged: true is added only with the operator's word (CatalogueAdd.Privileged, kept in
// Record.Privileged with who), and module.confirm gives that word to a module added before. A
// version 5 command is judged by the deny list as it was, so a replayed log holds its record.
// The allowlist's names and places are part of this version: changing them is a new one.
//
// Version 7: a container's manifest says what a real container is (ctrspec.Runtime: user,
// networks, capabilities, limits, health check... and named volumes), and what of it gives
// power over the machine (privileged, devices, capabilities beyond the engine's default set,
// the host's network or PID namespace: catalogue.CheckPowers) needs privileged: true and the
// operator's word like a root-equivalent file or mount. A version 6 command is judged as it
// was: a manifest saying any of the new fields is refused as unknown then, so a replayed log
// holds its record.
//
// Version 8: a module assigned or taken on many nodes in one command (module.assign.many,
// module.take.many: many.go), all or nothing, with a history event naming each node. A version
// 7 command knows no such op and applies as it did.
const Version = 8

// privilegedSince is the first command version that refuses an unsaid root-equivalent module.
const privilegedSince = 4

// announcedSince is the first command version whose tunnel.take must carry a key announcement.
const announcedSince = 2

// takesOnConvergeSince is the first command version whose flip to converged takes a spoke's found
// tunnel over.
const takesOnConvergeSince = 3

// Op names a command.
type Op string

// The commands.
const (
	OpGenesis        Op = "genesis"
	OpNodeEnrol      Op = "node.enrol"
	OpModeSet        Op = "node.mode"
	OpSettingsSet    Op = "node.settings"
	OpModuleAssign   Op = "module.assign"
	OpModuleUnassign Op = "module.unassign"
	OpModuleTake     Op = "module.take"
	OpCatalogueAdd   Op = "catalogue.add"
	OpTokenCreate    Op = "token.create"
	OpServerRemove   Op = "node.server.remove"
	OpNodeRemove     Op = "node.remove"
	// OpCredentialCreate lists an operator credential; OpCredentialRevoke revokes one by name.
	OpCredentialCreate Op = "operator.credential.create"
	OpCredentialRevoke Op = "operator.credential.revoke"
)

// Command is one entry of the Raft log: an op, the proposer's clock, who gave it, and the op's
// body.
type Command struct {
	V  int       `json:"v"`
	Op Op        `json:"op"`
	At time.Time `json:"at"`
	// By is who gave the command, as the proposing server saw it: "operator NAME" (an operator
	// credential), "root on NODE's socket" (a server's operator socket), or, for what an agent
	// does of itself (an enrolment, a finished flip), empty.
	By   string          `json:"by,omitempty"`
	Body json.RawMessage `json:"body"`
}

// Genesis starts the mesh on its control-node.
type Genesis struct {
	Node      string `json:"node"`
	ID        string `json:"id"`
	Mode      Mode   `json:"mode"`
	Advertise string `json:"advertise"`
	// PublicKey is the control-node's ed25519 identity key, base64 (std), as Enrol carries a
	// node's: the key its gossip reports are verified with.
	PublicKey string             `json:"public_key,omitempty"`
	Settings  map[string]string  `json:"settings,omitempty"`
	Catalogue []catalogue.Source `json:"catalogue"`
	// Assign lists the modules assigned to the control-node at genesis (the foundation).
	Assign []string `json:"assign"`
	// Tunnel, when set, is the found tunnel the control-node takes over at genesis
	// (--take-tunnel): its port becomes mesh.tunnel, its range the record's, its address the
	// hub's, and its peers are carried.
	Tunnel *TunnelTake `json:"tunnel,omitempty"`
	// WireGuardKey, when there is no Tunnel, is the control-node's own overlay key: the
	// WireGuard public key made on the machine at genesis (its private half sealed there), so
	// the hub raises the mesh's interface like every other node. A take later moves it, signed.
	WireGuardKey string `json:"wireguard_key,omitempty"`
}

// Enrol adds a node, spending a token.
type Enrol struct {
	Node      string `json:"node"`
	ID        string `json:"id"`
	TokenHash string `json:"token_hash"`
	PublicKey string `json:"public_key,omitempty"`
	Advertise string `json:"advertise,omitempty"`
	// Server is what the joining node asks to be; it must be what its token says.
	Server   bool              `json:"server,omitempty"`
	Settings map[string]string `json:"settings,omitempty"`
	// WireGuardKey is the WireGuard public key the joining machine presents (its found tunnel's):
	// a carried peer with this key keeps its address.
	WireGuardKey string `json:"wireguard_key,omitempty"`
	// FoundTunnel names the found interface WireGuardKey was read from.
	FoundTunnel string `json:"found_tunnel,omitempty"`
}

// SetMode moves a node between adopted and converged.
type SetMode struct {
	Node string `json:"node"`
	Mode Mode   `json:"mode"`
}

// SetSettings changes a node's settings; an empty value returns a setting to its default.
type SetSettings struct {
	Node   string            `json:"node"`
	Values map[string]string `json:"values"`
}

// ModuleOnNode names a module on a node, for assign, unassign and take.
type ModuleOnNode struct {
	Node   string `json:"node"`
	Module string `json:"module"`
	// AcceptLoss, on a take, are the losses the operator accepted (`module take --accept-loss`):
	// what the take preview said its found containers lose ("container api: capabilities:
	// NET_ADMIN dropped"), kept in the record's history with who accepted them.
	AcceptLoss []string `json:"accept_loss,omitempty"`
}

// CatalogueAdd adds or updates a module from its manifest's source.
type CatalogueAdd struct {
	Source catalogue.Source `json:"source"`
	// Privileged is the operator's own word that the module may be root on the machines it is
	// assigned to (`meshd module add --privileged`): from version 6 a module that says
	// privileged: true is refused without it, and it without one.
	Privileged bool `json:"privileged,omitempty"`
}

// TokenCreate records an enrolment token's hash.
type TokenCreate struct {
	Hash    string    `json:"hash"`
	Mode    Mode      `json:"mode"`
	Expires time.Time `json:"expires"`
	// Server makes the token a server's: the node it enrols joins Raft (as a non-voter until its
	// log is current) and gets the mesh CA key.
	Server bool `json:"server,omitempty"`
}

// ServerRemove takes a server out of the Raft group (`meshd operator raft remove-peer`): the node
// stays in the record, as a node that no longer votes, holds the record, or serves the bus.
type ServerRemove struct {
	Node string `json:"node"`
}

// NodeRemove takes a node out of the record (`meshd node remove`): its certificate's key is
// revoked, and its private-network address is quarantined until Until (the proposer's clock plus
// the operator's quarantine) before any enrolment may get it again. Leader is the node proposing
// it (the leader): a leader does not remove itself.
type NodeRemove struct {
	Node   string    `json:"node"`
	Until  time.Time `json:"until"`
	Leader string    `json:"leader"`
}

// CredentialCreate lists an operator credential: its name, its ID (pki.CredentialID: the
// certificate's serial) and its expiry. The certificate itself never enters the record.
type CredentialCreate struct {
	Name    string    `json:"name"`
	ID      string    `json:"id"`
	Expires time.Time `json:"expires"`
}

// CredentialRevoke revokes the operator credential Name: the bus refuses it from then on.
type CredentialRevoke struct {
	Name string `json:"name"`
}

// Encode wraps a body in a versioned command given by no one in particular.
func Encode(op Op, at time.Time, body any) ([]byte, error) { return EncodeBy(op, at, "", body) }

// EncodeBy wraps a body in a versioned command given by by.
func EncodeBy(op Op, at time.Time, by string, body any) ([]byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", op, err)
	}
	return json.Marshal(Command{V: Version, Op: op, At: at.UTC(), By: by, Body: b})
}
