package netfilter

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/nftables"
)

// nftDriver converges openings into a found nftables ruleset: a rule carrying a meshd comment
// at the head of every found filter chain at the input hook (incoming) or the forward hook
// (forwarded). Every base chain at a hook must accept for a packet to pass, so each gets one.
type nftDriver struct {
	base
	found Found
}

func (d *nftDriver) Kind() Kind { return KindNftables }

type nftSlot struct {
	chain *nftables.Chain
	mark  string
}

func (s nftSlot) key() string {
	return familyName(s.chain.Table.Family) + "/" + s.chain.Table.Name + "/" + s.chain.Name + "/" + s.mark
}

// nftRead reads the marked rules of the target chains.
func nftRead(env Env, chains []*nftables.Chain) (map[string]*nftables.Rule, error) {
	have := map[string]*nftables.Rule{}
	for _, ch := range chains {
		rules, err := env.listRules(ch)
		if err != nil {
			return nil, err
		}
		for _, r := range rules {
			if m := r.Comment; len(m) > len(markPrefix) && m[:len(markPrefix)] == markPrefix {
				have[nftSlot{ch, m}.key()] = &nftables.Rule{Table: ch.Table, Chain: ch, Handle: r.Handle, UserData: commentData(m)}
			}
		}
	}
	return have, nil
}

func (d *nftDriver) Converge(ctx context.Context, desired []Opening) (Report, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	want, keys, err := dedupe(desired)
	if err != nil {
		return Report{}, err
	}
	c, closeConn, err := d.env.nftConn()
	if err != nil {
		return Report{}, err
	}
	defer closeConn()
	v, err := readNftView(c, d.env)
	if err != nil {
		return Report{}, err
	}
	chains := append(append([]*nftables.Chain{}, v.input...), v.forward...)
	have, err := nftRead(d.env, chains)
	if err != nil {
		return Report{}, err
	}

	// The wanted slots: every opening in every chain of its path.
	type slot struct {
		nftSlot
		o Opening
	}
	var wantSlots []slot
	wantKeys := map[string]bool{}
	failed := map[string]string{}
	unfiltered := map[string]bool{}
	for _, k := range keys {
		o := want[k]
		on := v.input
		if o.Path == PathForwarded {
			on = v.forward
		}
		if len(on) == 0 {
			unfiltered[k] = true // the found ruleset does not filter this path
		}
		for _, ch := range on {
			s := slot{nftSlot{ch, k}, o}
			wantSlots = append(wantSlots, s)
			wantKeys[s.key()] = true
		}
	}

	missingBefore := map[string]bool{}
	var adds []slot
	for _, s := range wantSlots {
		if _, ok := have[s.key()]; !ok {
			adds = append(adds, s)
			missingBefore[s.mark] = true
		}
	}
	var dels []*nftables.Rule
	for key, r := range have {
		if !wantKeys[key] {
			dels = append(dels, r)
		}
	}

	added, removed := 0, 0
	if len(adds)+len(dels) > 0 {
		for _, r := range dels {
			if err := c.DelRule(r); err != nil {
				return Report{}, fmt.Errorf("delete rule %q from %s %s: %w", ruleComment(r), tableName(r.Table), r.Chain.Name, err)
			}
		}
		for _, s := range adds {
			ex, err := openingExprs(s.chain.Table.Family, s.o, d.priv)
			if err != nil {
				failed[s.mark] = err.Error()
				continue
			}
			if ex == nil {
				continue // a prefix of the other family: nothing to match in this table
			}
			// Position 0 with no handle inserts at the head of the chain, ahead of the
			// found ruleset's own final drop or reject.
			c.InsertRule(&nftables.Rule{Table: s.chain.Table, Chain: s.chain, Exprs: ex, UserData: commentData(s.mark)})
		}
		ferr := c.Flush()
		if ferr != nil {
			d.env.log().Warn("nftables batch failed, re-reading", "adds", len(adds), "deletes", len(dels), "err", ferr)
		}
		// Always re-read: a failed batch may still have committed.
		after, rerr := nftRead(d.env, chains)
		if rerr != nil {
			return Report{}, errors.Join(ferr, rerr)
		}
		for _, s := range adds {
			if _, ok := after[s.key()]; ok {
				added++
			} else if ferr != nil && failed[s.mark] == "" {
				failed[s.mark] = ferr.Error()
			}
		}
		for _, r := range dels {
			if _, ok := after[nftSlot{r.Chain, ruleComment(r)}.key()]; !ok {
				removed++
			}
		}
		have = after
	}

	present := map[string]bool{}
	for _, k := range keys {
		present[k] = failed[k] == ""
	}
	for _, s := range wantSlots {
		if _, ok := have[s.key()]; !ok {
			if ex, _ := openingExprs(s.chain.Table.Family, s.o, d.priv); ex != nil {
				present[s.mark] = false
			}
		}
	}
	r := d.settle(KindNftables, keys, want, present, missingBefore, failed, added, removed)
	for i := range r.Openings {
		if unfiltered[r.Openings[i].Opening.Mark()] && r.Openings[i].State != Failed {
			r.Openings[i].Reason = "the found ruleset does not filter this path"
		}
	}
	return r, nil
}
