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
	res, err := xtConverge(ctx, d.env, d.backend, d.priv, want, keys, func(o Opening, x *xtDump) string {
		if o.Path == PathIncoming {
			return "INPUT"
		}
		if x.has("DOCKER-USER") {
			return "DOCKER-USER"
		}
		return "FORWARD"
	})
	if err != nil {
		return Report{}, err
	}
	return d.settle(KindIptables, keys, want, res.present, res.missingBefore, res.failed, res.added, res.removed), nil
}

type xtResult struct {
	present, missingBefore map[string]bool
	failed                 map[string]string
	added, removed         int
}

// xtChains are where meshd puts (and so looks for) its marked iptables rules.
var xtChains = map[string]bool{"INPUT": true, "FORWARD": true, "DOCKER-USER": true}

// xtConverge makes the marked rules of one iptables backend's filter table equal to want.
// chainFor names the chain an opening's rule goes in, or "" when it needs none there.
func xtConverge(ctx context.Context, env Env, backend string, priv Private, want map[string]Opening, keys []string,
	chainFor func(Opening, *xtDump) string) (xtResult, error) {
	res := xtResult{present: map[string]bool{}, missingBefore: map[string]bool{}, failed: map[string]string{}}
	x, _, err := readXT(ctx, env, backend)
	if err != nil {
		return res, err
	}
	if x == nil {
		x = &xtDump{Backend: backend, Policies: map[string]string{}}
	}
	marked := func(x *xtDump) map[string]xtRule {
		m := map[string]xtRule{}
		for _, r := range x.Rules {
			if r.Mark != "" && xtChains[r.Chain] {
				m[r.Chain+"/"+r.Mark] = r
			}
		}
		return m
	}
	have := marked(x)
	wantSlot := map[string]string{} // slot -> mark
	var adds []string
	addedSlots := map[string]string{}
	for _, k := range keys {
		o := want[k]
		ch := chainFor(o, x)
		if ch == "" {
			continue
		}
		slot := ch + "/" + k
		wantSlot[slot] = k
		if _, ok := have[slot]; ok {
			continue
		}
		res.missingBefore[k] = true
		args, err := xtOpeningArgs(o, priv)
		if err != nil {
			res.failed[k] = err.Error()
			continue
		}
		if !x.has(ch) {
			res.failed[k] = fmt.Sprintf("chain %s does not exist in iptables-%s filter table", ch, backend)
			continue
		}
		adds = append(adds, "-I "+ch+" 1 "+args)
		addedSlots[slot] = k
	}
	var dels []xtRule
	for slot, r := range have {
		if _, ok := wantSlot[slot]; !ok {
			dels = append(dels, r)
		}
	}
	if len(adds)+len(dels) > 0 {
		aerr := xtApply(ctx, env, backend, dels, adds)
		if aerr != nil {
			env.log().Warn("iptables batch failed, re-reading", "backend", backend, "err", aerr)
		}
		x2, _, err := readXT(ctx, env, backend)
		if err != nil {
			return res, err
		}
		if x2 == nil {
			x2 = &xtDump{Policies: map[string]string{}}
		}
		after := marked(x2)
		for slot, k := range addedSlots {
			if _, ok := after[slot]; ok {
				res.added++
			} else if aerr != nil {
				res.failed[k] = aerr.Error()
			}
		}
		for _, r := range dels {
			if _, ok := after[r.Chain+"/"+r.Mark]; !ok {
				res.removed++
			}
		}
		have = after
	}
	for _, k := range keys {
		res.present[k] = res.failed[k] == ""
	}
	for slot, k := range wantSlot {
		if _, ok := have[slot]; !ok {
			res.present[k] = false
		}
	}
	return res, nil
}
