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

// Retire disables the found firewall at the flip, never flushing it: ufw is disabled with
// every file kept; a found nftables ruleset loses only its own tables (Docker's and
// iptables-nft's stay), its loading at boot is disabled and /etc/nftables.conf is untouched; a
// found plain-iptables firewall loses its own rules (saved in order first) and its closed INPUT
// policy in iptables and ip6tables alike, Docker's chains stay, its loading at boot is disabled and
// /etc/iptables/rules.v4 and rules.v6 are untouched.
func Retire(ctx context.Context, env Env, found Found) (Retired, error) {
	r := Retired{Kind: found.Kind}
	switch found.Kind {
	case KindNone:
	case KindUFW:
		if err := openBuiltinPolicies(ctx, env, found.Backend); err != nil {
			return r, fmt.Errorf("retire ufw: %w", err)
		}
		if _, err := env.Run(ctx, "ufw", "disable"); err != nil {
			return r, fmt.Errorf("retire ufw: %w", err)
		}
	case KindNftables:
		var del strings.Builder
		for _, name := range found.Tables {
			out, err := env.Run(ctx, "nft", "list", "table", strings.Fields(name)[0], strings.Fields(name)[1])
			if err != nil {
				return r, fmt.Errorf("retire nftables: save table %s: %w", name, err)
			}
			r.Tables = append(r.Tables, SavedTable{Name: name, Dump: string(out)})
			fmt.Fprintf(&del, "delete table %s\n", name)
		}
		if err := r.Save(env); err != nil {
			return r, err
		}
		if _, err := env.RunIn(ctx, []byte(del.String()), "nft", "-f", "-"); err != nil {
			return r, fmt.Errorf("retire nftables: remove tables %s: %w", strings.Join(found.Tables, ", "), err)
		}
		if _, err := env.Run(ctx, "test", "-d", "/run/systemd/system"); err == nil {
			out, _ := env.Run(ctx, "systemctl", "is-enabled", "nftables.service")
			if strings.TrimSpace(string(out)) == "enabled" {
				if _, err := env.Run(ctx, "systemctl", "disable", "nftables.service"); err != nil {
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
	return r, r.Save(env)
}

// xtBootUnit loads /etc/iptables/rules.v4 at boot on Debian (iptables-persistent).
const xtBootUnit = "netfilter-persistent.service"

// retireXT retires a found plain-iptables firewall in both families: its own rules (in INPUT,
// FORWARD but for Docker's plumbing, and DOCKER-USER but for Docker's closing RETURN) are saved in
// order and then removed, a closed INPUT (or OUTPUT) policy is opened, one iptables-restore
// --noflush for iptables and one ip6tables-restore for ip6tables; its rules files
// (/etc/iptables/rules.v4 and rules.v6) are never touched and its loading at boot is disabled.
// meshd's marked rules stay; Docker's chains and NAT are not touched. Both families are saved
// before either is touched, and the record says Removing until both are done: a process killed
// between the two transactions retires again from what it saved (plus any rule found since), so
// the family already retired is never saved again as empty.
func retireXT(ctx context.Context, env Env, found Found, r *Retired) error {
	backend := found.Backend
	if backend == "" {
		backend = "nft"
	}
	var prev Retired
	if env.StateDir != "" {
		if p, err := LoadRetired(env.StateDir); err == nil && p.Kind == KindIptables && p.Removing && p.XT != nil && p.XT.Backend == backend {
			prev = p
		}
	}
	type family struct {
		v6       bool
		del      []xtRule
		policies []string
	}
	var fams []family
	for _, v6 := range []bool{false, true} {
		x, ok, err := readXT(ctx, env, backend, v6)
		if err != nil {
			return fmt.Errorf("retire %s: %w", xtName(backend, v6), err)
		}
		was := prev.XT
		if v6 {
			was = prev.XT6
		}
		if !ok && was == nil {
			if !v6 {
				r.XT = &RetiredXT{Backend: backend, Policies: map[string]string{}}
			}
			continue
		}
		saved, f := &RetiredXT{Backend: backend, Policies: map[string]string{}}, family{v6: v6}
		if ok {
			f.del, saved.Rules, f.policies = xtOwn(x)
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
		if err := xtApplyPolicies(ctx, env, backend, f.v6, f.policies, f.del, nil); err != nil {
			return fmt.Errorf("retire %s: %w", xtName(backend, f.v6), err)
		}
	}
	r.Removing = false
	if _, err := env.Run(ctx, "test", "-d", "/run/systemd/system"); err == nil {
		out, _ := env.Run(ctx, "systemctl", "is-enabled", xtBootUnit)
		if strings.TrimSpace(string(out)) == "enabled" {
			if _, err := env.Run(ctx, "systemctl", "disable", xtBootUnit); err != nil {
				return fmt.Errorf("retire iptables: disable loading at boot (%s): %w", xtBootUnit, err)
			}
			r.BootDisabled = true
		}
	} else {
		r.BootNote = "systemd does not run: nothing loads " + iptRulesV4 + " or " + iptRulesV6 + " at boot that meshd could disable; recorded only"
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
			if _, err := env.Run(ctx, xtBin(backend, true, ""), "-L", "INPUT", "-n"); err != nil {
				continue
			}
		}
		if _, err := env.RunIn(ctx, []byte(open), xtBin(backend, v6, "-restore"), "--noflush"); err != nil {
			return fmt.Errorf("open the built-in policies before ufw disable (%s): %w", xtName(backend, v6), err)
		}
	}
	return nil
}

// xtOwn is what retiring takes out of one family's filter table: the found firewall's own rules
// (to delete, and their lines in order) and the ":CHAIN ACCEPT" lines opening its closed INPUT and
// OUTPUT policies.
func xtOwn(x *xtDump) (del []xtRule, lines, policies []string) {
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

// xtApplyPolicies is xtApply with built-in chain policies (":CHAIN POLICY" lines) set first.
func xtApplyPolicies(ctx context.Context, env Env, backend string, v6 bool, policies []string, del []xtRule, add []string) error {
	if len(policies) == 0 {
		return xtApply(ctx, env, backend, v6, del, add)
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
	if _, err := env.RunIn(ctx, []byte(b.String()), xtBin(backend, v6, "-restore"), "--noflush"); err != nil {
		return fmt.Errorf("%s-restore --noflush (%d policies, %d removed, %d added): %w", xtName(backend, v6), len(policies), len(del), len(add), err)
	}
	return nil
}

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

// Restore gives the retired firewall back exactly: ufw enabled from its files; the found
// nftables tables loaded from their dumps in one transaction (replacing any table of the
// same name) and their loading at boot enabled again; plain iptables' rules appended back in
// their order and its policies closed again, in iptables and ip6tables alike.
func Restore(ctx context.Context, env Env, r Retired) error {
	switch r.Kind {
	case KindNone:
	case KindUFW:
		if _, err := env.Run(ctx, "ufw", "--force", "enable"); err != nil {
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
		if _, err := env.RunIn(ctx, []byte(b.String()), "nft", "-f", "-"); err != nil {
			return fmt.Errorf("restore nftables tables: %w", err)
		}
		if r.BootDisabled {
			if _, err := env.Run(ctx, "systemctl", "enable", "nftables.service"); err != nil {
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
// in its order, ahead of what else of the chain's own came after it (a rule already there is not
// added twice, so a restore repeated after a crash adds nothing), the policies it had closed
// closed again, in each family it was retired from; its loading at boot enabled again. The kept
// record then says it is no longer being removed, so a later flip begins afresh.
func restoreXT(ctx context.Context, env Env, r Retired) error {
	for _, f := range []struct {
		v6 bool
		xt *RetiredXT
	}{{false, r.XT}, {true, r.XT6}} {
		if f.xt == nil {
			continue
		}
		if err := restoreXTFamily(ctx, env, f.xt, f.v6); err != nil {
			return fmt.Errorf("restore %s: %w", xtName(f.xt.Backend, f.v6), err)
		}
	}
	if r.BootDisabled {
		if _, err := env.Run(ctx, "systemctl", "enable", xtBootUnit); err != nil {
			return fmt.Errorf("restore iptables: enable loading at boot (%s): %w", xtBootUnit, err)
		}
	}
	if env.StateDir != "" {
		if kept, err := LoadRetired(env.StateDir); err == nil && kept.Removing {
			kept.Removing = false
			return kept.Save(env)
		}
	}
	return nil
}

// restoreXTFamily is restoreXT in one family's filter table.
func restoreXTFamily(ctx context.Context, env Env, saved *RetiredXT, v6 bool) error {
	x, _, err := readXT(ctx, env, saved.Backend, v6)
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
	var del []xtRule
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
	return xtApplyPolicies(ctx, env, saved.Backend, v6, policies, del, add)
}
