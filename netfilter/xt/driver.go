package xt

import (
	"context"
	"fmt"

	"meshd/netfilter"
)

// driver converges openings into a found plain-iptables firewall: marked rules (-m comment)
// at the head of INPUT (incoming) and of DOCKER-USER, or FORWARD when Docker is absent
// (forwarded, matched on conntrack's original destination port). One iptables-restore
// --noflush per family per change.
//
// Both families: every opening gets its rule in iptables and, where the found firewall filters
// IPv6 too (rules of its own in ip6tables, or a closed INPUT policy there: filtering), its twin in
// ip6tables, carrying the same mark. A forwarded opening's IPv6 twin also goes at the head of
// INPUT (proxyArgs): IPv6 to an IPv4-only bridge reaches the container through Docker's
// proxy, not its DNAT. A source of one family (a CIDR, the private network's range) has its
// rule in that family's table alone. Where ip6tables filters nothing, IPv6 is as open as the
// found firewall leaves it, and meshd writes no IPv6 rule: an accept there would change nothing
// but leave a table the found firewall never had (see docs/architecture.md).
type driver struct {
	netfilter.Base
	backend string
}

// New returns the driver for a found plain-iptables firewall in backend ("nft" or "legacy").
func New(env netfilter.Env, priv netfilter.Private, backend string) netfilter.Driver {
	return &driver{Base: netfilter.NewBase(env, priv), backend: backend}
}

func (d *driver) Kind() netfilter.Kind { return netfilter.KindIptables }

// chains4 is where one opening's rule goes in a found plain-iptables firewall's IPv4 table.
func chains4(o netfilter.Opening, x *Dump) []string {
	switch {
	case o.Path == netfilter.PathIncoming:
		return []string{"INPUT"}
	case o.Path == netfilter.PathRouted:
		return []string{"FORWARD"} // not Docker's: it is no published port
	case x.Has("DOCKER-USER"):
		return []string{"DOCKER-USER"}
	}
	return []string{"FORWARD"}
}

// chains6 is where its twin goes in the IPv6 table: nowhere when that table filters nothing,
// else where IPv4's goes, and a forwarded opening at the head of INPUT too, for the proxy.
func chains6(o netfilter.Opening, x *Dump) []string {
	if _, _, filters := filtering(x); !filters {
		return nil
	}
	chains := chains4(o, x)
	if o.Path == netfilter.PathForwarded {
		chains = append(chains, "INPUT")
	}
	return chains
}

func (d *driver) Converge(ctx context.Context, desired []netfilter.Opening) (netfilter.Report, error) {
	d.Mu.Lock()
	defer d.Mu.Unlock()
	want, keys, err := netfilter.Dedupe(desired)
	if err != nil {
		return netfilter.Report{}, err
	}
	out, err := Converge(ctx, d.Env, d.backend, false, d.Priv, want, keys, chains4)
	if err != nil {
		return netfilter.Report{}, err
	}
	out6, err := Converge(ctx, d.Env, d.backend, true, d.Priv, want, keys, chains6)
	if err != nil {
		return netfilter.Report{}, err
	}
	out.Merge(out6)
	return d.Settle(netfilter.KindIptables, keys, want, out), nil
}

// meshdChains are where meshd puts (and so looks for) its marked iptables rules.
var meshdChains = map[string]bool{"INPUT": true, "FORWARD": true, "DOCKER-USER": true}

func (r Rule) Slot() string { return r.Chain + "/" + r.Mark }

// wanted is the rule one opening needs at the head of one iptables chain: the line
// iptables-restore inserts, or why there is none.
type wanted struct {
	chain string
	o     netfilter.Opening
	line  string
	err   string
}

func (w wanted) Slot() string { return w.chain + "/" + w.o.Mark() }

// markedRules is the marked rules of a dump in the chains meshd writes to, copies included.
func markedRules(x *Dump) []Rule {
	var have []Rule
	for _, r := range x.Rules {
		if r.Mark != "" && meshdChains[r.Chain] {
			have = append(have, r)
		}
	}
	return have
}

