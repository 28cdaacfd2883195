package nft

import (
	"context"
	"fmt"
	"strings"

	"meshd/netfilter"
)

// Retire retires a found nftables ruleset at the flip: each of its own tables is saved in r (as
// `nft list table` prints it) and r is kept before all are deleted in one `nft -f`; Docker's and
// iptables-nft's tables stay, and /etc/nftables.conf is never touched. Its loading at boot
// (nftables.service) is disabled where systemd runs; elsewhere r says so.
func Retire(ctx context.Context, env netfilter.Env, found netfilter.Found, r *netfilter.Retired) error {
	var del strings.Builder
	for _, name := range found.Tables {
		out, err := env.Run(ctx, "nft", "list", "table", strings.Fields(name)[0], strings.Fields(name)[1])
		if err != nil {
			return fmt.Errorf("retire nftables: save table %s: %w", name, err)
		}
		r.Tables = append(r.Tables, netfilter.SavedTable{Name: name, Dump: string(out)})
		fmt.Fprintf(&del, "delete table %s\n", name)
	}
	if err := r.Save(env); err != nil {
		return err
	}
	if _, err := env.RunIn(ctx, []byte(del.String()), "nft", "-f", "-"); err != nil {
		return fmt.Errorf("retire nftables: remove tables %s: %w", strings.Join(found.Tables, ", "), err)
	}
	if _, err := env.Run(ctx, "test", "-d", "/run/systemd/system"); err == nil {
		out, _ := env.Run(ctx, "systemctl", "is-enabled", "nftables.service")
		if strings.TrimSpace(string(out)) == "enabled" {
			if _, err := env.Run(ctx, "systemctl", "disable", "nftables.service"); err != nil {
				return fmt.Errorf("retire nftables: disable loading at boot: %w", err)
			}
			r.BootDisabled = true
		}
	} else {
		r.BootNote = "systemd does not run: nothing loads " + Conf + " at boot that meshd could disable; recorded only"
	}
	return nil
}

// Restore loads the retired tables back from their dumps in one transaction (replacing any table
// of the same name) and enables their loading at boot again if Retire disabled it.
func Restore(ctx context.Context, env netfilter.Env, r netfilter.Retired) error {
	var b strings.Builder
	for _, t := range r.Tables {
		// create-then-delete makes the load replace a table of the same name, if any
		fmt.Fprintf(&b, "table %s\ndelete table %s\n", t.Name, t.Name)
	}
	for _, t := range r.Tables {
		b.WriteString(t.Dump)
		b.WriteString("\n")
	}
	if _, err := env.RunIn(ctx, []byte(b.String()), "nft", "-f", "-"); err != nil {
		return fmt.Errorf("restore nftables tables: %w", err)
	}
	if r.BootDisabled {
		if _, err := env.Run(ctx, "systemctl", "enable", "nftables.service"); err != nil {
			return fmt.Errorf("restore nftables: enable loading at boot: %w", err)
		}
	}
	return nil
}
