// Genesis and enrolment: the record's first node and every node that joins after, and the
// private network's addresses they get.

package fsm

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"meshd/catalogue"
)

// applyGenesis checks genesis whole (node, mode, catalogue, settings, tunnel placement) before it
// records anything: one body, since every check must pass before the first write to the record.
func applyGenesis(r *Record, c *Command, b *Genesis) (any, error) {
	if r.Genesis != nil {
		return nil, refuse(c.Op, b.Node, "", "the mesh already began on %s at %s; genesis runs once", r.Genesis.ControlNode, r.Genesis.At.Format("2006-01-02 15:04:05Z07:00"))
	}
	if !nodeNameRe.MatchString(b.Node) {
		return nil, refuse(c.Op, b.Node, "", "%q is not a node name (lower-case letters, digits and '-')", b.Node)
	}
	if b.ID == "" {
		return nil, refuse(c.Op, b.Node, "", "a node needs its persistent ID")
	}
	if !b.Mode.valid() {
		return nil, refuse(c.Op, b.Node, "", "mode %q is not adopted or converged", b.Mode)
	}
	cat := catalogue.Catalogue{}
	var errs catalogue.Errors
	for _, s := range b.Catalogue {
		m, err := catalogue.Parse(s.File, []byte(s.Data))
		if err != nil {
			errs = appendErrs(errs, err)
			continue
		}
		if err := cat.CheckAdd(m); err != nil {
			errs = appendErrs(errs, err)
			continue
		}
		if err := checkVocabulary(c, m); err != nil {
			errs = appendErrs(errs, err)
			continue
		}
		if err := checkGenesisPlaces(c, m); err != nil {
			errs = appendErrs(errs, err)
			continue
		}
		cat[m.Name] = m
	}
	if len(errs) > 0 {
		return nil, refuse(c.Op, b.Node, "", "the catalogue is refused:\n%v", errs)
	}
	n := &Node{Name: b.Node, ID: b.ID, Mode: b.Mode, Server: true, Advertise: b.Advertise, PublicKey: b.PublicKey,
		Assigned: []string{}, Taken: []string{}, EnrolledAt: c.At, ModeSince: c.At}
	if err := setValues(cat, n, b.Settings, c.Op); err != nil {
		return nil, err
	}
	var taken *Tunnel
	if b.Tunnel != nil {
		// The operator's own mesh.tunnel and mesh.range, given at genesis, are the placement
		// asked for: they must agree with the tunnel.
		take := *b.Tunnel
		if v := n.Settings[catalogue.MeshModule+".tunnel"]; take.Requested.Port == 0 && v != "" {
			p, err := catalogue.ParsePort(v)
			if err != nil {
				return nil, refuse(c.Op, b.Node, "", "setting mesh.tunnel: %v", err)
			}
			take.Requested.Port = p
		}
		if v := n.Settings[catalogue.MeshModule+".range"]; take.Requested.Range == "" && v != "" {
			take.Requested.Range = v
		}
		t, settings, _, err := planTake(NewRecord(), n, &take, c.Op)
		if err != nil {
			return nil, err
		}
		if err := setValues(cat, n, settings, c.Op); err != nil {
			return nil, err
		}
		taken, n.WireGuardKey = t, b.Tunnel.PublicKey
	} else {
		n.WireGuardKey = b.WireGuardKey
	}
	for _, m := range b.Assign {
		if cat[m] == nil {
			return nil, refuse(c.Op, b.Node, m, "not in the catalogue")
		}
		n.Assigned = insert(n.Assigned, m)
	}
	if err := checkNode(cat, n, c.Op, ""); err != nil {
		return nil, err
	}
	rng, err := tunnelRange(cat, n)
	if err != nil {
		return nil, refuse(c.Op, b.Node, "", "%v", err)
	}
	tunnel := Tunnel{Range: rng.String(), Hub: n.Name, HubAddress: rng.Addr().Next().String()}
	if taken != nil {
		tunnel = *taken
	}
	n.Address = tunnel.HubAddress
	// Everything checked: now change the record.
	r.Genesis = &GenesisInfo{ControlNode: b.Node, At: c.At}
	r.Catalogue = cat
	r.Nodes[n.Name] = n
	r.Tunnel = tunnel
	return n, nil
}

func appendErrs(errs catalogue.Errors, err error) catalogue.Errors {
	var more catalogue.Errors
	if errors.As(err, &more) {
		return append(errs, more...)
	}
	return append(errs, &catalogue.FieldError{Msg: err.Error()})
}

// tunnelRange reads the private network's range from the node's mesh settings.
func tunnelRange(cat catalogue.Catalogue, n *Node) (netip.Prefix, error) {
	mesh := cat[catalogue.MeshModule]
	if mesh == nil {
		return netip.Prefix{}, fmt.Errorf("the catalogue has no %s module to take the private network's range from", catalogue.MeshModule)
	}
	s := mesh.Values(nodeValues(n, catalogue.MeshModule))["range"]
	p, err := netip.ParsePrefix(s)
	if err != nil || !p.Addr().Is4() || p.Bits() > 30 {
		return netip.Prefix{}, fmt.Errorf("setting mesh.range: %q is not an IPv4 range of at least 4 addresses, such as 10.99.0.0/24", s)
	}
	return p.Masked(), nil
}

