package fsm

import (
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"meshd/catalogue"
	"meshd/pki"
)

// OpTunnelTake records that the hub takes the tunnel found on it over in place (ADR 0105).
const OpTunnelTake Op = "tunnel.take"

// MeshInterface is the name of the mesh's WireGuard interface on a node where no tunnel was
// found. A node that takes a found tunnel over raises its interface under the found one's name
// (NodeInterface): prepared under another name while the found one still holds the port, then
// renamed once it is stopped (wg.Takeover).
const MeshInterface = "meshd0"

// NodeInterface is the name of node n's mesh interface: the found interface's on a node that
// took one over (a hub's Tunnel.Taken, a spoke's FoundTunnel once taken), so that every firewall
// rule, PostUp leftover, resolver and monitor that names the found interface keeps naming the
// tunnel; MeshInterface where nothing was found.
func NodeInterface(r *Record, n *Node) string {
	switch {
	case n.Name == r.Tunnel.Hub && r.Tunnel.Taken != "":
		return r.Tunnel.Taken
	case n.Name != r.Tunnel.Hub && n.TookTunnel && n.FoundTunnel != "":
		return n.FoundTunnel
	}
	return MeshInterface
}

// KindTunnel names the host's tunnel driver: the declaration's Tunnel section, not a resource.
const KindTunnel = "tunnel"

// TunnelTake is the hub taking the tunnel found on it over: the found interface's facts as the
// machine has them, read by the agent there (the private key stays on the machine; only its
// public key is recorded), and the placement the operator asked for, which must agree with them.
type TunnelTake struct {
	Node string `json:"node"`
	// Interface is the found interface's name (wg0).
	Interface string `json:"interface"`
	// PublicKey is the found interface's WireGuard public key: it becomes the hub's overlay key.
	PublicKey string `json:"public_key"`
	// Address is the found interface's address with its prefix length (10.44.0.1/24): the hub's
	// address, and its network the record's range.
	Address string `json:"address"`
	// Port is the found interface's listening port: it becomes the node's mesh.tunnel setting.
	Port uint16 `json:"port"`
	// Peers are every peer the found interface has.
	Peers []FoundPeer `json:"peers,omitempty"`
	// Requested is the placement the operator asked for (flags, settings); a field left empty
	// asks nothing.
	Requested Placement `json:"requested"`
	// Announcement is the node's word, signed with its identity, that its overlay key moves to
	// PublicKey. A take on a running mesh moves an enrolled node's key, so it is applied only
	// with an announcement that verifies against the node's recorded identity (invariant 8); at
	// genesis the identity and the key arrive together and there is nothing to move.
	Announcement *pki.KeyAnnouncement `json:"announcement,omitempty"`
}

// FoundPeer is one peer of a found interface as the machine has it.
type FoundPeer struct {
	PublicKey  string   `json:"public_key"`
	AllowedIPs []string `json:"allowed_ips"`
	Endpoint   string   `json:"endpoint,omitempty"`
}

// Placement is where the operator asked the private network to be.
type Placement struct {
	Address string `json:"address,omitempty"` // the hub's address, with or without a prefix length
	Port    uint16 `json:"port,omitempty"`    // the tunnel's port (mesh.tunnel)
	Range   string `json:"range,omitempty"`   // the range (mesh.range)
}

// TunnelTaken is what a tunnel take produced: the node, and the found peers it did not carry
// with why (a spoke's route home is skipped, not refused).
type TunnelTaken struct {
	Node    *Node    `json:"node"`
	Tunnel  Tunnel   `json:"tunnel"`
	Skipped []string `json:"skipped,omitempty"`
}