// wantedRules decides the rules the openings need in one backend's filter table of one family.
// chainFor names the chains an opening's rule goes in, none when it needs none there; a rule
// whose source is of the other family is not needed either.
func wantedRules(x *Dump, priv netfilter.Private, want map[string]netfilter.Opening, keys []string, chainFor func(netfilter.Opening, *Dump) []string) []wanted {
	var rules []wanted
	for _, k := range keys {
		o := want[k]
		for _, ch := range chainFor(o, x) {
			w := wanted{chain: ch, o: o}
			var args string
			var err error
			if o.Path == netfilter.PathForwarded && ch == "INPUT" {
				args, err = proxyArgs(o, priv, x.V6)
			} else {
				args, err = openingArgs(o, priv, x.V6)
			}
			switch {
			case err != nil:
				w.err = err.Error()
			case args == "":
				continue // a source of the other family: nothing to match here
			case !x.Has(ch):
				w.err = fmt.Sprintf("chain %s does not exist in %s filter table", ch, Name(x.Backend, x.V6))
			default:
				w.line = "-I " + ch + " 1 " + args
			}
			rules = append(rules, w)
		}
	}
	return rules
}

// readOrEmpty is Read with an absent table read as an empty one.
func readOrEmpty(ctx context.Context, env netfilter.Env, backend string, v6 bool) (*Dump, error) {
	x, _, err := Read(ctx, env, backend, v6)
	if err != nil {
		return nil, err
	}
	if x == nil {
		x = &Dump{Backend: backend, V6: v6, Policies: map[string]string{}}
	}
	return x, nil
}

// Converge makes the marked rules of one iptables backend's filter table in one family (v6:
// ip6tables) equal to what want needs there: read, plan, one iptables-restore --noflush,
// re-read. chainFor names the chains an opening's rule goes in, none when it needs none there.
// A marked rule in a chain meshd writes to that no opening needs is removed, also in a family
// where chainFor now wants nothing: an opening gone, or a table that stopped filtering, leaves no
// accept behind in either family.
func Converge(ctx context.Context, env netfilter.Env, backend string, v6 bool, priv netfilter.Private, want map[string]netfilter.Opening, keys []string,
	chainFor func(netfilter.Opening, *Dump) []string) (netfilter.Outcome, error) {
	out := netfilter.NewOutcome()
	x, err := readOrEmpty(ctx, env, backend, v6)
	if err != nil {
		return out, err
	}
	rules := wantedRules(x, priv, want, keys, chainFor)
	have := markedRules(x)
	add, remove := netfilter.Plan(have, rules)
	var lines []string
	for _, w := range add {
		out.MissingBefore[w.o.Mark()] = true
		if w.err != "" {
			out.Failed[w.o.Mark()] = w.err
			continue
		}
		lines = append(lines, w.line)
	}
	if len(lines)+len(remove) > 0 {
		if have, err = applyAndReread(ctx, env, backend, v6, rules, add, remove, lines, &out); err != nil {
			return out, err
		}
	}
	for _, k := range keys {
		out.Present[k] = out.Failed[k] == ""
	}
	held := netfilter.HeldSlots(have)
	for _, w := range rules {
		if held[w.Slot()] == 0 {
			out.Present[w.o.Mark()] = false
		}
	}
	return out, nil
}

// applyAndReread writes a plan in one iptables-restore and re-reads the table whatever it
// returned, recording in out what the re-read shows written and the restore's error for
// added rules that did not land. It returns the re-read's marked rules.
func applyAndReread(ctx context.Context, env netfilter.Env, backend string, v6 bool, rules, add []wanted, remove []Rule, lines []string, out *netfilter.Outcome) ([]Rule, error) {
	aerr := apply(ctx, env, backend, v6, remove, lines)
	if aerr != nil {
		env.Logger().Warn("iptables batch failed, re-reading", "tool", Name(backend, v6), "err", aerr)
	}
	x, err := readOrEmpty(ctx, env, backend, v6)
	if err != nil {
		return nil, err
	}
	after := markedRules(x)
	var unheld []wanted
	out.Added, out.Removed, unheld = netfilter.Written(after, rules, add, remove)
	for _, w := range unheld {
		if aerr != nil && w.err == "" {
			out.Failed[w.o.Mark()] = aerr.Error()
		}
	}
	return after, nil
}
