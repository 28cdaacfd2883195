package nft

import (
	"context"
	"errors"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"meshd/netfilter"
)

// driver converges openings into a found nftables ruleset: a rule carrying a meshd comment
// at the head of every found filter chain at the input hook (incoming) or the forward hook
// (forwarded). Every base chain at a hook must accept for a packet to pass, so each gets one.
type driver struct {
	netfilter.Base
	found netfilter.Found
}

// New returns the driver for a found nftables ruleset.
func New(env netfilter.Env, priv netfilter.Private, found netfilter.Found) netfilter.Driver {
	return &driver{Base: netfilter.NewBase(env, priv), found: found}
}

func (d *driver) Kind() netfilter.Kind { return netfilter.KindNftables }

// slotOf names where a marked rule lives: family, table, chain and mark.
func slotOf(ch *nftables.Chain, mark string) string {
	return netfilter.FamilyName(ch.Table.Family) + "/" + ch.Table.Name + "/" + ch.Name + "/" + mark
}

// marked is one meshd-marked rule read from a found chain.
type marked struct {
	chain  *nftables.Chain
	mark   string
	handle uint64
}

func (r marked) Slot() string { return slotOf(r.chain, r.mark) }

// wanted is the rule one opening needs at the head of one found chain: its expressions,
// or why they cannot be built.
type wanted struct {
	chain *nftables.Chain
	o     netfilter.Opening
	exprs []expr.Any
	err   error
}

func (w wanted) Slot() string { return slotOf(w.chain, w.o.Mark()) }

// readMarked reads the marked rules of the target chains, copies included.
func readMarked(env netfilter.Env, chains []*nftables.Chain) ([]marked, error) {
	var have []marked
	for _, ch := range chains {
		rules, err := env.ListRules(ch)
		if err != nil {
			return nil, err
		}
		for _, r := range rules {
			if m := r.Comment; len(m) > len(netfilter.MarkPrefix) && m[:len(netfilter.MarkPrefix)] == netfilter.MarkPrefix {
				have = append(have, marked{chain: ch, mark: m, handle: r.Handle})
			}
		}
	}
	return have, nil
}

// wantedRules decides the rules the openings need: each opening in every found chain at its
// path's hook, except a chain of a family its source cannot be matched in (an IPv6 prefix in
// an ip table), which needs none. unfiltered names the openings whose path no found chain
// filters.
func wantedRules(v *View, want map[string]netfilter.Opening, keys []string, priv netfilter.Private) (rules []wanted, unfiltered map[string]bool) {
	unfiltered = map[string]bool{}
	for _, k := range keys {
		o := want[k]
		on := v.input
		if o.Path == netfilter.PathForwarded || o.Path == netfilter.PathRouted {
			on = v.forward
		}
		if len(on) == 0 {
			unfiltered[k] = true
		}
		for _, ch := range on {
			ex, err := netfilter.OpeningExprs(ch.Table.Family, o, priv)
			if err == nil && ex == nil {
				continue // a prefix of the other family: nothing to match in this table
			}
			rules = append(rules, wanted{chain: ch, o: o, exprs: ex, err: err})
		}
	}
	return rules, unfiltered
}

func (d *driver) Converge(ctx context.Context, desired []netfilter.Opening) (netfilter.Report, error) {
	d.Mu.Lock()
	defer d.Mu.Unlock()
	want, keys, err := netfilter.Dedupe(desired)
	if err != nil {
		return netfilter.Report{}, err
	}
	c, closeConn, err := d.Env.NftConn()
	if err != nil {
		return netfilter.Report{}, err
	}
	defer closeConn()
	v, err := ReadView(c, d.Env)
	if err != nil {
		return netfilter.Report{}, err
	}
	chains := append(append([]*nftables.Chain{}, v.input...), v.forward...)
	have, err := readMarked(d.Env, chains)
	if err != nil {
		return netfilter.Report{}, err
	}

	rules, unfiltered := wantedRules(v, want, keys, d.Priv)
	add, remove := netfilter.Plan(have, rules)
	out := netfilter.NewOutcome()
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
			return netfilter.Report{}, err
		}
	}

	held := netfilter.HeldSlots(have)
	for _, k := range keys {
		out.Present[k] = out.Failed[k] == ""
	}
	for _, w := range rules {
		if held[w.Slot()] == 0 {
			out.Present[w.o.Mark()] = false
		}
	}
	r := d.Settle(netfilter.KindNftables, keys, want, out)
	for i := range r.Openings {
		if unfiltered[r.Openings[i].Opening.Mark()] && r.Openings[i].State != netfilter.Failed {
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
func (d *driver) apply(chains []*nftables.Chain, have []marked, rules, add []wanted, remove []marked, out *netfilter.Outcome) ([]marked, error) {
	dels := make([]netfilter.RuleDelete, 0, len(remove))
	for _, r := range remove {
		dels = append(dels, netfilter.RuleDelete{Chain: r.chain, Handle: r.handle})
	}
	adds := make([]netfilter.RuleInsert, 0, len(add))
	for _, w := range add {
		if w.err == nil {
			adds = append(adds, netfilter.RuleInsert{Chain: w.chain, Exprs: w.exprs, Comment: w.o.Mark()})
		}
	}
	ferr := d.Env.WriteRules(dels, adds)
	var after []marked
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
				after = append(after, marked{chain: w.chain, mark: w.o.Mark()}) // its handle is read next pass
			}
		}
	} else {
		d.Env.Logger().Warn("nftables batch failed, re-reading", "adds", len(add), "deletes", len(remove), "err", ferr)
		var rerr error
		if after, rerr = readMarked(d.Env, chains); rerr != nil {
			return nil, errors.Join(ferr, rerr)
		}
	}
	var unheld []wanted
	out.Added, out.Removed, unheld = netfilter.Written(after, rules, add, remove)
	for _, w := range unheld {
		if ferr != nil && out.Failed[w.o.Mark()] == "" {
			out.Failed[w.o.Mark()] = ferr.Error()
		}
	}
	return after, nil
}