// planTake checks a take against the record and node n (as it would be) and returns the tunnel
// the record would then hold, the settings n would get, and the peers skipped. It changes
// nothing. Every refusal names the tunnel's value and the one that disagrees with it.
func planTake(r *Record, n *Node, b *TunnelTake, op Op) (*Tunnel, map[string]string, []string, error) {
	bad := func(format string, args ...any) error {
		return refuse(op, n.Name, "", "taking tunnel %s: "+format, append([]any{b.Interface}, args...)...)
	}
	if b.Interface == "" {
		return nil, nil, nil, refuse(op, n.Name, "", "a tunnel take needs the found interface's name")
	}
	if r.Tunnel.Taken != "" {
		return nil, nil, nil, bad("node %s already took tunnel %s over", r.Tunnel.Hub, r.Tunnel.Taken)
	}
	if r.Tunnel.Hub != "" && r.Tunnel.Hub != n.Name {
		return nil, nil, nil, bad("only the hub (%s) takes the tunnel over; a spoke's found tunnel stays its own until it is migrated", r.Tunnel.Hub)
	}
	if _, err := wgtypes.ParseKey(b.PublicKey); err != nil {
		return nil, nil, nil, bad("public key %q: %v", b.PublicKey, err)
	}
	addr, err := netip.ParsePrefix(b.Address)
	if err != nil || !addr.Addr().Is4() || addr.Bits() > 30 {
		return nil, nil, nil, bad("its address %q is not an IPv4 address with a range of at least 4 addresses", b.Address)
	}
	rng := addr.Masked()
	if b.Port == 0 {
		return nil, nil, nil, bad("it has no listening port")
	}
	if err := checkPlacement(b, addr); err != nil {
		return nil, nil, nil, bad("%v", err)
	}
	t := &Tunnel{Range: rng.String(), Hub: n.Name, HubAddress: addr.Addr().String(), Taken: b.Interface}
	held := map[netip.Addr]string{addr.Addr(): "the hub " + n.Name}
	for _, name := range r.NodeNames() {
		o := r.Nodes[name]
		if name == n.Name || o.Address == "" {
			continue
		}
		a, err := netip.ParseAddr(o.Address)
		if err != nil || !rng.Contains(a) {
			return nil, nil, nil, bad("node %s's address %s is not in the tunnel's range %s", name, o.Address, rng)
		}
		if held[a] != "" {
			return nil, nil, nil, bad("node %s's address %s is the tunnel's (%s)", name, a, held[a])
		}
		held[a] = "node " + name
	}
	var skipped []string
	for _, p := range b.Peers {
		c, why := carry(p, rng)
		if why != "" {
			skipped = append(skipped, fmt.Sprintf("peer %s: %s", p.PublicKey, why))
			continue
		}
		a := netip.MustParseAddr(c.Address)
		if held[a] != "" {
			return nil, nil, nil, bad("peer %s's address %s is already %s's", p.PublicKey, a, held[a])
		}
		held[a] = "peer " + p.PublicKey
		t.Carried = append(t.Carried, c)
	}
	sort.Slice(t.Carried, func(i, j int) bool { return t.Carried[i].PublicKey < t.Carried[j].PublicKey })
	settings := map[string]string{
		catalogue.MeshModule + ".tunnel": strconv.Itoa(int(b.Port)),
		catalogue.MeshModule + ".range":  rng.String(),
	}
	return t, settings, skipped, nil
}

// checkPlacement refuses a requested placement that is not the tunnel's: taking the tunnel over
// somewhere the peers are not would stop the found interface and report success.
func checkPlacement(b *TunnelTake, addr netip.Prefix) error {
	q := b.Requested
	if q.Address != "" {
		want, err := netip.ParseAddr(strings.Split(q.Address, "/")[0])
		if err != nil || want != addr.Addr() {
			return fmt.Errorf("the requested address %s is not the tunnel's: %s has %s", q.Address, b.Interface, addr)
		}
	}
	if q.Port != 0 && q.Port != b.Port {
		return fmt.Errorf("the requested tunnel port %d is not the tunnel's: %s listens on %d", q.Port, b.Interface, b.Port)
	}
	if q.Range != "" {
		p, err := netip.ParsePrefix(q.Range)
		if err != nil || !p.Contains(addr.Addr()) {
			return fmt.Errorf("the requested range %s does not hold the tunnel's address %s", q.Range, addr.Addr())
		}
	}
	return nil
}

