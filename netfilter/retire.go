package netfilter

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Retired is what Retire did, and all Restore needs to undo it. The caller keeps it durably
// (Retire also writes it to Env.StateDir/retired.json when StateDir is set).
type Retired struct {
	Kind Kind
	// Tables are the found nftables tables, each as `nft list table` printed it.
	Tables []SavedTable `json:",omitempty"`
	// BootDisabled is true when Retire disabled nftables.service; BootNote says what it did
	// instead when systemd does not run (the config file is never touched).
	BootDisabled bool   `json:",omitempty"`
	BootNote     string `json:",omitempty"`
}

// SavedTable is one found nftables table and its dump.
type SavedTable struct {
	Name string // "inet filter"
	Dump string
}

// Retire disables the found firewall at the flip, never flushing it: ufw is disabled with
// every file kept; a found nftables ruleset loses only its own tables (Docker's and
// iptables-nft's stay), its loading at boot is disabled and /etc/nftables.conf is untouched.
func Retire(ctx context.Context, env Env, found Found) (Retired, error) {
	r := Retired{Kind: found.Kind}
	switch found.Kind {
	case KindNone:
	case KindUFW:
		if _, err := env.run(ctx, "ufw", "disable"); err != nil {
			return r, fmt.Errorf("retire ufw: %w", err)
		}
	case KindNftables:
		var del strings.Builder
		for _, name := range found.Tables {
			out, err := env.run(ctx, "nft", "list", "table", strings.Fields(name)[0], strings.Fields(name)[1])
			if err != nil {
				return r, fmt.Errorf("retire nftables: save table %s: %w", name, err)
			}
			r.Tables = append(r.Tables, SavedTable{Name: name, Dump: string(out)})
			fmt.Fprintf(&del, "delete table %s\n", name)
		}
		if err := r.save(env); err != nil {
			return r, err
		}
		if _, err := env.runIn(ctx, []byte(del.String()), "nft", "-f", "-"); err != nil {
			return r, fmt.Errorf("retire nftables: remove tables %s: %w", strings.Join(found.Tables, ", "), err)
		}
		if _, err := env.run(ctx, "test", "-d", "/run/systemd/system"); err == nil {
			out, _ := env.run(ctx, "systemctl", "is-enabled", "nftables.service")
			if strings.TrimSpace(string(out)) == "enabled" {
				if _, err := env.run(ctx, "systemctl", "disable", "nftables.service"); err != nil {
					return r, fmt.Errorf("retire nftables: disable loading at boot: %w", err)
				}
				r.BootDisabled = true
			}
		} else {
			r.BootNote = "systemd does not run: nothing loads " + nftConf + " at boot that meshd could disable; recorded only"
		}
	default:
		return r, fmt.Errorf("retire found firewall %s: %w", found.Kind, ErrUnsupported)
	}
	return r, r.save(env)
}

func (r Retired) save(env Env) error {
	if env.StateDir == "" {
		return nil
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	p := filepath.Join(env.StateDir, "retired.json")
	if err := os.MkdirAll(env.StateDir, 0o700); err != nil {
		return fmt.Errorf("record retired firewall in %s: %w", p, err)
	}
	if err := os.WriteFile(p, b, 0o600); err != nil {
		return fmt.Errorf("record retired firewall in %s: %w", p, err)
	}
	return nil
}

// LoadRetired reads what Retire recorded in dir.
func LoadRetired(dir string) (Retired, error) {
	var r Retired
	p := filepath.Join(dir, "retired.json")
	b, err := os.ReadFile(p)
	if err != nil {
		return r, fmt.Errorf("read retired firewall record %s: %w", p, err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("parse %s: %w", p, err)
	}
	return r, nil
}

// Restore gives the retired firewall back exactly: ufw enabled from its files; the found
// nftables tables loaded from their dumps in one transaction (replacing any table of the
// same name) and their loading at boot enabled again.
func Restore(ctx context.Context, env Env, r Retired) error {
	switch r.Kind {
	case KindNone:
	case KindUFW:
		if _, err := env.run(ctx, "ufw", "--force", "enable"); err != nil {
			return fmt.Errorf("restore ufw: %w", err)
		}
	case KindNftables:
		var b strings.Builder
		for _, t := range r.Tables {
			// create-then-delete makes the load replace a table of the same name, if any
			fmt.Fprintf(&b, "table %s\ndelete table %s\n", t.Name, t.Name)
		}
		for _, t := range r.Tables {
			b.WriteString(t.Dump)
			b.WriteString("\n")
		}
		if _, err := env.runIn(ctx, []byte(b.String()), "nft", "-f", "-"); err != nil {
			return fmt.Errorf("restore nftables tables: %w", err)
		}
		if r.BootDisabled {
			if _, err := env.run(ctx, "systemctl", "enable", "nftables.service"); err != nil {
				return fmt.Errorf("restore nftables: enable loading at boot: %w", err)
			}
		}
	default:
		return fmt.Errorf("restore found firewall %s: %w", r.Kind, ErrUnsupported)
	}
	return nil
}
