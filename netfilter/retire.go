package netfilter

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
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
	// XT is what Retire took out of a found plain-iptables firewall, for KindIptables; XT6 what
	// it took out of its ip6tables (nil when ip6tables has no filter table).
	XT  *RetiredXT `json:",omitempty"`
	XT6 *RetiredXT `json:",omitempty"`
	// Removing is set while a plain-iptables firewall's saved rules are being removed (two
	// families, two transactions): a Retire that finds it set in the record it kept was
	// interrupted, and goes on from what that record saved rather than over the rules left.
	Removing bool `json:",omitempty"`
}

// RetiredXT is a retired plain-iptables firewall: its backend, the policies of the built-in
// chains it had closed, and its own rules in the order they stood (iptables-save lines).
type RetiredXT struct {
	Backend  string
	Policies map[string]string `json:",omitempty"`
	Rules    []string
}

// SavedTable is one found nftables table and its dump.
type SavedTable struct {
	Name string // "inet filter"
	Dump string
}

// Save keeps r in Env.StateDir/retired.json (nothing without a StateDir), for LoadRetired.
func (r Retired) Save(env Env) error {
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
