package xt

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"strings"

	"meshd/netfilter"
)

// Rule is one rule of an iptables-save dump, as iptables-save prints it ("-A CHAIN ...").
type Rule struct {
	Chain string
	Line  string
	Mark  string // the meshd comment, if any
}

// Dump is the filter table of one iptables backend in one address family.
type Dump struct {
	Backend  string            // "nft" or "legacy"
	V6       bool              // ip6tables' table (IPv6), not iptables' (IPv4)
	Policies map[string]string // built-in chain -> policy; user chains -> "-"
	Rules    []Rule
}

// Has says whether the table holds chain (built in or the user's).
func (d *Dump) Has(chain string) bool { _, ok := d.Policies[chain]; return ok }

// Name is the tool of one backend and family: iptables-nft, ip6tables-legacy.
func Name(backend string, v6 bool) string {
	if v6 {
		return "ip6tables-" + backend
	}
	return "iptables-" + backend
}

// Bin is one of the tool's commands: suffix is "", "-save" or "-restore".
func Bin(backend string, v6 bool, suffix string) string { return Name(backend, v6) + suffix }

// Read dumps the filter table of one backend in one family (v6: ip6tables). ok is false when
// the backend's tools are absent or the backend holds no filter table. An iptables-nft table
// that nft rules made unreadable to iptables is an error naming it.
func Read(ctx context.Context, env netfilter.Env, backend string, v6 bool) (*Dump, bool, error) {
	return ReadTable(ctx, env, backend, v6, "filter")
}

// ReadTable is Read of another table (nat, where Docker's DNAT of published ports is).
func ReadTable(ctx context.Context, env netfilter.Env, backend string, v6 bool, table string) (*Dump, bool, error) {
	// A legacy table is made the first time anything reads it in a network namespace: look in
	// /proc first, so detecting the firewall never leaves a legacy filter table behind.
	if backend == "legacy" {
		// No such file: ip_tables is not even loaded, so there is no legacy table.
		names := "/proc/net/ip_tables_names"
		if v6 {
			names = "/proc/net/ip6_tables_names"
		}
		b, err := env.Run(ctx, "cat", names)
		if err != nil || !bytes.Contains(append([]byte("\n"), b...), []byte("\n"+table+"\n")) {
			return nil, false, nil
		}
	}
	name := Name(backend, v6)
	// stderr too: iptables-nft-save warns there, exiting 0, about a table it cannot show.
	out, err := env.Run(ctx, "sh", "-c", Bin(backend, v6, "-save")+" -t "+table+" 2>&1")
	if err != nil {
		if strings.Contains(err.Error(), "exit status 127") || strings.Contains(err.Error(), "not found") {
			return nil, false, nil
		}
		if strings.Contains(err.Error(), "incompatible") {
			return nil, false, fmt.Errorf("%s %s table is unreadable (changed by a tool meshd does not speak): %w", name, table, err)
		}
		// legacy: no filter table loaded ("Table does not exist")
		if strings.Contains(err.Error(), "does not exist") || bytes.Contains(out, []byte("does not exist")) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("read %s %s table: %w", name, table, err)
	}
	if bytes.Contains(out, []byte("incompatible")) {
		return nil, false, fmt.Errorf("%s %s table is unreadable (changed by a tool meshd does not speak): %s", name, table, firstLineWith(out, "incompatible"))
	}
	d := parseTable(out, table)
	d.Backend, d.V6 = backend, v6
	if len(d.Policies) == 0 {
		return d, false, nil
	}
	return d, true, nil
}

func firstLineWith(b []byte, s string) string {
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, s) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

func parse(out []byte) *Dump { return parseTable(out, "filter") }

// Parse reads one table of an iptables-save dump (its policies and rules; other tables skipped).
func Parse(out []byte, table string) *Dump { return parseTable(out, table) }

func parseTable(out []byte, table string) *Dump {
	d := &Dump{Policies: map[string]string{}}
	inFilter := false
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(l, "*"):
			inFilter = l == "*"+table
		case !inFilter:
		case strings.HasPrefix(l, ":"):
			f := strings.Fields(l[1:])
			if len(f) >= 2 {
				d.Policies[f[0]] = f[1]
			}
		case strings.HasPrefix(l, "-A "):
			f := strings.Fields(l)
			if len(f) < 2 {
				continue
			}
			d.Rules = append(d.Rules, Rule{Chain: f[1], Line: l, Mark: markIn(l)})
		}
	}
	return d
}

// markIn extracts a meshd comment from a rule line.
func markIn(l string) string {
	i := strings.Index(l, "--comment ")
	if i < 0 {
		return ""
	}
	s := l[i+len("--comment "):]
	if strings.HasPrefix(s, `"`) {
		if j := strings.Index(s[1:], `"`); j >= 0 {
			s = s[1 : j+1]
		}
	} else if j := strings.IndexByte(s, ' '); j >= 0 {
		s = s[:j]
	}
	if strings.HasPrefix(s, netfilter.MarkPrefix) {
		return s
	}
	return ""
}

// dockerBridges are the interfaces Docker's DOCKER chain forwards to (docker0, br-…).
func (d *Dump) dockerBridges() map[string]bool {
	m := map[string]bool{"docker0": true}
	for _, r := range d.Rules {
		if r.Chain != "DOCKER" {
			continue
		}
		f := strings.Fields(r.Line)
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "-o" {
				m[f[i+1]] = true
			}
		}
	}
	return m
}

