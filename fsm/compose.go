package fsm

import (
	"fmt"
	"sort"

	"meshd/catalogue"
)

// Declaration is what the controller tells one node: exactly what the host reconciler acts on.
type Declaration struct {
	Node string `json:"node"`
	// Mode is the mode the node's machine is brought to: its recorded mode, or the mode a
	// pending flip moves it to (Flip).
	Mode Mode `json:"mode"`
	// Flip is the pending flip the node carries out, nil when none: the host reports it done
	// (the found firewall retired or restored) and a server then records the node in Flip.To.
	Flip *FlipIntent `json:"flip,omitempty"`
	// Assigned and Taken are sorted module names. On a converged node every assigned module is
	// taken.
	Assigned []string `json:"assigned"`
	Taken    []string `json:"taken"`
	// Settings are the effective values, by "module.setting", of every assigned module.
	Settings map[string]string `json:"settings"`
	Address  string            `json:"address,omitempty"`
	Tunnel   TunnelView        `json:"tunnel"`
	// Mesh is this node's own mesh ports, its settings with the catalogue's defaults filled in,
	// whether or not the mesh module is assigned here: the derived filter lets them in.
	Mesh MeshPorts `json:"mesh"`
	// Servers are the underlay (advertise) addresses of the record's servers, sorted: the guard
	// admits them to an opening that says admit: servers (the Raft port), and nobody else from
	// off the private network. A server that joins or leaves changes every declaration.
	Servers   []string   `json:"servers,omitempty"`
	Resources []Resource `json:"resources"`
}

// TunnelView is what a node needs to know of the private network.
type TunnelView struct {
	Range      string `json:"range,omitempty"`
	Hub        string `json:"hub,omitempty"`
	HubAddress string `json:"hub_address,omitempty"`
	// Port is the hub's tunnel port.
	Port uint16 `json:"port,omitempty"`
	// Carried are the tunnel's peers that are not nodes (yet), as the record carries them.
	Carried []CarriedPeer `json:"carried,omitempty"`

	// The node's own interface, set only when the record holds the node's overlay key.
	// Interface is the mesh's interface to raise (MeshInterface); empty: none.
	Interface string `json:"interface,omitempty"`
	// PublicKey is the interface's WireGuard public key as recorded.
	PublicKey string `json:"public_key,omitempty"`
	// Address is the node's address with the range's prefix length (10.44.0.1/24).
	Address string `json:"address,omitempty"`
	// ListenPort is the node's own mesh.tunnel.
	ListenPort uint16 `json:"listen_port,omitempty"`
	// Takeover names the found interface this node takes over in place; empty: none.
	Takeover string `json:"takeover,omitempty"`
	// Rides names the found interface a spoke's traffic still goes through (Interface is then
	// empty): `tunnel take` or a flip to converged has it taken over.
	Rides string       `json:"rides,omitempty"`
	Peers []TunnelPeer `json:"peers,omitempty"`
}

// MeshPorts are a node's mesh.* ports (0 where the setting does not read as a port).
type MeshPorts struct {
	Bus    uint16 `json:"bus,omitempty"`
	Raft   uint16 `json:"raft,omitempty"`
	Gossip uint16 `json:"gossip,omitempty"`
	Tunnel uint16 `json:"tunnel,omitempty"`
}

// MeshPort is node n's mesh.SETTING port (bus, raft, gossip, tunnel): its own setting, else the
// record's catalogue's default. It is the one place the mesh's ports are worked out: the
// declaration carries them, and the agent reads them for the bus and gossip.
func MeshPort(r *Record, n *Node, setting string) (uint16, error) {
	mesh := r.Catalogue[catalogue.MeshModule]
	if mesh == nil {
		return 0, fmt.Errorf("the catalogue has no %s module to take the %s port from", catalogue.MeshModule, setting)
	}
	p, err := catalogue.ParsePort(mesh.Values(nodeValues(n, catalogue.MeshModule))[setting])
	if err != nil {
		return 0, fmt.Errorf("node %s: setting %s.%s: %w", n.Name, catalogue.MeshModule, setting, err)
	}
	return p, nil
}

// meshPortsOf is node n's mesh ports; one that does not resolve is 0.
func meshPortsOf(r *Record, n *Node) MeshPorts {
	port := func(setting string) uint16 {
		p, err := MeshPort(r, n, setting)
		if err != nil {
			return 0
		}
		return p
	}
	return MeshPorts{Bus: port("bus"), Raft: port("raft"), Gossip: port("gossip"), Tunnel: port("tunnel")}
}