// carry turns a found peer into a carried one: its address is its one allowed single address in
// the range. A peer allowed a whole range is a spoke's route home, skipped (why says so).
func carry(p FoundPeer, rng netip.Prefix) (CarriedPeer, string) {
	if _, err := wgtypes.ParseKey(p.PublicKey); err != nil {
		return CarriedPeer{}, fmt.Sprintf("not a WireGuard key: %v", err)
	}
	var addrs []netip.Addr
	for _, s := range p.AllowedIPs {
		a, err := netip.ParsePrefix(s)
		if err != nil {
			return CarriedPeer{}, fmt.Sprintf("allowed IP %q is not a prefix", s)
		}
		if a.Bits() == a.Addr().BitLen() && rng.Contains(a.Addr()) {
			addrs = append(addrs, a.Addr())
		}
	}
	if len(addrs) != 1 {
		return CarriedPeer{}, fmt.Sprintf("allowed %s: not one address of %s (a route, not a peer's address)", strings.Join(p.AllowedIPs, ", "), rng)
	}
	return CarriedPeer{PublicKey: p.PublicKey, Address: addrs[0].String(), Endpoint: p.Endpoint}, ""
}

func applyTunnelTake(r *Record, c *Command, b *TunnelTake) (any, error) {
	n := r.Nodes[b.Node]
	if n == nil {
		return nil, unknownNode(r, c.Op, b.Node)
	}
	if r.Tunnel.Hub != "" && n.Name != r.Tunnel.Hub && n.FoundTunnel != "" {
		return applySpokeTake(r, c, n, b)
	}
	t, settings, skipped, err := planTake(r, n, b, c.Op)
	if err != nil {
		return nil, err
	}
	if c.V >= announcedSince {
		if err := checkAnnouncement(n, b, c.Op); err != nil {
			return nil, err
		}
	}
	for _, name := range r.NodeNames() {
		if o := r.Nodes[name]; name != n.Name && o.WireGuardKey == b.PublicKey {
			return nil, refuse(c.Op, n.Name, "", "taking tunnel %s: its key %s is already node %s's", b.Interface, b.PublicKey, name)
		}
	}
	trial := *n
	trial.Settings = copyMap(n.Settings)
	if err := setValues(r.Catalogue, &trial, settings, c.Op); err != nil {
		return nil, err
	}
	if err := checkNode(r.Catalogue, &trial, c.Op, catalogue.MeshModule); err != nil {
		return nil, err
	}
	n.Settings = trial.Settings
	n.Address = t.HubAddress
	n.WireGuardKey = b.PublicKey
	r.Tunnel = *t
	return &TunnelTaken{Node: n, Tunnel: *t, Skipped: skipped}, nil
}

// applySpokeTake records that a spoke's mesh interface takes over the found tunnel it presented
// at enrolment. The record already holds what the tunnel is (its key, and the address the hub's
// tunnel had for it); the spoke's host checks the found interface is that one before it stops
// anything. A requested address or range must be the node's; a requested port is the found
// tunnel's and becomes the node's mesh.tunnel.
func applySpokeTake(r *Record, c *Command, n *Node, b *TunnelTake) (any, error) {
	bad := func(format string, args ...any) error {
		return refuse(c.Op, n.Name, "", "taking tunnel %s: "+format, append([]any{b.Interface}, args...)...)
	}
	switch {
	case b.Interface != n.FoundTunnel:
		return nil, bad("node %s enrolled presenting its found tunnel %s, not %s", n.Name, n.FoundTunnel, b.Interface)
	case n.TookTunnel:
		return nil, bad("node %s already took it over", n.Name)
	case b.PublicKey != "" && b.PublicKey != n.WireGuardKey:
		return nil, bad("its key is %s, node %s enrolled with %s", b.PublicKey, n.Name, n.WireGuardKey)
	}
	q := b.Requested
	if q.Address != "" && strings.Split(q.Address, "/")[0] != n.Address {
		return nil, bad("the requested address %s is not node %s's: it holds %s", q.Address, n.Name, n.Address)
	}
	if q.Range != "" && q.Range != r.Tunnel.Range {
		return nil, bad("the requested range %s is not the private network's, %s", q.Range, r.Tunnel.Range)
	}
	// --port names the found tunnel's port, which the record does not know for a spoke: it
	// becomes the node's mesh.tunnel (a node set could not move it there: the found tunnel holds
	// it), and the spoke's host refuses the takeover if the tunnel does not listen there.
	trial := *n
	trial.Settings = copyMap(n.Settings)
	if port, err := MeshPort(r, n, "tunnel"); err == nil && q.Port != 0 && q.Port != port {
		if err := setValues(r.Catalogue, &trial, map[string]string{catalogue.MeshModule + ".tunnel": strconv.Itoa(int(q.Port))}, c.Op); err != nil {
			return nil, err
		}
		if err := checkNode(r.Catalogue, &trial, c.Op, catalogue.MeshModule); err != nil {
			return nil, err
		}
	}
	n.Settings = trial.Settings
	n.TookTunnel = true
	return &TunnelTaken{Node: n, Tunnel: r.Tunnel}, nil
}

