package firewall

import (
	"context"
	"fmt"

	"meshd/netfilter"
	"meshd/netfilter/nft"
	"meshd/netfilter/ufw"
	"meshd/netfilter/xt"
)

// Retire disables the found firewall at the flip, never flushing it: ufw is disabled with
// every file kept; a found nftables ruleset loses only its own tables (Docker's and
// iptables-nft's stay), its loading at boot is disabled and /etc/nftables.conf is untouched; a
// found plain-iptables firewall loses its own rules (saved in order first) and its closed INPUT
// policy in iptables and ip6tables alike, Docker's chains stay, its loading at boot is disabled and
// /etc/iptables/rules.v4 and rules.v6 are untouched.
func Retire(ctx context.Context, env netfilter.Env, found netfilter.Found) (netfilter.Retired, error) {
	r := netfilter.Retired{Kind: found.Kind}
	switch found.Kind {
	case netfilter.KindNone:
	case netfilter.KindUFW:
		if err := ufw.Retire(ctx, env, found); err != nil {
			return r, err
		}
	case netfilter.KindNftables:
		if err := nft.Retire(ctx, env, found, &r); err != nil {
			return r, err
		}
	case netfilter.KindIptables:
		if err := xt.Retire(ctx, env, found, &r); err != nil {
			return r, err
		}
	default:
		return r, fmt.Errorf("retire found firewall %s: %w", found.Kind, netfilter.ErrUnsupported)
	}
	return r, r.Save(env)
}

// Restore gives the retired firewall back exactly: ufw enabled from its files; the found
// nftables tables loaded from their dumps in one transaction (replacing any table of the
// same name) and their loading at boot enabled again; plain iptables' rules appended back in
// their order and its policies closed again, in iptables and ip6tables alike.
func Restore(ctx context.Context, env netfilter.Env, r netfilter.Retired) error {
	switch r.Kind {
	case netfilter.KindNone:
	case netfilter.KindUFW:
		return ufw.Restore(ctx, env)
	case netfilter.KindNftables:
		return nft.Restore(ctx, env, r)
	case netfilter.KindIptables:
		return xt.Restore(ctx, env, r)
	default:
		return fmt.Errorf("restore found firewall %s: %w", r.Kind, netfilter.ErrUnsupported)
	}
	return nil
}