// isDockerRule says whether a FORWARD/INPUT rule belongs to Docker's own plumbing: a jump to
// one of its chains, or a rule for one of its bridges.
func isDockerRule(r Rule, bridges map[string]bool) bool {
	if strings.Contains(r.Line, "-j DOCKER") || strings.HasPrefix(r.Chain, "DOCKER") {
		return true
	}
	f := strings.Fields(r.Line)
	for i := 0; i+1 < len(f); i++ {
		if (f[i] == "-o" || f[i] == "-i") && bridges[f[i+1]] {
			return true
		}
	}
	return false
}

// openingArgs is the rule (without -A/-I and chain) that implements o in one family's table
// (v6: ip6tables), or "" when o needs no rule there: its source is a prefix of the other family
// (a CIDR, or the private network's range), so nothing of this family can match it.
// A forwarded opening matches conntrack's original destination port, the port the client
// addressed before Docker's DNAT in nat PREROUTING rewrote it.
func openingArgs(o netfilter.Opening, priv netfilter.Private, v6 bool) (string, error) {
	return ruleArgs(o, priv, v6, o.Path != netfilter.PathForwarded)
}

// proxyArgs is the rule at the head of INPUT that lets a forwarded opening reach the container
// runtime's proxy, a process of the machine: Docker publishes every port on [::] too, and IPv6 to
// a container on an IPv4-only bridge (Docker's default, and all IPv6 unless ip6tables is enabled
// in its daemon) is no DNAT but a docker-proxy listening on the published port. The same port,
// from the same sources, matched as the machine's own; "" when o needs no rule in this family.
func proxyArgs(o netfilter.Opening, priv netfilter.Private, v6 bool) (string, error) {
	return ruleArgs(o, priv, v6, true)
}

// famMatches says whether a prefix can be matched in one family's table.
func famMatches(p netip.Prefix, v6 bool) bool { return p.Addr().Is6() == v6 }

// ruleArgs builds an opening's rule in one family; dport matches the destination port as the
// packet has it (incoming, the proxy), else conntrack's original one (forwarded).
func ruleArgs(o netfilter.Opening, priv netfilter.Private, v6, dport bool) (string, error) {
	var b strings.Builder
	if o.Path == netfilter.PathRouted {
		if priv.Interface == "" || !priv.Range.IsValid() {
			return "", fmt.Errorf("opening %s: routed between the private network's addresses, but its interface (%q) or range (%s) is not known", o, priv.Interface, priv.Range)
		}
		if !famMatches(priv.Range, v6) {
			return "", nil
		}
		r := priv.Range.Masked()
		return fmt.Sprintf(`-i %s -o %s -s %s -d %s -m comment --comment "%s" -j ACCEPT`, priv.Interface, priv.Interface, r, r, o.Mark()), nil
	}
	fmt.Fprintf(&b, "-p %s", o.Proto)
	switch o.From {
	case netfilter.FromAnywhere:
	case netfilter.FromPrivate:
		if priv.Interface == "" && !priv.Range.IsValid() {
			return "", fmt.Errorf("opening %s: from private, but no private network is known", o)
		}
		if priv.Range.IsValid() {
			if !famMatches(priv.Range, v6) {
				return "", nil
			}
			fmt.Fprintf(&b, " -s %s", priv.Range.Masked())
		}
		if priv.Interface != "" {
			fmt.Fprintf(&b, " -i %s", priv.Interface)
		}
	default:
		p, err := netip.ParsePrefix(o.From)
		if err != nil {
			return "", fmt.Errorf("opening %s: %w", o, err)
		}
		if !famMatches(p, v6) {
			return "", nil
		}
		fmt.Fprintf(&b, " -s %s", p.Masked())
	}
	if dport {
		fmt.Fprintf(&b, " -m %s --dport %d", o.Proto, o.Port)
	} else {
		fmt.Fprintf(&b, " -m conntrack --ctorigdstport %d", o.Port)
	}
	fmt.Fprintf(&b, ` -m comment --comment "%s" -j ACCEPT`, o.Mark())
	return b.String(), nil
}

// filtering counts one family's own rules (meshd's marked rules, Docker's plumbing and
// DOCKER-USER's closing RETURN excluded) on each path, and says whether that family is filtered
// at all: a rule of its own, or a closed INPUT policy. A FORWARD policy alone does not count:
// Docker closes it on every machine it runs on.
func filtering(d *Dump) (incoming, forwarded int, filters bool) {
	bridges := d.dockerBridges()
	for _, r := range d.Rules {
		if r.Mark != "" {
			continue
		}
		switch {
		case r.Chain == "INPUT":
			incoming++
		case r.Chain == "FORWARD" && !isDockerRule(r, bridges):
			forwarded++
		case r.Chain == "DOCKER-USER" && !strings.HasSuffix(r.Line, "-j RETURN"):
			forwarded++
		}
	}
	closed := d.Policies["INPUT"] != "" && d.Policies["INPUT"] != "ACCEPT"
	return incoming, forwarded, incoming+forwarded > 0 || closed
}

// apply removes and inserts rules in one family's filter table in one iptables-restore
// --noflush (ip6tables-restore for v6).
func apply(ctx context.Context, env netfilter.Env, backend string, v6 bool, del []Rule, add []string) error {
	if len(del) == 0 && len(add) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString("*filter\n")
	for _, r := range del {
		b.WriteString("-D" + strings.TrimPrefix(r.Line, "-A") + "\n")
	}
	for _, a := range add {
		b.WriteString(a + "\n")
	}
	b.WriteString("COMMIT\n")
	if _, err := env.RunIn(ctx, []byte(b.String()), Bin(backend, v6, "-restore"), "--noflush"); err != nil {
		return fmt.Errorf("%s-restore --noflush (%d removed, %d added): %w", Name(backend, v6), len(del), len(add), err)
	}
	return nil
}