// onFoundTunnel says whether node o's traffic still goes through the found tunnel it enrolled
// with: that tunnel knows only the hub, so no other node can peer it directly.
func onFoundTunnel(r *Record, o *Node) bool {
	return o.Name != r.Tunnel.Hub && o.FoundTunnel != "" && !o.TookTunnel
}

// Path and protocol of the routed opening: every protocol forwarded between the range's
// addresses, in and out of the hub's mesh interface (the netfilter words are the same).
const (
	PathRouted = "routed"
	ProtoAll   = "all"
)

// routedOpening is the opening the hub needs while some address of the range is reached only
// through it: a carried peer, or an enrolled node still on its found tunnel (whose tunnel knows
// only the hub's key). A node of the mesh reaching one of them sends to the hub, which forwards
// it out of the same interface; the predecessor's "deny routed" (or a forward chain's drop)
// would drop it. It is every protocol between the range's addresses and nothing else, and it
// is composed only while it is needed: once every such machine is migrated it goes.
func routedOpening(r *Record, n *Node, t TunnelView) *catalogue.PortOpening {
	if n.Name != r.Tunnel.Hub || t.Interface == "" || r.Tunnel.Range == "" {
		return nil
	}
	turns := len(r.Tunnel.Carried) > 0
	for _, name := range r.sortedNames() {
		if o := r.Nodes[name]; !turns && o.WireGuardKey != "" && o.Address != "" && onFoundTunnel(r, o) {
			turns = true
		}
	}
	if !turns {
		return nil
	}
	return &catalogue.PortOpening{Proto: ProtoAll, From: "private", Path: PathRouted}
}

// checkAnnouncement refuses a take whose overlay key the node has not announced itself: the
// announcement must be node n's, name the tunnel's key, replace the key the record holds now (an
// old one replayed moves nothing), and verify against n's recorded identity. Every refusal names
// the node and says no key moved.
func checkAnnouncement(n *Node, b *TunnelTake, op Op) error {
	bad := func(format string, args ...any) error {
		return refuse(op, n.Name, "", "taking tunnel %s: "+format+"; no key moved", append([]any{b.Interface}, args...)...)
	}
	a := b.Announcement
	switch {
	case a == nil || len(a.Sig) == 0:
		return bad("the move of the overlay key to %s is not announced by node %s (unsigned)", b.PublicKey, n.Name)
	case a.Node != n.Name:
		return bad("the announcement is node %s's, not node %s's", a.Node, n.Name)
	case a.Key != b.PublicKey:
		return bad("the announcement names overlay key %s, the tunnel's is %s", a.Key, b.PublicKey)
	case a.Previous != n.WireGuardKey:
		return bad("the announcement replaces overlay key %q, but the record holds %q for node %s (stale or replayed)", a.Previous, n.WireGuardKey, n.Name)
	}
	if err := a.Verify(n.PublicKey); err != nil {
		return bad("%v", err)
	}
	return nil
}

