package netfilter

import (
	"context"
	"errors"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
)

// nftDriver converges openings into a found nftables ruleset: a rule carrying a meshd comment
// at the head of every found filter chain at the input hook (incoming) or the forward hook
// (forwarded). Every base chain at a hook must accept for a packet to pass, so each gets one.
type nftDriver struct {
	Base
	found Found
}

func (d *nftDriver) Kind() Kind { return KindNftables }

// nftSlot names where a marked rule lives: family, table, chain and mark.
func nftSlot(ch *nftables.Chain, mark string) string {
	return FamilyName(ch.Table.Family) + "/" + ch.Table.Name + "/" + ch.Name + "/" + mark
}

// nftMarked is one meshd-marked rule read from a found chain.
type nftMarked struct {
	chain  *nftables.Chain
	mark   string
	handle uint64
}

func (r nftMarked) Slot() string { return nftSlot(r.chain, r.mark) }

// nftWanted is the rule one opening needs at the head of one found chain: its expressions,
// or why they cannot be built.
type nftWanted struct {
	chain *nftables.Chain
	o     Opening
	exprs []expr.Any
	err   error
}

func (w nftWanted) Slot() string { return nftSlot(w.chain, w.o.Mark()) }

// nftRead reads the marked rules of the target chains, copies included.
func nftRead(env Env, chains []*nftables.Chain) ([]nftMarked, error) {
	var have []nftMarked
	for _, ch := range chains {
		rules, err := env.ListRules(ch)
		if err != nil {
			return nil, err
		}
		for _, r := range rules {
			if m := r.Comment; len(m) > len(MarkPrefix) && m[:len(MarkPrefix)] == MarkPrefix {
				have = append(have, nftMarked{chain: ch, mark: m, handle: r.Handle})
			}
		}
	}
	return have, nil
}

// nftWant decides the rules the openings need: each opening in every found chain at its
// path's hook, except a chain of a family its source cannot be matched in (an IPv6 prefix in
// an ip table), which needs none. unfiltered names the openings whose path no found chain
// filters.
func nftWant(v *nftView, want map[string]Opening, keys []string, priv Private) (rules []nftWanted, unfiltered map[string]bool) {
	unfiltered = map[string]bool{}
	for _, k := range keys {
		o := want[k]
		on := v.input
		if o.Path == PathForwarded || o.Path == PathRouted {
			on = v.forward
		}
		if len(on) == 0 {
			unfiltered[k] = true
		}
		for _, ch := range on {
			ex, err := OpeningExprs(ch.Table.Family, o, priv)
			if err == nil && ex == nil {
				continue // a prefix of the other family: nothing to match in this table
			}
			rules = append(rules, nftWanted{chain: ch, o: o, exprs: ex, err: err})
		}
	}
	return rules, unfiltered
}

func (d *nftDriver) Converge(ctx context.Context, desired []Opening) (Report, error) {
	d.Mu.Lock()
	defer d.Mu.Unlock()
	want, keys, err := Dedupe(desired)
	if err != nil {
		return Report{}, err
	}
	c, closeConn, err := d.Env.NftConn()
	if err != nil {
		return Report{}, err
	}
	defer closeConn()
	v, err := readNftView(c, d.Env)
	if err != nil {
		return Report{}, err
	}
	chains := append(append([]*nftables.Chain{}, v.input...), v.forward...)
	have, err := nftRead(d.Env, chains)
	if err != nil {
		return Report{}, err
	}

	rules, unfiltered := nftWant(v, want, keys, d.Priv)
	add, remove := Plan(have, rules)
	out := NewOutcome()
	writes := len(remove)
	for _, w := range add {
		out.MissingBefore[w.o.Mark()] = true
		if w.err != nil {
			out.Failed[w.o.Mark()] = w.err.Error()
		} else {
			writes++
		}
	}
	if writes > 0 {
		if have, err = d.apply(chains, have, rules, add, remove, &out); err != nil {
			return Report{}, err
		}
	}

	held := HeldSlots(have)
	for _, k := range keys {
		out.Present[k] = out.Failed[k] == ""
	}
	for _, w := range rules {
		if held[w.Slot()] == 0 {
			out.Present[w.o.Mark()] = false
		}
	}
	r := d.Settle(KindNftables, keys, want, out)
	for i := range r.Openings {
		if unfiltered[r.Openings[i].Opening.Mark()] && r.Openings[i].State != Failed {
			r.Openings[i].Reason = "the found ruleset does not filter this path"
		}
	}
	return r, nil
}

// apply writes a plan in one batch (writeRules: one acknowledgement, not one per rule). When
// the kernel acknowledges the batch, the chains hold what they held less the deleted rules and
// plus the inserted ones: that is returned without reading them again. When the batch fails it
// re-reads the chains, since a failed batch may still have committed with google/nftables'
// own conn (DESIGN.md, traps) and a re-read is the only word on what landed; it records the
// batch's error for added rules that did not land. Adds that could not be built (w.err) are
// skipped: Converge has recorded them failed.
func (d *nftDriver) apply(chains []*nftables.Chain, have []nftMarked, rules, add []nftWanted, remove []nftMarked, out *Outcome) ([]nftMarked, error) {
	dels := make([]RuleDelete, 0, len(remove))
	for _, r := range remove {
		dels = append(dels, RuleDelete{Chain: r.chain, Handle: r.handle})
	}
	adds := make([]RuleInsert, 0, len(add))
	for _, w := range add {
		if w.err == nil {
			adds = append(adds, RuleInsert{Chain: w.chain, Exprs: w.exprs, Comment: w.o.Mark()})
		}
	}
	ferr := d.Env.WriteRules(dels, adds)
	var after []nftMarked
	if ferr == nil {
		gone := map[uint64]bool{}
		for _, r := range remove {
			gone[r.handle] = true
		}
		for _, h := range have {
			if !gone[h.handle] {
				after = append(after, h)
			}
		}
		for _, w := range add {
			if w.err == nil {
				after = append(after, nftMarked{chain: w.chain, mark: w.o.Mark()}) // its handle is read next pass
			}
		}
	} else {
		d.Env.Logger().Warn("nftables batch failed, re-reading", "adds", len(add), "deletes", len(remove), "err", ferr)
		var rerr error
		if after, rerr = nftRead(d.Env, chains); rerr != nil {
			return nil, errors.Join(ferr, rerr)
		}
	}
	var unheld []nftWanted
	out.Added, out.Removed, unheld = Written(after, rules, add, remove)
	for _, w := range unheld {
		if ferr != nil && out.Failed[w.o.Mark()] == "" {
			out.Failed[w.o.Mark()] = ferr.Error()
		}
	}
	return after, nil
}
