package xt

import (
	"context"
	"fmt"
	"strings"

	"meshd/netfilter"
)

// Retire retires a found plain-iptables firewall in both families: its own rules (in INPUT,
// FORWARD but for Docker's plumbing, and DOCKER-USER but for Docker's closing RETURN) are saved in
// order and then removed, a closed INPUT (or OUTPUT) policy is opened, one iptables-restore
// --noflush for iptables and one ip6tables-restore for ip6tables; its rules files
// (/etc/iptables/rules.v4 and rules.v6) are never touched and its loading at boot is disabled.
// meshd's marked rules stay; Docker's chains and NAT are not touched. Both families are saved
// before either is touched, and the record says Removing until both are done: a process killed
// between the two transactions retires again from what it saved (plus any rule found since), so
// the family already retired is never saved again as empty.
func Retire(ctx context.Context, env netfilter.Env, found netfilter.Found, r *netfilter.Retired) error {
	backend := found.Backend
	if backend == "" {
		backend = "nft"
	}
	var prev netfilter.Retired
	if env.StateDir != "" {
		if p, err := netfilter.LoadRetired(env.StateDir); err == nil && p.Kind == netfilter.KindIptables && p.Removing && p.XT != nil && p.XT.Backend == backend {
			prev = p
		}
	}
	type family struct {
		v6       bool
		del      []Rule
		policies []string
	}
	var fams []family
	for _, v6 := range []bool{false, true} {
		x, ok, err := Read(ctx, env, backend, v6)
		if err != nil {
			return fmt.Errorf("retire %s: %w", Name(backend, v6), err)
		}
		was := prev.XT
		if v6 {
			was = prev.XT6
		}
		if !ok && was == nil {
			if !v6 {
				r.XT = &netfilter.RetiredXT{Backend: backend, Policies: map[string]string{}}
			}
			continue
		}
		saved, f := &netfilter.RetiredXT{Backend: backend, Policies: map[string]string{}}, family{v6: v6}
		if ok {
			f.del, saved.Rules, f.policies = ownRules(x)
			for _, p := range f.policies {
				ch := strings.Fields(strings.TrimPrefix(p, ":"))[0]
				saved.Policies[ch] = x.Policies[ch]
			}
		}
		if was != nil {
			saved.Rules = mergeSaved(was.Rules, saved.Rules)
			for ch, p := range was.Policies {
				saved.Policies[ch] = p // what it had closed before the interrupted retirement opened it
			}
		}
		if v6 {
			r.XT6 = saved
		} else {
			r.XT = saved
		}
		fams = append(fams, f)
	}
	// Saved before anything is removed: a crash between leaves a record to restore from.
	r.Removing = true
	if err := r.Save(env); err != nil {
		return err
	}
	for _, f := range fams {
		if err := applyPolicies(ctx, env, backend, f.v6, f.policies, f.del, nil); err != nil {
			return fmt.Errorf("retire %s: %w", Name(backend, f.v6), err)
		}
	}
	r.Removing = false
	if _, err := env.Run(ctx, "test", "-d", "/run/systemd/system"); err == nil {
		out, _ := env.Run(ctx, "systemctl", "is-enabled", bootUnit)
		if strings.TrimSpace(string(out)) == "enabled" {
			if _, err := env.Run(ctx, "systemctl", "disable", bootUnit); err != nil {
				return fmt.Errorf("retire iptables: disable loading at boot (%s): %w", bootUnit, err)
			}
			r.BootDisabled = true
		}
	} else {
		r.BootNote = "systemd does not run: nothing loads " + RulesV4 + " or " + rulesV6 + " at boot that meshd could disable; recorded only"
	}
	return nil
}

// bootUnit loads /etc/iptables/rules.v4 at boot on Debian (iptables-persistent).
const bootUnit = "netfilter-persistent.service"

// ownRules is what retiring takes out of one family's filter table: the found firewall's own rules
// (to delete, and their lines in order) and the ":CHAIN ACCEPT" lines opening its closed INPUT and
// OUTPUT policies.
func ownRules(x *Dump) (del []Rule, lines, policies []string) {
	bridges := x.dockerBridges()
	for _, rule := range x.Rules {
		if rule.Mark != "" {
			continue
		}
		switch {
		case rule.Chain == "INPUT",
			rule.Chain == "FORWARD" && !isDockerRule(rule, bridges),
			rule.Chain == "DOCKER-USER" && rule.Line != "-A DOCKER-USER -j RETURN":
			del = append(del, rule)
			lines = append(lines, rule.Line)
		}
	}
	for _, ch := range []string{"INPUT", "OUTPUT"} {
		if p := x.Policies[ch]; p != "" && p != "ACCEPT" {
			policies = append(policies, ":"+ch+" ACCEPT")
		}
	}
	return del, lines, policies
}

