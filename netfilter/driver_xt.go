package netfilter

import (
	"context"
	"fmt"
)

// xtDriver converges openings into a found plain-iptables firewall: marked rules (-m comment)
// at the head of INPUT (incoming) and of DOCKER-USER, or FORWARD when Docker is absent
// (forwarded, matched on conntrack's original destination port). One iptables-restore
// --noflush per change.
type xtDriver struct {
	base
	backend string
}

func (d *xtDriver) Kind() Kind { return KindIptables }

func (d *xtDriver) Converge(ctx context.Context, desired []Opening) (Report, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	want, keys, err := dedupe(desired)
	if err != nil {
		return Report{}, err
	}
	out, err := xtConverge(ctx, d.env, d.backend, d.priv, want, keys, func(o Opening, x *xtDump) string {
		if o.Path == PathIncoming {
			return "INPUT"
		}
		if o.Path == PathRouted {
			return "FORWARD" // not Docker's: it is no published port
		}
		if x.has("DOCKER-USER") {
			return "DOCKER-USER"
		}
		return "FORWARD"
	})
	if err != nil {
		return Report{}, err
	}
	return d.settle(KindIptables, keys, want, out), nil
}

// xtChains are where meshd puts (and so looks for) its marked iptables rules.
var xtChains = map[string]bool{"INPUT": true, "FORWARD": true, "DOCKER-USER": true}

func (r xtRule) slot() string { return r.Chain + "/" + r.Mark }

// xtWanted is the rule one opening needs at the head of one iptables chain: the line
// iptables-restore inserts, or why there is none.
type xtWanted struct {
	chain string
	o     Opening
	line  string
	err   string
}

func (w xtWanted) slot() string { return w.chain + "/" + w.o.Mark() }

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

// xtWant decides the rules the openings need in one backend's filter table. chainFor names
// the chain an opening's rule goes in, or "" when it needs none there.
func xtWant(x *xtDump, priv Private, want map[string]Opening, keys []string, chainFor func(Opening, *xtDump) string) []xtWanted {
	var rules []xtWanted
	for _, k := range keys {
		o := want[k]
		ch := chainFor(o, x)
		if ch == "" {
			continue
		}
		w := xtWanted{chain: ch, o: o}
		args, err := xtOpeningArgs(o, priv)
		switch {
		case err != nil:
			w.err = err.Error()
		case !x.has(ch):
			w.err = fmt.Sprintf("chain %s does not exist in iptables-%s filter table", ch, x.Backend)
		default:
			w.line = "-I " + ch + " 1 " + args
		}
		rules = append(rules, w)
	}
	return rules
}

// readXTOrEmpty is readXT with an absent table read as an empty one.
func readXTOrEmpty(ctx context.Context, env Env, backend string) (*xtDump, error) {
	x, _, err := readXT(ctx, env, backend)
	if err != nil {
		return nil, err
	}
	if x == nil {
		x = &xtDump{Backend: backend, Policies: map[string]string{}}
	}
	return x, nil
}

// xtConverge makes the marked rules of one iptables backend's filter table equal to what
// want needs there: read, plan, one iptables-restore --noflush, re-read. chainFor names the
// chain an opening's rule goes in, or "" when it needs none there.
func xtConverge(ctx context.Context, env Env, backend string, priv Private, want map[string]Opening, keys []string,
	chainFor func(Opening, *xtDump) string) (outcome, error) {
	out := newOutcome()
	x, err := readXTOrEmpty(ctx, env, backend)
	if err != nil {
		return out, err
	}
	rules := xtWant(x, priv, want, keys, chainFor)
	have := xtMarked(x)
	add, remove := plan(have, rules)
	var lines []string
	for _, w := range add {
		out.missingBefore[w.o.Mark()] = true
		if w.err != "" {
			out.failed[w.o.Mark()] = w.err
			continue
		}
		lines = append(lines, w.line)
	}
	if len(lines)+len(remove) > 0 {
		if have, err = xtApplyAndReread(ctx, env, backend, rules, add, remove, lines, &out); err != nil {
			return out, err
		}
	}
	for _, k := range keys {
		out.present[k] = out.failed[k] == ""
	}
	held := heldSlots(have)
	for _, w := range rules {
		if held[w.slot()] == 0 {
			out.present[w.o.Mark()] = false
		}
	}
	return out, nil
}

// xtApplyAndReread writes a plan in one iptables-restore and re-reads the table whatever it
// returned, recording in out what the re-read shows written and the restore's error for
// added rules that did not land. It returns the re-read's marked rules.
func xtApplyAndReread(ctx context.Context, env Env, backend string, rules, add []xtWanted, remove []xtRule, lines []string, out *outcome) ([]xtRule, error) {
	aerr := xtApply(ctx, env, backend, remove, lines)
	if aerr != nil {
		env.log().Warn("iptables batch failed, re-reading", "backend", backend, "err", aerr)
	}
	x, err := readXTOrEmpty(ctx, env, backend)
	if err != nil {
		return nil, err
	}
	after := xtMarked(x)
	var unheld []xtWanted
	out.added, out.removed, unheld = written(after, rules, add, remove)
	for _, w := range unheld {
		if aerr != nil && w.err == "" {
			out.failed[w.o.Mark()] = aerr.Error()
		}
	}
	return after, nil
}
