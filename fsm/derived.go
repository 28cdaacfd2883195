package fsm

import (
	"net/netip"
	"sort"
	"sync"

	"meshd/catalogue"
)

// derived is what commands and Compose work out from the whole record, kept between commands so
// that a command's cost does not grow with the fleet (issue 37): each module's reach beyond its
// places (RootEquivalent) node by node, the servers' addresses, the sorted node names, the nodes
// as the tunnel's peers. It is a function of the record alone and is never encoded: a restored
// or decoded record starts with none and builds it again as it is read, so no server's record
// differs by it. Apply brings it up to date after each command for what that command changed
// (pending.applied); Compose, under a reader's lock, fills in what is missing, so mu guards it.
type derived struct {
	mu sync.Mutex
	// reach is, by module, its reach worked out so far; a module missing is worked out whole
	// when next asked.
	reach   map[string]*reach
	servers []string
	names   []string
	listed  bool // servers and names are worked out
	// peers are the nodes as peers of the others' tunnels, sorted by key; peered says they are
	// worked out.
	peers  []peerEntry
	peered bool
	// fresh works everything out again on each call, as before issue 37: the benchmark's
	// yardstick and the tests' reference.
	fresh bool
}

// reach is one module's RootEquivalent in parts: with its defaults, and by node with each
// assigned node's settings (only the nodes where it reaches anything).
type reach struct {
	defaults []string
	byNode   map[string][]string
}

// reachWith is what makes m root on a machine with vals (nil: its defaults); nil when it does
// not resolve (Apply refuses settings that do not).
func reachWith(m *catalogue.Module, vals map[string]string) []string {
	res, err := m.Resolve(vals)
	if err != nil {
		return nil
	}
	return res.RootEquivalent()
}

// reachOf works module m's reach out from the record, node by node.
func reachOf(r *Record, m *catalogue.Module) *reach {
	x := &reach{defaults: reachWith(m, nil), byNode: map[string][]string{}}
	for name, n := range r.Nodes {
		if has(n.Assigned, m.Name) {
			if s := reachWith(m, nodeValues(n, m.Name)); len(s) > 0 {
				x.byNode[name] = s
			}
		}
	}
	return x
}

// list is the module's RootEquivalent from its parts: the defaults' first, then each node's in
// the order of their names, each said once.
func (x *reach) list(m *catalogue.Module) []string {
	seen := map[string]bool{}
	var out []string
	note := func(s []string) {
		for _, v := range s {
			if !seen[v] {
				seen[v] = true
				out = append(out, v)
			}
		}
	}
	note(x.defaults)
	names := make([]string, 0, len(x.byNode))
	for n := range x.byNode {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		note(x.byNode[n])
	}
	if m.Privileged && len(out) == 0 {
		out = append(out, "it says privileged: true")
	}
	return out
}

// reaches says whether the list would be non-empty, without making it.
func (x *reach) reaches(m *catalogue.Module) bool {
	return len(x.defaults) > 0 || len(x.byNode) > 0 || m.Privileged
}

// reachLocked is module m's reach, worked out if missing. Called with mu held.
func (r *Record) reachLocked(m *catalogue.Module) *reach {
	d := &r.derived
	if d.fresh {
		return reachOf(r, m)
	}
	if x := d.reach[m.Name]; x != nil {
		return x
	}
	if d.reach == nil {
		d.reach = map[string]*reach{}
	}
	x := reachOf(r, m)
	d.reach[m.Name] = x
	return x
}

// RootEquivalent is what makes module root on a machine, each with why: with its defaults and
// with each assigned node's settings, each said once; and that it says privileged: true. Empty
// for a module that stays in its own places.
func (r *Record) RootEquivalent(module string) []string {
	m := r.Catalogue[module]
	if m == nil {
		return nil
	}
	r.derived.mu.Lock()
	defer r.derived.mu.Unlock()
	return r.reachLocked(m).list(m)
}

// reachesBeyond says whether RootEquivalent(module) is non-empty.
func (r *Record) reachesBeyond(module string) bool {
	m := r.Catalogue[module]
	if m == nil {
		return false
	}
	r.derived.mu.Lock()
	defer r.derived.mu.Unlock()
	return r.reachLocked(m).reaches(m)
}