// mergeSaved is what an interrupted retirement saved, then each rule found now beyond as many
// copies as it saved (one added since), in order.
func mergeSaved(saved, now []string) []string {
	n := map[string]int{}
	for _, l := range saved {
		n[l]++
	}
	out := append([]string(nil), saved...)
	for _, l := range now {
		if n[l] > 0 {
			n[l]--
			continue
		}
		out = append(out, l)
	}
	return out
}

// applyPolicies is apply with built-in chain policies (":CHAIN POLICY" lines) set first.
func applyPolicies(ctx context.Context, env netfilter.Env, backend string, v6 bool, policies []string, del []Rule, add []string) error {
	if len(policies) == 0 {
		return apply(ctx, env, backend, v6, del, add)
	}
	var b strings.Builder
	b.WriteString("*filter\n")
	for _, p := range policies {
		b.WriteString(p + " [0:0]\n")
	}
	for _, rule := range del {
		b.WriteString("-D" + strings.TrimPrefix(rule.Line, "-A") + "\n")
	}
	for _, a := range add {
		b.WriteString(a + "\n")
	}
	b.WriteString("COMMIT\n")
	if _, err := env.RunIn(ctx, []byte(b.String()), Bin(backend, v6, "-restore"), "--noflush"); err != nil {
		return fmt.Errorf("%s-restore --noflush (%d policies, %d removed, %d added): %w", Name(backend, v6), len(policies), len(del), len(add), err)
	}
	return nil
}

// Restore puts a retired plain-iptables firewall back: each saved rule appended to its chain
// in its order, ahead of what else of the chain's own came after it (a rule already there is not
// added twice, so a restore repeated after a crash adds nothing), the policies it had closed
// closed again, in each family it was retired from; its loading at boot enabled again. The kept
// record then says it is no longer being removed, so a later flip begins afresh.
func Restore(ctx context.Context, env netfilter.Env, r netfilter.Retired) error {
	if r.XT == nil {
		return fmt.Errorf("restore iptables: the retirement record keeps no rules: %w", netfilter.ErrUnsupported)
	}
	for _, f := range []struct {
		v6 bool
		xt *netfilter.RetiredXT
	}{{false, r.XT}, {true, r.XT6}} {
		if f.xt == nil {
			continue
		}
		if err := restoreFamily(ctx, env, f.xt, f.v6); err != nil {
			return fmt.Errorf("restore %s: %w", Name(f.xt.Backend, f.v6), err)
		}
	}
	if r.BootDisabled {
		if _, err := env.Run(ctx, "systemctl", "enable", bootUnit); err != nil {
			return fmt.Errorf("restore iptables: enable loading at boot (%s): %w", bootUnit, err)
		}
	}
	if env.StateDir != "" {
		if kept, err := netfilter.LoadRetired(env.StateDir); err == nil && kept.Removing {
			kept.Removing = false
			return kept.Save(env)
		}
	}
	return nil
}

// restoreFamily is Restore in one family's filter table.
func restoreFamily(ctx context.Context, env netfilter.Env, saved *netfilter.RetiredXT, v6 bool) error {
	x, _, err := Read(ctx, env, saved.Backend, v6)
	if err != nil {
		return err
	}
	have := map[string]int{}
	if x != nil {
		for _, rule := range x.Rules {
			have[rule.Line]++
		}
	}
	isSaved := map[string]bool{}
	var add, policies []string
	chains := map[string]bool{}
	for _, line := range saved.Rules {
		isSaved[line] = true
		if have[line] > 0 {
			have[line]--
			continue
		}
		add = append(add, line)
		if f := strings.Fields(line); len(f) > 1 {
			chains[f[1]] = true
		}
	}
	// What came after them in a chain they go back to (Docker's closing RETURN in DOCKER-USER)
	// comes after them again: moved behind them in the same transaction.
	var del []Rule
	if x != nil {
		for _, rule := range x.Rules {
			if chains[rule.Chain] && rule.Mark == "" && !isSaved[rule.Line] {
				del = append(del, rule)
			}
		}
	}
	for _, rule := range del {
		add = append(add, rule.Line)
	}
	for _, ch := range []string{"INPUT", "OUTPUT"} {
		if p := saved.Policies[ch]; p != "" {
			policies = append(policies, ":"+ch+" "+p)
		}
	}
	return applyPolicies(ctx, env, saved.Backend, v6, policies, del, add)
}