// Resource kinds.
const (
	KindFile      = "file"
	KindContainer = "container"
	KindOpening   = "opening"
)

// Resource is one resource of an assigned module, filled in with the node's settings. Taken says
// whether it converges (its module is taken) or is only prepared (found is held).
type Resource struct {
	Module string `json:"module"`
	Kind   string `json:"kind"`
	Taken  bool   `json:"taken"`
	// Confined says the module may write files and mount host paths only in its own places
	// (catalogue.Places): the host refuses, before writing, a file or a mount whose path on the
	// machine leaves them. False for a module the operator said may be root, and for one not
	// yet confirmed since the upgrade that brought the allowlist (Record.MayReach).
	Confined  bool                   `json:"confined,omitempty"`
	File      *catalogue.File        `json:"file,omitempty"`
	Container *catalogue.Container   `json:"container,omitempty"`
	Opening   *catalogue.PortOpening `json:"opening,omitempty"`
}

// ID names the resource within its node: "file:/etc/x", "container:webapp", "opening:8080/tcp/forwarded/anywhere".
func (r Resource) ID() string {
	switch {
	case r.File != nil:
		return KindFile + ":" + r.File.Path
	case r.Container != nil:
		return KindContainer + ":" + r.Container.Name
	case r.Opening != nil:
		o := r.Opening
		return fmt.Sprintf("%s:%d/%s/%s/%s", KindOpening, o.Port, o.Proto, o.Path, o.From)
	}
	return r.Kind
}

// Compose returns the declaration for node. It fails only for a node the record does not know or
// a module that no longer resolves, which Apply refuses to let happen.
func Compose(r *Record, node string) (*Declaration, error) {
	n := r.Nodes[node]
	if n == nil {
		return nil, unknownNode(r, "", node)
	}
	d := &Declaration{
		Node:      n.Name,
		Mode:      n.Target(),
		Flip:      n.Flip,
		Assigned:  append([]string{}, n.Assigned...),
		Taken:     n.EffectiveTaken(),
		Settings:  map[string]string{},
		Address:   n.Address,
		Tunnel:    composeTunnel(r, n),
		Mesh:      meshPortsOf(r, n),
		Servers:   serverAddresses(r),
		Resources: []Resource{},
	}
	sort.Strings(d.Taken)
	for _, name := range n.Assigned {
		m := r.Catalogue[name]
		if m == nil {
			return nil, refuse("", n.Name, name, "assigned but no longer in the catalogue")
		}
		vals := nodeValues(n, name)
		if name == catalogue.MeshModule && r.Tunnel.Range != "" {
			// The range is the private network's, one for the mesh: the record's tunnel holds it
			// (a taken tunnel's), never a node's own setting or the catalogue's build-time default.
			vals["range"] = r.Tunnel.Range
		}
		res, err := m.Resolve(vals)
		if err != nil {
			return nil, refuse("", n.Name, name, "does not resolve with this node's settings: %v", err)
		}
		for k, v := range res.Settings {
			d.Settings[name+"."+k] = v
		}
		taken, confined := n.IsTaken(name), !r.MayReach(name)
		for i := range res.Files {
			d.Resources = append(d.Resources, Resource{Module: name, Kind: KindFile, Taken: taken, Confined: confined, File: &res.Files[i]})
		}
		for i := range res.Containers {
			d.Resources = append(d.Resources, Resource{Module: name, Kind: KindContainer, Taken: taken, Confined: confined, Container: &res.Containers[i]})
		}
		for i := range res.Openings {
			o := &res.Openings[i]
			// Nothing that refuses traffic is loaded for a module before it is taken, except the
			// foundation's guard, whose ports genesis's preflight checked (ADR 0100): refusing a
			// port the predecessor's service still serves would be an outage, not a preparation.
			o.Guarded = o.Guarded && (m.Foundation || taken)
			d.Resources = append(d.Resources, Resource{Module: name, Kind: KindOpening, Taken: taken, Opening: o})
		}
	}
	if o := routedOpening(r, n, d.Tunnel); o != nil {
		d.Resources = append(d.Resources, Resource{Module: catalogue.MeshModule, Kind: KindOpening, Taken: n.IsTaken(catalogue.MeshModule), Opening: o})
	}
	return d, nil
}