// listsLocked works the servers' addresses and the sorted names out if missing. Called with mu
// held.
func (r *Record) listsLocked() {
	d := &r.derived
	if d.listed && !d.fresh {
		return
	}
	d.names = r.NodeNames()
	seen := map[string]bool{}
	d.servers = nil
	for _, name := range d.names {
		if n := r.Nodes[name]; n.Server && n.Advertise != "" && !seen[n.Advertise] {
			seen[n.Advertise] = true
			d.servers = append(d.servers, n.Advertise)
		}
	}
	sort.Strings(d.servers)
	d.listed = true
}

// serverAddresses are the record's servers' advertise addresses, sorted, each once: the
// caller's own copy.
func serverAddresses(r *Record) []string {
	r.derived.mu.Lock()
	defer r.derived.mu.Unlock()
	r.listsLocked()
	return cloneStrings(r.derived.servers)
}

// sortedNames are the nodes' names, sorted, shared: the caller only reads them.
func (r *Record) sortedNames() []string {
	r.derived.mu.Lock()
	defer r.derived.mu.Unlock()
	r.listsLocked()
	return r.derived.names
}

// peerEntry is one node as a peer of the others' tunnels; onFound says its traffic still goes
// through its found tunnel (only the hub peers it).
type peerEntry struct {
	peer    TunnelPeer
	onFound bool
}

// tunnelPeers are the nodes with an overlay key and an address as peers, sorted by key: shared,
// the caller copies what it keeps.
func (r *Record) tunnelPeers(rng netip.Prefix) []peerEntry {
	d := &r.derived
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.peered && !d.fresh {
		return d.peers
	}
	var peers []peerEntry // a new slice: a reader may still hold the last
	for name, o := range r.Nodes {
		if o.WireGuardKey == "" || o.Address == "" {
			continue
		}
		p := TunnelPeer{Name: name, PublicKey: o.WireGuardKey, AllowedIPs: []string{o.Address + "/32"}, Keepalive: KeepaliveSeconds}
		if name == r.Tunnel.Hub {
			p.AllowedIPs = []string{rng.String()} // the hub routes the range: carried peers are reached through it
		}
		if port, err := MeshPort(r, o, "tunnel"); err == nil && o.Advertise != "" {
			if a, err := netip.ParseAddr(o.Advertise); err == nil {
				p.Endpoint = netip.AddrPortFrom(a, port).String()
			}
		}
		peers = append(peers, peerEntry{peer: p, onFound: onFoundTunnel(r, o)})
	}
	sort.Slice(peers, func(i, j int) bool {
		a, b := peers[i].peer, peers[j].peer
		return a.PublicKey < b.PublicKey || a.PublicKey == b.PublicKey && a.Name < b.Name
	})
	d.peers, d.peered = peers, true
	return peers
}

// forgetAll drops everything derived: a command that changed what it does not follow node by
// node (genesis, a tunnel taken, a node removed).
func (r *Record) forgetAll() {
	r.derived.mu.Lock()
	defer r.derived.mu.Unlock()
	r.derived.reach, r.derived.servers, r.derived.names, r.derived.listed = nil, nil, nil, false
	r.derived.peers, r.derived.peered = nil, false
}

// forgetLists drops the servers' addresses, the names and the peers: a node enrolled, a server
// removed, or what the others see of a node changed (facing).
func (r *Record) forgetLists() {
	r.derived.mu.Lock()
	defer r.derived.mu.Unlock()
	r.derived.servers, r.derived.names, r.derived.listed = nil, nil, false
	r.derived.peers, r.derived.peered = nil, false
}

// forgetModule drops module's reach: the catalogue holds another manifest for it.
func (r *Record) forgetModule(module string) {
	r.derived.mu.Lock()
	defer r.derived.mu.Unlock()
	delete(r.derived.reach, module)
}

// renewReach works module's reach on node out again (the node's settings or assignment
// changed) and says whether whether it reaches at all moved, which moves every declaration of
// it (Resource.Confined). A reach not yet worked out is worked out whole, and said moved: what
// it was is not known.
func (r *Record) renewReach(module, node string) (moved bool) {
	m := r.Catalogue[module]
	if m == nil {
		return false
	}
	r.derived.mu.Lock()
	defer r.derived.mu.Unlock()
	x := r.derived.reach[module]
	if x == nil {
		r.reachLocked(m)
		return true
	}
	was := x.reaches(m)
	delete(x.byNode, node)
	if n := r.Nodes[node]; n != nil && has(n.Assigned, module) {
		if s := reachWith(m, nodeValues(n, module)); len(s) > 0 {
			x.byNode[node] = s
		}
	}
	return was != x.reaches(m)
}
