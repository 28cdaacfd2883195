package reach

import (
	"fmt"
	"net/netip"
	"strings"
)

// res is what one match says of the packet: it is met, it is not, or it may be (it depends on
// what the client chooses, a source port, or on a rate).
type res int8

const (
	no res = iota
	yes
	maybe
	// unk: not known for this packet; the match's unknown says why.
	unk
)

func of(b bool) res {
	if b {
		return yes
	}
	return no
}

// packet is a new connection from outside, as a chain at one hook sees it. The source is what is
// asked; everything else is known, or said to be unknown.
type packet struct {
	v6    bool
	proto string // tcp, udp
	// input: the packet is to the machine itself (Docker's proxy); else forwarded to dst.
	input bool
	dst   netip.Addr // the container's address (forwarded); invalid on input
	dport uint16     // the destination port at this hook (after DNAT)
	// origDport is the port the client addressed (conntrack's original destination port).
	origDport uint16
	oif       string // the container's bridge (forwarded); "" when not known
	// bridges are the container bridges Docker's nat rules name: a packet from outside comes in
	// on none of them.
	bridges map[string]bool
}

// match is one condition of a rule: on the source (src, neg: the source not in src), or else a
// test of the rest of the packet; unknown names a match that is not understood (test nil), or
// why test answered unk.
type match struct {
	src     []netip.Prefix
	neg     bool
	isSrc   bool
	test    func(p *packet) res
	unknown string
}

// Verdicts of a rule; a rule with none (a log, a counter) goes on to the next.
const (
	vNone   = ""
	vAccept = "accept"
	vDrop   = "drop"
	vReturn = "return"
	vJump   = "jump"
	vGoto   = "goto"
)

// rule is one rule of a chain, in this package's terms.
type rule struct {
	where   string // table, chain and the rule's text, as a refusal names it
	matches []match
	verdict string
	target  string // the chain jumped or gone to
	// unknown names a statement the rule has that is not understood (its verdict is then not
	// known either).
	unknown string
}

// chain is one chain; policy is "" for a chain that is not a base chain.
type chain struct {
	name   string
	policy string // accept or drop
	rules  []rule
}

// table is one filter table of one firewall: its chains, and its base chains at each hook.
type table struct {
	name   string // "iptables-nft filter", "nft inet filter"
	v4, v6 bool
	chains map[string]*chain
	input  []*chain
	fwd    []*chain
}

// outcome is what a chain did with a set of sources.
type outcome struct {
	accepted, returned set
	dropped            []string // where each drop that took some sources is
}

// refusal is an answer that cannot be given, naming the rule.
type refusal struct{ where, why string }

func (r *refusal) Error() string { return r.where + ": " + r.why }

const maxDepth = 64

// run passes the sources s through c.
func (t *table) run(c *chain, p *packet, s set, depth int) (outcome, error) {
	var o outcome
	if depth > maxDepth {
		return o, &refusal{where: t.name + " chain " + c.name, why: "jumps nest deeper than " + fmt.Sprint(maxDepth)}
	}
	for i := range c.rules {
		if len(s) == 0 {
			break
		}
		r := &c.rules[i]
		if r.verdict == vNone && r.unknown == "" {
			continue
		}
		m, how, err := r.apply(p, s)
		if err != nil {
			return o, err
		}
		if len(m) == 0 {
			continue
		}
		rest := s
		if how != maybe {
			rest = s.notIn(m)
		}
		switch r.verdict {
		case vAccept:
			o.accepted = o.accepted.or(m)
		case vDrop:
			if how != maybe {
				o.dropped = append(o.dropped, r.where)
			}
		case vReturn:
			// Those that may meet it return (and, when only may, go on here too).
			o.returned = o.returned.or(m)
		case vJump, vGoto:
			sub := t.chains[r.target]
			if sub == nil {
				return o, &refusal{where: r.where, why: "jumps to chain " + r.target + ", which is not there"}
			}
			so, err := t.run(sub, p, m, depth+1)
			if err != nil {
				return o, err
			}
			o.accepted = o.accepted.or(so.accepted)
			if how != maybe {
				o.dropped = append(o.dropped, so.dropped...)
			}
			if r.verdict == vJump {
				rest = rest.or(so.returned)
			} else {
				o.returned = o.returned.or(so.returned)
			}
		}
		s = rest
	}
	switch {
	case len(s) == 0:
	case c.policy == vAccept:
		o.accepted = o.accepted.or(s)
	case c.policy == vDrop:
		o.dropped = append(o.dropped, fmt.Sprintf("%s chain %s policy drop", t.name, c.name))
	default:
		o.returned = o.returned.or(s)
	}
	return o, nil
}