func applyEnrol(r *Record, c *Command, b *Enrol) (any, error) {
	if !nodeNameRe.MatchString(b.Node) {
		return nil, refuse(c.Op, b.Node, "", "%q is not a node name (lower-case letters, digits and '-')", b.Node)
	}
	// The same enrolment again (its answer was lost): the node this token enrolled, with this very
	// key, is answered as it was recorded, and nothing changes. A different key is refused below.
	if n, tok := r.Nodes[b.Node], r.Tokens[b.TokenHash]; n != nil && tok != nil && tok.UsedBy == b.Node &&
		b.PublicKey != "" && n.PublicKey == b.PublicKey && n.Server == b.Server {
		return n, nil
	}
	if r.Nodes[b.Node] != nil {
		return nil, refuse(c.Op, b.Node, "", "a node of that name is already enrolled (id %s)", r.Nodes[b.Node].ID)
	}
	if b.PublicKey != "" && r.IsRevoked(b.PublicKey) {
		return nil, refuse(c.Op, b.Node, "", "this identity key was a removed node's (revoked): a machine joins again with a new key")
	}
	for _, name := range r.NodeNames() {
		if b.ID != "" && r.Nodes[name].ID == b.ID {
			return nil, refuse(c.Op, b.Node, "", "id %s is already node %s's", b.ID, name)
		}
	}
	if b.ID == "" {
		return nil, refuse(c.Op, b.Node, "", "a node needs its persistent ID")
	}
	tok := r.Tokens[b.TokenHash]
	switch {
	case tok == nil:
		return nil, refuse(c.Op, b.Node, "", "the token is not one this mesh issued")
	case tok.UsedBy != "":
		return nil, refuse(c.Op, b.Node, "", "the token was already used by node %s at %s", tok.UsedBy, tok.UsedAt.Format("2006-01-02 15:04:05Z07:00"))
	case !c.At.Before(tok.Expires):
		return nil, refuse(c.Op, b.Node, "", "the token expired at %s", tok.Expires.Format("2006-01-02 15:04:05Z07:00"))
	case tok.Server != b.Server && tok.Server:
		return nil, refuse(c.Op, b.Node, "", "the token is a server's: join with it as a server")
	case tok.Server != b.Server:
		return nil, refuse(c.Op, b.Node, "", "the token is a client's: a server joins with a token made by `meshd token create --server`")
	}
	n := &Node{Name: b.Node, ID: b.ID, Mode: tok.Mode, Server: b.Server, Advertise: b.Advertise, PublicKey: b.PublicKey,
		Assigned: []string{}, Taken: []string{}, EnrolledAt: c.At, ModeSince: c.At}
	// Every node binds meshd's own ports (bus, gossip, tunnel): the mesh module declares their
	// openings, so a node behind a found firewall is reachable by the mesh from its first pass.
	if r.Catalogue[catalogue.MeshModule] != nil {
		n.Assigned = []string{catalogue.MeshModule}
	}
	if err := setValues(r.Catalogue, n, b.Settings, c.Op); err != nil {
		return nil, err
	}
	if err := checkNode(r.Catalogue, n, c.Op, ""); err != nil {
		return nil, err
	}
	// A carried peer is matched on the WireGuard key the machine presents from its found tunnel,
	// never on its ed25519 identity: those are different keys and never match.
	carried := -1
	for i, p := range r.Tunnel.Carried {
		if b.WireGuardKey != "" && p.PublicKey == b.WireGuardKey {
			carried = i
		}
	}
	if b.WireGuardKey != "" {
		for _, name := range r.NodeNames() {
			if r.Nodes[name].WireGuardKey == b.WireGuardKey {
				return nil, refuse(c.Op, b.Node, "", "WireGuard key %s is already node %s's", b.WireGuardKey, name)
			}
		}
		n.WireGuardKey, n.FoundTunnel = b.WireGuardKey, b.FoundTunnel
	}
	if carried >= 0 {
		n.Address = strings.Split(r.Tunnel.Carried[carried].Address, "/")[0]
	} else {
		addr, err := AssignAddress(r, c.At)
		if err != nil {
			return nil, refuse(c.Op, b.Node, "", "%v", err)
		}
		n.Address = addr
	}
	r.Nodes[n.Name] = n
	if carried >= 0 {
		r.Tunnel.Carried = append(r.Tunnel.Carried[:carried:carried], r.Tunnel.Carried[carried+1:]...)
	}
	tok.UsedBy, tok.UsedAt = n.Name, c.At
	return n, nil
}

// AssignAddress picks the lowest free address of the private network's range: not the network's
// own, not the broadcast, not the hub's, not any node's, not any carried peer's, not a removed
// node's still in quarantine at time at.
func AssignAddress(r *Record, at time.Time) (string, error) {
	rng, err := netip.ParsePrefix(r.Tunnel.Range)
	if err != nil {
		return "", fmt.Errorf("the private network has no range: %q", r.Tunnel.Range)
	}
	used := map[string]bool{r.Tunnel.HubAddress: true}
	for _, n := range r.Nodes {
		used[strings.Split(n.Address, "/")[0]] = true
	}
	for _, p := range r.Tunnel.Carried {
		used[strings.Split(p.Address, "/")[0]] = true
	}
	for _, q := range r.Quarantined {
		if at.Before(q.Until) {
			used[q.Address] = true
		}
	}
	for a := rng.Addr().Next(); rng.Contains(a); a = a.Next() {
		if !rng.Contains(a.Next()) {
			break // the broadcast address
		}
		if !used[a.String()] {
			return a.String(), nil
		}
	}
	return "", fmt.Errorf("the private network's range %s has no free address", rng)
}
