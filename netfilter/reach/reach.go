package reach

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"meshd/netfilter"
	"meshd/netfilter/xt"
)

// Port is a port a container publishes: on every address of the machine (HostIP "") or on one.
type Port struct {
	HostIP   string `json:"host_ip,omitempty"`
	HostPort uint16 `json:"host_port"`
	Proto    string `json:"proto"` // tcp or udp
}

func (p Port) String() string {
	s := fmt.Sprintf("%d/%s", p.HostPort, p.Proto)
	if p.HostIP != "" {
		s = p.HostIP + ":" + s
	}
	return s
}

// Anywhere is the one From of a port every source reaches.
const Anywhere = "anywhere"

// Answer is who outside reaches a published port through the found firewall.
type Answer struct {
	Port Port `json:"port"`
	// From is Anywhere alone, or the source prefixes that reach it (IPv4 and IPv6 apart: 0.0.0.0/0
	// is all of IPv4 and none of IPv6); empty when nobody does, or when Refused.
	From []string `json:"from,omitempty"`
	// ClosedBy names the rules and policies that stop the rest (all of it, when From is empty).
	ClosedBy []string `json:"closed_by,omitempty"`
	// Refused names the rule the answer depends on and that is not understood: no answer.
	Refused string `json:"refused,omitempty"`
}

// Closed says whether nobody outside reaches the port.
func (a Answer) Closed() bool { return a.Refused == "" && len(a.From) == 0 }

// Ruleset is the machine's found firewall as a packet from outside meets it.
type Ruleset struct {
	tables  []*table
	dnat    []dnat
	bridges map[string]bool
}

// Parse makes a Ruleset of iptables-save dumps (filter and nat tables, any backend and family)
// and of `nft -j list ruleset` with `nft -a list ruleset` (either may be empty: no nftables).
func Parse(filters, nats []*xt.Dump, nftJSON, nftText []byte) (*Ruleset, error) {
	rs := &Ruleset{bridges: map[string]bool{}}
	for _, d := range filters {
		rs.tables = append(rs.tables, fromDump(d))
	}
	for _, d := range nats {
		rs.dnat = append(rs.dnat, dnats(d, rs.bridges)...)
	}
	if len(strings.TrimSpace(string(nftJSON))) > 0 {
		ts, err := fromNftJSON(nftJSON, nftTexts(nftText))
		if err != nil {
			return nil, err
		}
		rs.tables = append(rs.tables, ts...)
	}
	return rs, nil
}

// Read reads the found firewall in env: the filter and nat tables of iptables-nft and
// iptables-legacy in both families, and the nftables ruleset. A table it cannot read is an error.
func Read(ctx context.Context, env netfilter.Env) (*Ruleset, error) {
	var filters, nats []*xt.Dump
	for _, b := range []string{"nft", "legacy"} {
		for _, v6 := range []bool{false, true} {
			for _, tab := range []string{"filter", "nat"} {
				d, ok, err := xt.ReadTable(ctx, env, b, v6, tab)
				if err != nil {
					return nil, err
				}
				if !ok {
					continue
				}
				if tab == "filter" {
					filters = append(filters, d)
				} else {
					nats = append(nats, d)
				}
			}
		}
	}
	js, err := env.Run(ctx, "nft", "-j", "list", "ruleset")
	if err != nil {
		if strings.Contains(err.Error(), "executable file not found") || strings.Contains(err.Error(), "exit status 127") {
			return Parse(filters, nats, nil, nil)
		}
		return nil, fmt.Errorf("read the nftables ruleset: %w", err)
	}
	text, err := env.Run(ctx, "nft", "-a", "list", "ruleset")
	if err != nil {
		return nil, fmt.Errorf("read the nftables ruleset: %w", err)
	}
	return Parse(filters, nats, js, text)
}

// Reach answers who outside reaches p, in each family along the path Docker gives it.
func (rs *Ruleset) Reach(p Port) Answer {
	a := Answer{Port: p}
	var got [2]set
	for i, v6 := range []bool{false, true} {
		if ip, err := netip.ParseAddr(p.HostIP); err == nil && ip.Is6() != v6 {
			continue // published on an address of the other family only
		}
		s, closed, err := rs.family(p, v6)
		if err != nil {
			var r *refusal
			if errors.As(err, &r) {
				a.Refused = r.Error()
			} else {
				a.Refused = err.Error()
			}
			a.ClosedBy = nil
			return a
		}
		got[i] = s
		for _, c := range closed {
			if !slices.Contains(a.ClosedBy, c) {
				a.ClosedBy = append(a.ClosedBy, c)
			}
		}
	}
	if got[0].full() && got[1].full() {
		a.From = []string{Anywhere}
		return a
	}
	for _, s := range got {
		for _, q := range s {
			a.From = append(a.From, q.String())
		}
	}
	return a
}

// family is the sources of one family that reach p, and what stops the others.
func (rs *Ruleset) family(p Port, v6 bool) (set, []string, error) {
	pk := packet{v6: v6, proto: p.Proto, input: true, dport: p.HostPort, origDport: p.HostPort, bridges: rs.bridges}
	for _, n := range rs.dnat {
		if n.v6 != v6 {
			continue
		}
		ok, err := n.meets(p)
		if err != nil {
			return nil, nil, err
		}
		if ok {
			pk.input, pk.dst, pk.dport, pk.oif = false, n.to.Addr(), n.to.Port(), n.bridge
			if pk.oif == "" {
				pk.oif = rs.bridgeOf(n.to.Addr())
			}
			break
		}
	}
	reached := all(v6)
	var closed []string
	for _, t := range rs.tables {
		if (v6 && !t.v6) || (!v6 && !t.v4) {
			continue
		}
		if strings.Contains(t.name, "firewalld") {
			return nil, nil, &refusal{where: t.name, why: "firewalld's zones are not read"}
		}
		base := t.fwd
		if pk.input {
			base = t.input
		}
		for _, c := range base {
			o, err := t.run(c, &pk, all(v6), 0)
			if err != nil {
				return nil, nil, err
			}
			reached = reached.within(o.accepted)
			closed = append(closed, o.dropped...)
		}
	}
	if reached.full() {
		closed = nil
	}
	return reached, closed, nil
}

// within is s ∩ t.
func (s set) within(t set) set {
	var out set
	for _, q := range t {
		out = out.or(s.and(q))
	}
	return out
}

// bridgeOf is the interface Docker's filter rules forward addr on ("-d ADDR -o BRIDGE" in its
// DOCKER chain), "" when none says.
func (rs *Ruleset) bridgeOf(addr netip.Addr) string {
	for _, t := range rs.tables {
		c := t.chains["DOCKER"]
		if c == nil {
			continue
		}
		for _, r := range c.rules {
			f := tokens(r.where)
			if !slices.Contains(f, "-d") || !slices.Contains(f, "-o") {
				continue
			}
			d := f[slices.Index(f, "-d")+1]
			if ps, err := prefixes(d); err == nil && len(ps) == 1 && ps[0].Contains(addr) {
				if i := slices.Index(f, "-o"); i+1 < len(f) && (i == 0 || f[i-1] != "!") {
					return f[i+1]
				}
			}
		}
	}
	return ""
}
