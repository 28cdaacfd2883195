package fsm

import (
	"encoding/json"
	"fmt"

	"meshd/catalogue"
)

// Touched names the nodes whose declarations a command may have changed: every node (All), or
// those of Nodes. It may name a node whose declaration came out the same, never miss one that
// changed: a declaration watch wakes on it alone (FSM.WaitDeclared), so that one command costs
// the composes of the nodes it is about, not one a node of the fleet.
type Touched struct {
	All   bool
	Nodes []string
}

// pending is what a command names and what its node looks like to the others before it
// applies: enough to say afterwards which declarations it touched.
type pending struct {
	op     Op
	node   string
	nodes  []string
	module string
	facing string
}

// pendingFor reads what command data names; a command that does not decode is refused anyway.
func pendingFor(r *Record, data []byte) pending {
	var c Command
	_ = json.Unmarshal(data, &c)
	var w struct {
		Node   string   `json:"node"`
		Nodes  []string `json:"nodes"`
		Module string   `json:"module"`
	}
	_ = json.Unmarshal(c.Body, &w)
	p := pending{op: c.Op, node: w.Node, nodes: w.Nodes, module: w.Module}
	if n := r.Nodes[w.Node]; n != nil {
		p.facing = facing(r, n)
	}
	return p
}

// facing is what of node n other nodes' declarations carry: its tunnel's key, address, port
// and way (a peer, the hub's port, the hub's routed opening) and whether it is a server where
// (the guard admits the servers).
func facing(r *Record, n *Node) string {
	if n.WireGuardKey == "" && n.Name != r.Tunnel.Hub {
		return fmt.Sprintf("%q %t", n.Advertise, n.Server) // no peer of anyone's tunnel
	}
	port, _ := MeshPort(r, n, "tunnel")
	return fmt.Sprintf("%q %q %q %t %q %t %d", n.WireGuardKey, n.Address, n.Advertise, n.Server, n.FoundTunnel, n.TookTunnel, port)
}

// afterApply is applied, and when that fails (a fault in working something out again) every
// node touched and nothing kept: the command has applied, and stands.
func (p pending) afterApply(r *Record, v any) (t Touched) {
	defer func() {
		if recover() != nil {
			r.forgetAll()
			t = Touched{All: true}
		}
	}()
	return p.applied(r, v)
}

// applied brings what the record keeps derived up to date after the command applied (it
// returned v) and says which declarations it touched. A command added to apply and not here
// touches every declaration and drops everything derived: slow, never wrong.
func (p pending) applied(r *Record, v any) Touched {
	one := Touched{Nodes: []string{p.node}}
	if n := r.Nodes[p.node]; n != nil && facing(r, n) != p.facing {
		r.forgetLists()
		one = Touched{All: true}
	}
	switch p.op {
	case OpTokenCreate, OpCredentialCreate, OpCredentialRevoke, OpHostEvents, OpHistoryKeep:
		return Touched{}
	case OpModeSet, OpFlip, OpFlipDone, OpModuleTake:
		return one
	case OpModuleTakeMany:
		return Touched{Nodes: p.nodes}
	case OpModuleAssign, OpModuleUnassign:
		return r.withMoved(one, p.module, r.renewReach(p.module, p.node))
	case OpModuleAssignMany:
		moved := false
		for _, name := range p.nodes {
			moved = r.renewReach(p.module, name) || moved
		}
		return r.withMoved(Touched{Nodes: p.nodes}, p.module, moved)
	case OpSettingsSet:
		if n := r.Nodes[p.node]; n != nil {
			for _, m := range n.Assigned {
				one = r.withMoved(one, m, r.renewReach(m, p.node))
			}
		}
		return one
	case OpNodeEnrol:
		r.forgetLists()
		n, _ := v.(*Node)
		if n == nil {
			return Touched{All: true}
		}
		t := Touched{Nodes: []string{n.Name}, All: n.WireGuardKey != "" || n.Server}
		for _, m := range n.Assigned {
			t = r.withMoved(t, m, r.renewReach(m, n.Name))
		}
		return t
	case OpCatalogueAdd:
		m, _ := v.(*catalogue.Module)
		if m == nil {
			break
		}
		r.forgetModule(m.Name)
		if m.Name == catalogue.MeshModule {
			r.forgetLists() // the tunnel ports' defaults
		}
		return r.withMoved(Touched{All: m.Name == catalogue.MeshModule}, m.Name, true)
	case OpModuleConfirm:
		// Only a module that may reach already is confirmed: MayReach stays true.
		return Touched{}
	case OpServerRemove:
		r.forgetLists()
		return Touched{All: true}
	}
	// Genesis, a tunnel taken, a node removed: every declaration, and nothing derived is kept.
	r.forgetAll()
	return Touched{All: true}
}

// withMoved adds to t, when moved, every node module is assigned to: whether it may reach
// beyond its places (Resource.Confined) is in each of their declarations.
func (r *Record) withMoved(t Touched, module string, moved bool) Touched {
	if !moved || t.All {
		return t
	}
	for name, n := range r.Nodes {
		if has(n.Assigned, module) {
			t.Nodes = append(t.Nodes, name)
		}
	}
	return t
}
