package netfilter

import (
	"context"
	"fmt"
)

// xtDriver converges openings into a found plain-iptables firewall: marked rules (-m comment)
// at the head of INPUT (incoming) and of DOCKER-USER, or FORWARD when Docker is absent
// (forwarded, matched on conntrack's original destination port). One iptables-restore
// --noflush per family per change.
//
// Both families: every opening gets its rule in iptables and, where the found firewall filters
// IPv6 too (rules of its own in ip6tables, or a closed INPUT policy there: xtFilters), its twin in
// ip6tables, carrying the same mark. A forwarded opening's IPv6 twin also goes at the head of
// INPUT (xtProxyArgs): IPv6 to an IPv4-only bridge reaches the container through Docker's
// proxy, not its DNAT. A source of one family (a CIDR, the private network's range) has its
// rule in that family's table alone. Where ip6tables filters nothing, IPv6 is as open as the
// found firewall leaves it, and meshd writes no IPv6 rule: an accept there would change nothing
// but leave a table the found firewall never had (see docs/architecture.md).
type xtDriver struct {
	Base
	backend string
}

func (d *xtDriver) Kind() Kind { return KindIptables }

// xtChains4 is where one opening's rule goes in a found plain-iptables firewall's IPv4 table.
func xtChains4(o Opening, x *xtDump) []string {
	switch {
	case o.Path == PathIncoming:
		return []string{"INPUT"}
	case o.Path == PathRouted:
		return []string{"FORWARD"} // not Docker's: it is no published port
	case x.has("DOCKER-USER"):
		return []string{"DOCKER-USER"}
	}
	return []string{"FORWARD"}
}

// xtChains6 is where its twin goes in the IPv6 table: nowhere when that table filters nothing,
// else where IPv4's goes, and a forwarded opening at the head of INPUT too, for the proxy.
func xtChains6(o Opening, x *xtDump) []string {
	if _, _, filters := xtFilters(x); !filters {
		return nil
	}
	chains := xtChains4(o, x)
	if o.Path == PathForwarded {
		chains = append(chains, "INPUT")
	}
	return chains
}

func (d *xtDriver) Converge(ctx context.Context, desired []Opening) (Report, error) {
	d.Mu.Lock()
	defer d.Mu.Unlock()
	want, keys, err := Dedupe(desired)
	if err != nil {
		return Report{}, err
	}
	out, err := xtConverge(ctx, d.Env, d.backend, false, d.Priv, want, keys, xtChains4)
	if err != nil {
		return Report{}, err
	}
	out6, err := xtConverge(ctx, d.Env, d.backend, true, d.Priv, want, keys, xtChains6)
	if err != nil {
		return Report{}, err
	}
	out.Merge(out6)
	return d.Settle(KindIptables, keys, want, out), nil
}

// xtChains are where meshd puts (and so looks for) its marked iptables rules.
var xtChains = map[string]bool{"INPUT": true, "FORWARD": true, "DOCKER-USER": true}

func (r xtRule) Slot() string { return r.Chain + "/" + r.Mark }

// xtWanted is the rule one opening needs at the head of one iptables chain: the line
// iptables-restore inserts, or why there is none.
type xtWanted struct {
	chain string
	o     Opening
	line  string
	err   string
}

func (w xtWanted) Slot() string { return w.chain + "/" + w.o.Mark() }

// xtMarked is the marked rules of a dump in the chains meshd writes to, copies included.
func xtMarked(x *xtDump) []xtRule {
	var have []xtRule
	for _, r := range x.Rules {
		if r.Mark != "" && xtChains[r.Chain] {
			have = append(have, r)
		}
	}
	return have
}

// xtWant decides the rules the openings need in one backend's filter table of one family.
// chainFor names the chains an opening's rule goes in, none when it needs none there; a rule
// whose source is of the other family is not needed either.
func xtWant(x *xtDump, priv Private, want map[string]Opening, keys []string, chainFor func(Opening, *xtDump) []string) []xtWanted {
	var rules []xtWanted
	for _, k := range keys {
		o := want[k]
		for _, ch := range chainFor(o, x) {
			w := xtWanted{chain: ch, o: o}
			var args string
			var err error
			if o.Path == PathForwarded && ch == "INPUT" {
				args, err = xtProxyArgs(o, priv, x.V6)
			} else {
				args, err = xtOpeningArgs(o, priv, x.V6)
			}
			switch {
			case err != nil:
				w.err = err.Error()
			case args == "":
				continue // a source of the other family: nothing to match here
			case !x.has(ch):
				w.err = fmt.Sprintf("chain %s does not exist in %s filter table", ch, xtName(x.Backend, x.V6))
			default:
				w.line = "-I " + ch + " 1 " + args
			}
			rules = append(rules, w)
		}
	}
	return rules
}

// readXTOrEmpty is readXT with an absent table read as an empty one.
func readXTOrEmpty(ctx context.Context, env Env, backend string, v6 bool) (*xtDump, error) {
	x, _, err := readXT(ctx, env, backend, v6)
	if err != nil {
		return nil, err
	}
	if x == nil {
		x = &xtDump{Backend: backend, V6: v6, Policies: map[string]string{}}
	}
	return x, nil
}

// xtConverge makes the marked rules of one iptables backend's filter table in one family (v6:
// ip6tables) equal to what want needs there: read, plan, one iptables-restore --noflush,
// re-read. chainFor names the chains an opening's rule goes in, none when it needs none there.
// A marked rule in a chain meshd writes to that no opening needs is removed, also in a family
// where chainFor now wants nothing: an opening gone, or a table that stopped filtering, leaves no
// accept behind in either family.
func xtConverge(ctx context.Context, env Env, backend string, v6 bool, priv Private, want map[string]Opening, keys []string,
	chainFor func(Opening, *xtDump) []string) (Outcome, error) {
	out := NewOutcome()
	x, err := readXTOrEmpty(ctx, env, backend, v6)
	if err != nil {
		return out, err
	}
	rules := xtWant(x, priv, want, keys, chainFor)
	have := xtMarked(x)
	add, remove := Plan(have, rules)
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
		if have, err = xtApplyAndReread(ctx, env, backend, v6, rules, add, remove, lines, &out); err != nil {
			return out, err
		}
	}
	for _, k := range keys {
		out.Present[k] = out.Failed[k] == ""
	}
	held := HeldSlots(have)
	for _, w := range rules {
		if held[w.Slot()] == 0 {
			out.Present[w.o.Mark()] = false
		}
	}
	return out, nil
}

// xtApplyAndReread writes a plan in one iptables-restore and re-reads the table whatever it
// returned, recording in out what the re-read shows written and the restore's error for
// added rules that did not land. It returns the re-read's marked rules.
func xtApplyAndReread(ctx context.Context, env Env, backend string, v6 bool, rules, add []xtWanted, remove []xtRule, lines []string, out *Outcome) ([]xtRule, error) {
	aerr := xtApply(ctx, env, backend, v6, remove, lines)
	if aerr != nil {
		env.Logger().Warn("iptables batch failed, re-reading", "tool", xtName(backend, v6), "err", aerr)
	}
	x, err := readXTOrEmpty(ctx, env, backend, v6)
	if err != nil {
		return nil, err
	}
	after := xtMarked(x)
	var unheld []xtWanted
	out.Added, out.Removed, unheld = Written(after, rules, add, remove)
	for _, w := range unheld {
		if aerr != nil && w.err == "" {
			out.Failed[w.o.Mark()] = aerr.Error()
		}
	}
	return after, nil
}
