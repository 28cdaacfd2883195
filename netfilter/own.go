package netfilter

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Port is a protocol and port of the mesh's own (store, broker management, bus, …).
type Port struct {
	Proto string
	Port  uint16
}

func (p Port) String() string { return fmt.Sprintf("%s/%d", p.Proto, p.Port) }

// MarshalText writes p as String does ("tcp/2380"), so a Port can key a JSON object (GuardSpec's
// Admit, kept for boot).
func (p Port) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText reads what MarshalText wrote.
func (p *Port) UnmarshalText(b []byte) error {
	proto, num, ok := strings.Cut(string(b), "/")
	n, err := strconv.ParseUint(num, 10, 16)
	if !ok || (proto != "tcp" && proto != "udp") || err != nil || n == 0 {
		return fmt.Errorf("port %q: want tcp/N or udp/N, N from 1 to 65535", b)
	}
	p.Proto, p.Port = proto, uint16(n)
	return nil
}

// ownChain and ownRule describe one of meshd's own tables. Every rule carries a comment
// saying what it is, so a read can compare it with the desired table without decoding
// expressions.
type ownChain struct {
	name   string
	hook   *nftables.ChainHook
	prio   nftables.ChainPriority
	policy nftables.ChainPolicy
	rules  []ownRule
}

type ownRule struct {
	comment string
	exprs   []expr.Any
	// text is the rule as nft would print it (without its comment), for an operator to read
	// (FilterText); the kernel gets exprs.
	text string
}

// loadOwnTable makes meshd's own table equal to chains, in one batch: the table is deleted
// and built anew inside one transaction, so there is no moment without it. When the table
// already reads as desired nothing is written. wrote says whether it wrote.
func loadOwnTable(env Env, name string, chains []ownChain) (wrote bool, err error) {
	c, closeConn, err := env.NftConn()
	if err != nil {
		return false, err
	}
	defer closeConn()
	t := &nftables.Table{Family: nftables.TableFamilyINet, Name: name}
	same, err := ownTableIs(env, c, t, chains)
	if err != nil {
		return false, err
	}
	if same {
		return false, nil
	}
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
	for _, oc := range chains {
		pol := oc.policy
		ch := c.AddChain(&nftables.Chain{Name: oc.name, Table: t, Type: nftables.ChainTypeFilter,
			Hooknum: oc.hook, Priority: nftables.ChainPriorityRef(oc.prio), Policy: &pol})
		for _, r := range oc.rules {
			c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: r.exprs, UserData: commentData(r.comment)})
		}
	}
	ferr := c.Flush()
	// Re-read whatever happened: a batch can fail after the kernel committed it.
	same, rerr := ownTableIs(env, c, t, chains)
	switch {
	case rerr != nil:
		return true, fmt.Errorf("load nftables table inet %s in %s: %w (re-read: %v)", name, env.NSName(), ferr, rerr)
	case !same && ferr != nil:
		return true, fmt.Errorf("load nftables table inet %s in %s: %w", name, env.NSName(), ferr)
	case !same:
		return true, fmt.Errorf("load nftables table inet %s in %s: it does not read back as loaded", name, env.NSName())
	}
	return true, nil
}

func ownTableIs(env Env, c *nftables.Conn, t *nftables.Table, chains []ownChain) (bool, error) {
	tables, err := c.ListTablesOfFamily(t.Family)
	if err != nil {
		return false, fmt.Errorf("list nftables tables: %w", err)
	}
	found := false
	for _, x := range tables {
		found = found || x.Name == t.Name
	}
	if !found {
		return false, nil
	}
	have, err := c.ListChainsOfTableFamily(t.Family)
	if err != nil {
		return false, fmt.Errorf("list chains of table inet %s: %w", t.Name, err)
	}
	n := 0
	for _, ch := range have {
		if ch.Table.Name != t.Name {
			continue
		}
		n++
		var want *ownChain
		for i := range chains {
			if chains[i].name == ch.Name {
				want = &chains[i]
			}
		}
		if want == nil || ch.Hooknum == nil || *ch.Hooknum != *want.hook || ch.Priority == nil ||
			*ch.Priority != want.prio || ch.Policy == nil || *ch.Policy != want.policy {
			return false, nil
		}
		rules, err := env.ListRules(ch)
		if err != nil {
			return false, fmt.Errorf("read chain inet %s %s: %w", t.Name, ch.Name, err)
		}
		if len(rules) != len(want.rules) {
			return false, nil
		}
		for i, r := range rules {
			if r.Comment != want.rules[i].comment {
				return false, nil
			}
		}
	}
	return n == len(chains), nil
}

