package ufw

import (
	"context"
	"fmt"

	"meshd/netfilter"
	"meshd/netfilter/xt"
)

// Retire disables a found ufw at the flip, every file of it kept: the built-in policies are
// opened first (openBuiltinPolicies), then `ufw disable`.
func Retire(ctx context.Context, env netfilter.Env, found netfilter.Found) error {
	if err := openBuiltinPolicies(ctx, env, found.Backend); err != nil {
		return fmt.Errorf("retire ufw: %w", err)
	}
	if _, err := env.Run(ctx, "ufw", "disable"); err != nil {
		return fmt.Errorf("retire ufw: %w", err)
	}
	return nil
}

// Restore enables a retired ufw again, from its files.
func Restore(ctx context.Context, env netfilter.Env) error {
	if _, err := env.Run(ctx, "ufw", "--force", "enable"); err != nil {
		return fmt.Errorf("restore ufw: %w", err)
	}
	return nil
}

// openBuiltinPolicies sets the filter table's built-in chains to ACCEPT, in both families where
// ip6tables answers, in one iptables-restore --noflush each (no rule touched): what ufw's own
// stop ends with. ufw's stop deletes its chains first and opens the policies last, one iptables
// call after another; in between a closed INPUT with no rules left drops everything, the
// tunnel's datagrams included (about a second under iptables-nft: the peers' calls through the
// hub's tunnel failed for that long at every flip on the lab). At the flip meshd's derived filter
// is loaded before the found firewall is retired and drops by default, so opening the policies
// first is never more open than the derived filter alone.
func openBuiltinPolicies(ctx context.Context, env netfilter.Env, backend string) error {
	if backend == "" {
		backend = "nft"
	}
	const open = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n"
	for _, v6 := range []bool{false, true} {
		if v6 {
			// As ufw's stop: ip6tables only where it answers.
			if _, err := env.Run(ctx, xt.Bin(backend, true, ""), "-L", "INPUT", "-n"); err != nil {
				continue
			}
		}
		if _, err := env.RunIn(ctx, []byte(open), xt.Bin(backend, v6, "-restore"), "--noflush"); err != nil {
			return fmt.Errorf("open the built-in policies before ufw disable (%s): %w", xt.Name(backend, v6), err)
		}
	}
	return nil
}
