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
	// XT is what Retire took out of a found plain-iptables firewall, for KindIptables.
	XT *RetiredXT `json:",omitempty"`
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

// Retire disables the found firewall at the flip, never flushing it: ufw is disabled with
// every file kept; a found nftables ruleset loses only its own tables (Docker's and
// iptables-nft's stay), its loading at boot is disabled and /etc/nftables.conf is untouched; a
// found plain-iptables firewall loses its own rules (saved in order first) and its closed INPUT
// policy, Docker's chains stay, its loading at boot is disabled and /etc/iptables/rules.v4 is
// untouched.
func Retire(ctx context.Context, env Env, found Found) (Retired, error) {
	r := Retired{Kind: found.Kind}
	switch found.Kind {
	case KindNone:
	case KindUFW:
		if err := openBuiltinPolicies(ctx, env, found.Backend); err != nil {
			return r, fmt.Errorf("retire ufw: %w", err)
		}
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
	case KindIptables:
		if err := retireXT(ctx, env, found, &r); err != nil {
			return r, err
		}
	default:
		return r, fmt.Errorf("retire found firewall %s: %w", found.Kind, ErrUnsupported)
	}
	return r, r.save(env)
}

// xtBootUnit loads /etc/iptables/rules.v4 at boot on Debian (iptables-persistent).
const xtBootUnit = "netfilter-persistent.service"

// retireXT retires a found plain-iptables firewall: its own rules (in INPUT, FORWARD but for
// Docker's plumbing, and DOCKER-USER but for Docker's closing RETURN) are saved in order and then
// removed, a closed INPUT policy is opened, all in one iptables-restore --noflush; its rules file
// (/etc/iptables/rules.v4) is never touched and its loading at boot is disabled. meshd's marked
// rules stay; Docker's chains and NAT are not touched.
func retireXT(ctx context.Context, env Env, found Found, r *Retired) error {
	backend := found.Backend
	if backend == "" {
		backend = "nft"
	}
	x, ok, err := readXT(ctx, env, backend, false)
	if err != nil {
		return fmt.Errorf("retire iptables: %w", err)
	}
	r.XT = &RetiredXT{Backend: backend, Policies: map[string]string{}}
	if !ok {
		return r.save(env)
	}
	bridges := x.dockerBridges()
	var del []xtRule
	for _, rule := range x.Rules {
		if rule.Mark != "" {
			continue
		}
		switch {
		case rule.Chain == "INPUT",
			rule.Chain == "FORWARD" && !isDockerRule(rule, bridges),
			rule.Chain == "DOCKER-USER" && rule.Line != "-A DOCKER-USER -j RETURN":
			del = append(del, rule)
			r.XT.Rules = append(r.XT.Rules, rule.Line)
		}
	}
	var policies []string
	for _, ch := range []string{"INPUT", "OUTPUT"} {
		if p := x.Policies[ch]; p != "" && p != "ACCEPT" {
			r.XT.Policies[ch] = p
			policies = append(policies, ":"+ch+" ACCEPT")
		}
	}
	// Saved before anything is removed: a crash between leaves a record to restore from.
	if err := r.save(env); err != nil {
		return err
	}
	if err := xtApplyPolicies(ctx, env, backend, policies, del, nil); err != nil {
		return fmt.Errorf("retire iptables: %w", err)
	}
	if _, err := env.run(ctx, "test", "-d", "/run/systemd/system"); err == nil {
		out, _ := env.run(ctx, "systemctl", "is-enabled", xtBootUnit)
		if strings.TrimSpace(string(out)) == "enabled" {
			if _, err := env.run(ctx, "systemctl", "disable", xtBootUnit); err != nil {
				return fmt.Errorf("retire iptables: disable loading at boot (%s): %w", xtBootUnit, err)
			}
			r.BootDisabled = true
		}
	} else {
		r.BootNote = "systemd does not run: nothing loads " + iptRulesV4 + " at boot that meshd could disable; recorded only"
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
func openBuiltinPolicies(ctx context.Context, env Env, backend string) error {
	if backend == "" {
		backend = "nft"
	}
	const open = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n"
	for _, v6 := range []bool{false, true} {
		if v6 {
			// As ufw's stop: ip6tables only where it answers.
			if _, err := env.run(ctx, xtBin(backend, true, ""), "-L", "INPUT", "-n"); err != nil {
				continue
			}
		}
		if _, err := env.runIn(ctx, []byte(open), xtBin(backend, v6, "-restore"), "--noflush"); err != nil {
			return fmt.Errorf("open the built-in policies before ufw disable (%s): %w", xtName(backend, v6), err)
		}
	}
	return nil
}

// xtApplyPolicies is xtApply with built-in chain policies (":CHAIN POLICY" lines) set first.
func xtApplyPolicies(ctx context.Context, env Env, backend string, policies []string, del []xtRule, add []string) error {
	if len(policies) == 0 {
		return xtApply(ctx, env, backend, false, del, add)
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
	if _, err := env.runIn(ctx, []byte(b.String()), xtBin(backend, false, "-restore"), "--noflush"); err != nil {
		return fmt.Errorf("iptables-%s-restore --noflush (%d policies, %d removed, %d added): %w", backend, len(policies), len(del), len(add), err)
	}
	return nil
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
// same name) and their loading at boot enabled again; plain iptables' rules appended back in
// their order and its policies closed again.
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
	case KindIptables:
		if r.XT == nil {
			return fmt.Errorf("restore iptables: the retirement record keeps no rules: %w", ErrUnsupported)
		}
		if err := restoreXT(ctx, env, r); err != nil {
			return err
		}
	default:
		return fmt.Errorf("restore found firewall %s: %w", r.Kind, ErrUnsupported)
	}
	return nil
}

// restoreXT puts a retired plain-iptables firewall back: each saved rule appended to its chain
// in its order, ahead of what else of the chain's own came after it (a rule already there is not added twice, so a restore repeated after a crash
// adds nothing), the policies it had closed closed again, its loading at boot enabled again.
func restoreXT(ctx context.Context, env Env, r Retired) error {
	x, _, err := readXT(ctx, env, r.XT.Backend, false)
	if err != nil {
		return fmt.Errorf("restore iptables: %w", err)
	}
	have := map[string]int{}
	if x != nil {
		for _, rule := range x.Rules {
			have[rule.Line]++
		}
	}
	saved := map[string]bool{}
	var add, policies []string
	chains := map[string]bool{}
	for _, line := range r.XT.Rules {
		saved[line] = true
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
	var del []xtRule
	if x != nil {
		for _, rule := range x.Rules {
			if chains[rule.Chain] && rule.Mark == "" && !saved[rule.Line] {
				del = append(del, rule)
			}
		}
	}
	for _, rule := range del {
		add = append(add, rule.Line)
	}
	for _, ch := range []string{"INPUT", "OUTPUT"} {
		if p := r.XT.Policies[ch]; p != "" {
			policies = append(policies, ":"+ch+" "+p)
		}
	}
	if err := xtApplyPolicies(ctx, env, r.XT.Backend, policies, del, add); err != nil {
		return fmt.Errorf("restore iptables: %w", err)
	}
	if r.BootDisabled {
		if _, err := env.run(ctx, "systemctl", "enable", xtBootUnit); err != nil {
			return fmt.Errorf("restore iptables: enable loading at boot (%s): %w", xtBootUnit, err)
		}
	}
	return nil
}