// removeOwnTable deletes one of meshd's own tables if it exists.
func removeOwnTable(env Env, name string) error {
	c, closeConn, err := env.NftConn()
	if err != nil {
		return err
	}
	defer closeConn()
	t := &nftables.Table{Family: nftables.TableFamilyINet, Name: name}
	c.AddTable(t)
	c.DelTable(t)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("remove nftables table inet %s in %s: %w", name, env.NSName(), err)
	}
	return nil
}

func accept() expr.Any { return &expr.Verdict{Kind: expr.VerdictAccept} }

func ctEstablished() []expr.Any {
	return []expr.Any{
		&expr.Ct{Key: expr.CtKeySTATE, Register: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED),
			Xor:  binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
		accept(),
	}
}

// Table names of meshd's own tables.
const (
	GuardTable  = "meshd_guard"
	FilterTable = "meshd_filter"
)

// GuardSpec says what the refuse-only guard protects: the ports (every foundation port declared
// from the private network: the store's, the broker's and its management port, raft) and who may
// still reach them besides the machine itself (loopback and the container runtime's bridges): the
// private network's interface and any Trusted interface.
//
// Admit lets further source addresses reach one port from any interface: the servers' Raft port,
// which the other servers reach at the machine's underlay address (they meet there before the
// private network is up). A port with admitted addresses has one rule per address family, each
// dropping what comes from none of that family's addresses; a family with no admitted address
// is refused as any guarded port is.
type GuardSpec struct {
	Private Private
	Ports   []Port
	Trusted []string
	Admit   map[Port][]netip.Addr
}

// RuntimeBridges are the interface names the container runtime gives its bridges: Docker's default
// bridge and the "br-" prefix of every user-defined network. Traffic arriving on them comes from
// the machine's own containers, which the guard lets through ("the machine itself"). A host bridge
// holding the uplink (br0, virbr0) does not match: only the exact "br-" prefix Docker uses does.
var RuntimeBridges = []string{"docker0", "br-*"}

// Guard loads the refuse-only guard on an adopted node: meshd's own table whose one chain,
// at prerouting priority -150 (ahead of dstnat at -100, so it sees the port the client
// addressed before Docker's DNAT), drops traffic addressed to the machine (fib daddr type local)
// on a guarded port from any interface but loopback, the private network's, the container
// runtime's bridges and the trusted ones. Traffic passing through the machine to another address
// (one container calling another at its bridge address on the same port) is not the guard's: it
// passes untouched. Its policy is accept and it holds no accept rule: it never lets anything
// through the found firewall, and the found firewall, in other tables, cannot undo its drop.
// Nothing is written when it is already loaded as spec says; wrote says whether it wrote.
func Guard(ctx context.Context, env Env, spec GuardSpec) (wrote bool, err error) {
	if spec.Private.Interface == "" {
		return false, fmt.Errorf("guard: the private network's interface is not known")
	}
	allowed := append([]string{"lo", spec.Private.Interface}, RuntimeBridges...)
	allowed = append(allowed, spec.Trusted...)
	var rules []ownRule
	for _, p := range spec.Ports {
		base := func() []expr.Any {
			var ex []expr.Any
			for _, i := range allowed {
				ex = append(ex, matchIIF(i, true)...)
			}
			ex = append(ex, matchLocalDestination()...)
			return append(ex, matchPort(p.Proto, p.Port, false)...)
		}
		admit := spec.Admit[p]
		if len(admit) == 0 {
			ex := append(base(), &expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop})
			rules = append(rules, ownRule{comment: fmt.Sprintf("meshd:guard:%s:to-machine:only-from:%v", p, allowed), exprs: ex})
			continue
		}
		for _, six := range []bool{false, true} {
			ex := append(base(), matchFamily(six)...)
			var fam []string
			for _, a := range admit {
				if a.Unmap().Is6() == six {
					ex = append(ex, matchSourceAddrNot(a.Unmap())...)
					fam = append(fam, a.Unmap().String())
				}
			}
			ex = append(ex, &expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop})
			name := "ip"
			if six {
				name = "ip6"
			}
			rules = append(rules, ownRule{comment: fmt.Sprintf("meshd:guard:%s:to-machine:only-from:%v:%s:admit:%v", p, allowed, name, fam), exprs: ex})
		}
	}
	return loadOwnTable(env, GuardTable, []ownChain{{
		name: "prerouting", hook: nftables.ChainHookPrerouting, prio: -150,
		policy: nftables.ChainPolicyAccept, rules: rules,
	}})
}

