package wg

// wg-quick's own nftables tables: for a peer allowed everything it adds `table ip wg-quick-IF`
// (and ip6), which drops packets for the interface's address that arrive elsewhere and carries
// the firewall mark through conntrack so replies pass the reverse-path filter. They outlive the
// link at a takeover but not a reboot; a takeover keeps their text and the mesh's interface puts
// them back when it is raised anew.

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// QuickTable is one of wg-quick's tables, as `nft list table` prints it (what `nft -f` reads).
type QuickTable struct {
	Family string `json:"family"`
	Name   string `json:"name"`
	Text   string `json:"text"`
}

func (t QuickTable) String() string { return "table " + t.Family + " " + t.Name }

// ReadQuickTables reads wg-quick's tables for iface; none (or no nft on the machine) is no error.
func ReadQuickTables(ctx context.Context, iface string) ([]QuickTable, error) {
	if _, err := exec.LookPath("nft"); err != nil {
		return nil, nil
	}
	var out []QuickTable
	for _, fam := range []string{"ip", "ip6"} {
		name := "wg-quick-" + iface
		b, err := exec.CommandContext(ctx, "nft", "list", "table", fam, name).Output()
		if err != nil {
			continue // not there (nft says "No such file or directory")
		}
		out = append(out, QuickTable{Family: fam, Name: name, Text: string(b)})
	}
	return out, nil
}

// LoadQuickTables puts back those of tables the machine lacks, each in one nft transaction.
func LoadQuickTables(ctx context.Context, tables []QuickTable) error {
	for _, t := range tables {
		if exec.CommandContext(ctx, "nft", "list", "table", t.Family, t.Name).Run() == nil {
			continue
		}
		cmd := exec.CommandContext(ctx, "nft", "-f", "-")
		cmd.Stdin = bytes.NewReader([]byte(t.Text))
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("putting back wg-quick's %s: %w: %s", t, err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}