// composeTunnel is node n's part of the private network: its address in the range, its port,
// its overlay key and peers, and the found interface it takes over. A node the record holds no
// overlay key for gets no interface: no peer could know it.
func composeTunnel(r *Record, n *Node) TunnelView {
	v := TunnelView{Range: r.Tunnel.Range, Hub: r.Tunnel.Hub, HubAddress: r.Tunnel.HubAddress}
	hub := r.Nodes[r.Tunnel.Hub]
	if hub != nil {
		if p, err := MeshPort(r, hub, "tunnel"); err == nil {
			v.Port = p
		}
	}
	v.Carried = append(v.Carried, r.Tunnel.Carried...)
	rng, err := netip.ParsePrefix(r.Tunnel.Range)
	if err != nil || n.WireGuardKey == "" || n.Address == "" {
		return v
	}
	// A spoke whose found tunnel still carries its traffic raises nothing beside it until its
	// tunnel is taken over (TookTunnel); it is still composed as the hub's peer.
	if onFoundTunnel(r, n) {
		v.Rides = n.FoundTunnel
	} else {
		v.Interface = NodeInterface(r, n)
	}
	v.PublicKey = n.WireGuardKey
	v.Address = n.Address + "/" + strconv.Itoa(rng.Bits())
	v.ListenPort, _ = MeshPort(r, n, "tunnel")
	if n.Name != r.Tunnel.Hub && n.TookTunnel {
		v.Takeover = n.FoundTunnel
	}
	if n.Name == r.Tunnel.Hub {
		v.Takeover = r.Tunnel.Taken
		for _, c := range r.Tunnel.Carried {
			v.Peers = append(v.Peers, TunnelPeer{PublicKey: c.PublicKey, AllowedIPs: []string{c.Address + "/32"},
				Endpoint: c.Endpoint, Keepalive: KeepaliveSeconds, Carried: true})
		}
	}
	for _, e := range r.tunnelPeers(rng) {
		// A node still on its found tunnel is reached through the hub, which routes the range:
		// its found tunnel would drop a handshake from a key it does not know.
		if e.peer.Name == n.Name || n.Name != r.Tunnel.Hub && e.onFound {
			continue
		}
		p := e.peer
		p.AllowedIPs = cloneStrings(p.AllowedIPs)
		v.Peers = append(v.Peers, p)
	}
	if n.Name == r.Tunnel.Hub {
		sort.SliceStable(v.Peers, func(i, j int) bool { return v.Peers[i].PublicKey < v.Peers[j].PublicKey })
	}
	return v
}

// KeepaliveSeconds is every composed peer's persistent keepalive: without one a peer takes ~15 s
// to resume after the hub changes hands (see wg.DefaultKeepalive).
const KeepaliveSeconds = 25

// TunnelPeer is one peer of a node's mesh interface.
type TunnelPeer struct {
	// Name is the peer's node; empty for a carried peer (a peer of the tunnel, not a node).
	Name       string   `json:"name,omitempty"`
	PublicKey  string   `json:"public_key"`
	AllowedIPs []string `json:"allowed_ips"`
	Endpoint   string   `json:"endpoint,omitempty"`
	Keepalive  int      `json:"keepalive"` // seconds
	Carried    bool     `json:"carried,omitempty"`
}

// CheckTake checks a take on its own, as genesis does before it writes anything: a complete
// tunnel, and a requested placement that agrees with it.
func CheckTake(b *TunnelTake) error {
	_, _, _, err := planTake(NewRecord(), &Node{Name: b.Node}, b, OpGenesis)
	return err
}

// keepsTakenTunnel refuses a setting that would move the hub's tunnel off the one it took over:
// its port and range are the found tunnel's, which the peers know (ADR 0105).
func keepsTakenTunnel(r *Record, n, trial *Node, op Op) error {
	if r.Tunnel.Taken == "" || n.Name != r.Tunnel.Hub {
		return nil
	}
	for _, s := range []string{"tunnel", "range"} {
		key := catalogue.MeshModule + "." + s
		if was, now := n.Settings[key], trial.Settings[key]; was != now {
			return refuse(op, n.Name, "", "setting %s to %q: the hub took tunnel %s over, and its %s is the tunnel's, %s", key, now, r.Tunnel.Taken, s, was)
		}
	}
	return nil
}