// RemoveGuard removes the guard's table.
func RemoveGuard(ctx context.Context, env Env) error { return removeOwnTable(env, GuardTable) }

// FilterSpec composes the derived filter of a converged node.
type FilterSpec struct {
	Private Private
	// MeshPorts are the mesh's own ports, accepted from the private network (input, and
	// forwarded to a published container by its original port).
	MeshPorts []Port
	// Openings are every opening of the node's assigned modules.
	Openings []Opening
	// ForwardFrom are interfaces whose traffic may be forwarded out (container bridges).
	ForwardFrom []string
	// Admit narrows the openings of a port to a list of source addresses, as GuardSpec's Admit
	// does on an adopted node: an opening from anywhere (or from a CIDR) to a port named here
	// accepts only these addresses (those within its CIDR), one rule each, IPv4 and IPv6 alike;
	// a port named with no address accepts nobody from off the machine but the private network
	// (the mesh's own ports) and loopback. It is the servers' Raft port, which the other servers
	// reach at the machine's underlay address, and nobody else.
	Admit map[Port][]netip.Addr `json:",omitempty"`
}

// LoadFilter loads meshd's derived filter on a converged node: its own table with input and
// forward chains that drop by default and accept established/related traffic, loopback, the
// private network for the mesh's own ports, and every opening. One batch; nothing is written
// when it already reads as spec says.
func LoadFilter(ctx context.Context, env Env, spec FilterSpec) (wrote bool, err error) {
	chains, err := filterChains(spec)
	if err != nil {
		return false, err
	}
	return loadOwnTable(env, FilterTable, chains)
}

// FilterText is the derived filter spec composes, as nft would print it (one rule a line, each
// with the mark meshd reads it back by): what `meshd converge --preview` shows an operator
// before it is loaded. It is built from the very chains LoadFilter loads.
func FilterText(spec FilterSpec) (string, error) {
	chains, err := filterChains(spec)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "table inet %s {\n", FilterTable)
	for i, ch := range chains {
		if i > 0 {
			b.WriteString("\n")
		}
		policy := "accept"
		if ch.policy == nftables.ChainPolicyDrop {
			policy = "drop"
		}
		fmt.Fprintf(&b, "\tchain %s {\n\t\ttype filter hook %s priority %d; policy %s;\n", ch.name, ch.name, ch.prio, policy)
		for _, r := range ch.rules {
			fmt.Fprintf(&b, "\t\t%s comment %q\n", r.text, r.comment)
		}
		b.WriteString("\t}\n")
	}
	b.WriteString("}\n")
	return b.String(), nil
}

// filterChains composes the derived filter's chains from spec: IPv4 and IPv6 alike (the table
// is inet; a source prefix pins its family).
func filterChains(spec FilterSpec) ([]ownChain, error) {
	lo := ownRule{comment: "meshd:filter:loopback", exprs: append(matchIIF("lo", false), accept()), text: `iifname "lo" accept`}
	est := ownRule{comment: "meshd:filter:established", exprs: ctEstablished(), text: "ct state established,related accept"}
	// ICMP and ICMPv6 in: IPv6 does not work without neighbour discovery, and path MTU discovery
	// and ping are how an operator sees the machine is there.
	icmp := ownRule{comment: "meshd:filter:icmp", exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_ICMP}}, accept()}, text: "meta l4proto icmp accept"}
	icmp6 := ownRule{comment: "meshd:filter:icmpv6", exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_ICMPV6}}, accept()}, text: "meta l4proto ipv6-icmp accept"}
	input := []ownRule{est, lo, icmp, icmp6}
	forward := []ownRule{est}
	for _, i := range spec.ForwardFrom {
		forward = append(forward, ownRule{comment: "meshd:filter:forward-from:" + i, exprs: append(matchIIF(i, false), accept()),
			text: fmt.Sprintf("iifname %q accept", i)})
	}
	// rule is one accept of o on its own path (or, proxy, on the input path), once per admitted
	// address where spec.Admit narrows o's port.
	rules := func(o Opening, proxy bool) ([]ownRule, error) {
		in, suffix := o, ""
		if proxy {
			in.Path, suffix = PathIncoming, ":proxy"
		}
		var out []ownRule
		for _, n := range admitted(o, spec.Admit) {
			ex, err := OpeningExprs(nftables.TableFamilyINet, n.o(in), spec.Private)
			if err != nil {
				return nil, err
			}
			out = append(out, ownRule{comment: o.Mark() + suffix + n.suffix, exprs: ex, text: openingText(n.o(in), spec.Private)})
		}
		return out, nil
	}
	add := func(o Opening) error {
		if err := o.Validate(); err != nil {
			return err
		}
		r, err := rules(o, false)
		if err != nil {
			return err
		}
		if o.Path == PathIncoming {
			input = append(input, r...)
			return nil
		}
		forward = append(forward, r...)
		if o.Path == PathRouted {
			return nil // no published port: nothing reaches a proxy of the machine
		}
		// A published port the kernel cannot forward (IPv6 to a container on an IPv4-only
		// bridge, a client on the machine's own address) reaches the container runtime's proxy,
		// a process of the machine: the same port, from the same sources, on the input path.
		if r, err = rules(o, true); err != nil {
			return err
		}
		input = append(input, r...)
		return nil
	}
	for _, p := range spec.MeshPorts {
		for _, path := range []string{PathIncoming, PathForwarded} {
			if err := add(Opening{Module: "mesh", Proto: p.Proto, Port: p.Port, From: FromPrivate, Path: path}); err != nil {
				return nil, err
			}
		}
	}
	seen := map[string]bool{}
	for _, o := range spec.Openings {
		if !seen[o.Mark()] {
			seen[o.Mark()] = true
			if err := add(o); err != nil {
				return nil, err
			}
		}
	}
	return []ownChain{
		{name: "input", hook: nftables.ChainHookInput, prio: 0, policy: nftables.ChainPolicyDrop, rules: input},
		{name: "forward", hook: nftables.ChainHookForward, prio: 0, policy: nftables.ChainPolicyDrop, rules: forward},
	}, nil
}