// apply is the part of s that r matches, and whether it surely does or only may.
func (r *rule) apply(p *packet, s set) (set, res, error) {
	how := yes
	var unknown string
	for _, m := range r.matches {
		switch {
		case m.isSrc && m.test == nil:
		case m.isSrc:
			// A family check guarding a source match (nftables' ip saddr in an inet table).
			if m.test(p) == no {
				return nil, no, nil
			}
		case m.test == nil:
			if unknown == "" {
				unknown = m.unknown
			}
		default:
			switch m.test(p) {
			case no:
				return nil, no, nil
			case maybe:
				how = maybe
			case unk:
				if unknown == "" {
					unknown = m.unknown
				}
			}
		}
	}
	if unknown == "" {
		unknown = r.unknown
	}
	for _, m := range r.matches {
		if !m.isSrc {
			continue
		}
		var fam []netip.Prefix
		for _, q := range m.src {
			if q.Addr().Is6() == p.v6 {
				fam = append(fam, q)
			}
		}
		if m.neg {
			s = s.notIn(fam)
		} else {
			s = s.inAny(fam)
		}
	}
	if len(s) > 0 && unknown != "" {
		return nil, no, &refusal{where: r.where, why: unknown}
	}
	return s, how, nil
}

// iifOutside tests an input interface against a packet from outside, which comes in on neither
// loopback nor a container bridge; any other name is not known.
func iifOutside(name string, neg bool) match {
	n := strings.TrimRight(name, "+*")
	return match{unknown: fmt.Sprintf("matches the input interface %s, which a packet from outside may or may not come in on", name),
		test: func(p *packet) res {
			if name == "lo" || isBridge(n) || p.bridges[name] {
				return of(neg)
			}
			return unk
		}}
}

// isBridge says whether an interface name (or a wildcard's stem) is a Docker bridge's.
func isBridge(n string) bool {
	return n == "docker0" || strings.HasPrefix(n, "br-") || n == "br" || n == "docker" || strings.HasPrefix(n, "docker_gwbridge")
}

// oifIs tests the output interface: the container's bridge when forwarded.
func oifIs(name string, neg bool) match {
	return match{unknown: "matches the output interface " + name + ", and the container's bridge is not known",
		test: func(p *packet) res {
			switch {
			case p.input:
				return of(neg)
			case p.oif == "":
				return unk
			}
			stem, wild := strings.CutSuffix(strings.TrimSuffix(name, "*"), "+")
			wild = wild || strings.HasSuffix(name, "*")
			if wild {
				return of(strings.HasPrefix(p.oif, stem) != neg)
			}
			return of((p.oif == name) != neg)
		}}
}

// dstIn tests the destination address: the container's when forwarded. To the machine itself
// the address is one of its own: a multicast or broadcast prefix is not met, any other is not
// known.
func dstIn(qs []netip.Prefix, neg bool) match {
	special := true
	for _, q := range qs {
		if !q.Addr().IsMulticast() && q != netip.MustParsePrefix("255.255.255.255/32") {
			special = false
		}
	}
	return match{unknown: "matches the destination address, one of the machine's own, which this reader does not know",
		test: func(p *packet) res {
			if p.input {
				if special {
					return of(neg)
				}
				return unk
			}
			in := false
			for _, q := range qs {
				if q.Addr().Is6() == p.v6 && q.Contains(p.dst) {
					in = true
				}
			}
			return of(in != neg)
		}}
}

// portIn tests a port against ranges [lo, hi].
func portIn(rs [][2]uint16, port uint16) bool {
	for _, r := range rs {
		if port >= r[0] && port <= r[1] {
			return true
		}
	}
	return false
}