// narrowed is one source an opening's rule accepts: the opening's own From, or (suffix set) one
// address Admit lets in.
type narrowed struct {
	from   string
	suffix string
}

func (n narrowed) o(o Opening) Opening {
	if n.suffix != "" {
		o.From = n.from
	}
	return o
}

// admitted is the sources o's rules accept: o's own From, unless admit names o's port and o is
// not from the private network (the private network is the mesh's own and stays as it is): then
// each admitted address, within o's CIDR if it names one, none when none is.
func admitted(o Opening, admit map[Port][]netip.Addr) []narrowed {
	addrs, ok := admit[Port{Proto: o.Proto, Port: o.Port}]
	if !ok || o.From == FromPrivate || o.Path == PathRouted {
		return []narrowed{{from: o.From}}
	}
	var within netip.Prefix
	if o.From != FromAnywhere {
		within, _ = netip.ParsePrefix(o.From)
	}
	var out []narrowed
	seen := map[netip.Addr]bool{}
	for _, a := range addrs {
		a = a.Unmap()
		if !a.IsValid() || seen[a] || (within.IsValid() && !within.Contains(a)) {
			continue
		}
		seen[a] = true
		out = append(out, narrowed{from: netip.PrefixFrom(a, a.BitLen()).String(), suffix: ":admit:" + a.String()})
	}
	return out
}

// openingText is openingExprs in nft's words.
func openingText(o Opening, priv Private) string {
	var parts []string
	if o.Path == PathRouted {
		r := priv.Range.Masked()
		return fmt.Sprintf("iifname %q oifname %q ip saddr %s ip daddr %s accept", priv.Interface, priv.Interface, r, r)
	}
	source := func(p netip.Prefix) string {
		if p.Addr().Is6() {
			return "ip6 saddr " + p.Masked().String()
		}
		return "ip saddr " + p.Masked().String()
	}
	switch o.From {
	case FromAnywhere:
	case FromPrivate:
		if priv.Interface != "" {
			parts = append(parts, fmt.Sprintf("iifname %q", priv.Interface))
		}
		if priv.Range.IsValid() {
			parts = append(parts, source(priv.Range))
		}
	default:
		if p, err := netip.ParsePrefix(o.From); err == nil {
			parts = append(parts, source(p))
		}
	}
	if o.Path == PathForwarded {
		parts = append(parts, fmt.Sprintf("meta l4proto %s ct original proto-dst %d", o.Proto, o.Port))
	} else {
		parts = append(parts, fmt.Sprintf("%s dport %d", o.Proto, o.Port))
	}
	return strings.Join(append(parts, "accept"), " ")
}

// LoadBaseRuleset loads the base ruleset a converged genesis raises before anything listens:
// the derived filter with only the mesh's own ports and the openings genesis declares (the
// bus, the tunnel, …).
func LoadBaseRuleset(ctx context.Context, env Env, spec FilterSpec) error {
	_, err := LoadFilter(ctx, env, spec)
	return err
}

// RemoveFilter removes the derived filter's table (returning a node to adopted).
func RemoveFilter(ctx context.Context, env Env) error { return removeOwnTable(env, FilterTable) }
