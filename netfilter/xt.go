package netfilter

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strings"
)

// xtRule is one rule of an iptables-save dump, as iptables-save prints it ("-A CHAIN ...").
type xtRule struct {
	Chain string
	Line  string
	Mark  string // the meshd comment, if any
}

// xtDump is the filter table of one iptables backend.
type xtDump struct {
	Backend  string            // "nft" or "legacy"
	Policies map[string]string // built-in chain -> policy; user chains -> "-"
	Rules    []xtRule
}

func (d *xtDump) has(chain string) bool { _, ok := d.Policies[chain]; return ok }

func xtBin(backend, tool string) string {
	// tool is "iptables", "iptables-save" or "iptables-restore"
	rest := strings.TrimPrefix(tool, "iptables")
	return "iptables-" + backend + rest
}

// readXT dumps the filter table of one backend. ok is false when the backend's tools are
// absent or the backend holds no filter table. An iptables-nft table that nft rules made
// unreadable to iptables is an error naming it.
func readXT(ctx context.Context, env Env, backend string) (*xtDump, bool, error) {
	// A legacy table is made the first time anything reads it in a network namespace: look in
	// /proc first, so detecting the firewall never leaves a legacy filter table behind.
	if backend == "legacy" {
		// No such file: ip_tables is not even loaded, so there is no legacy table.
		names, err := env.run(ctx, "cat", "/proc/net/ip_tables_names")
		if err != nil || !bytes.Contains(append([]byte("\n"), names...), []byte("\nfilter\n")) {
			return nil, false, nil
		}
	}
	// stderr too: iptables-nft-save warns there, exiting 0, about a table it cannot show.
	out, err := env.run(ctx, "sh", "-c", xtBin(backend, "iptables-save")+" -t filter 2>&1")
	if err != nil {
		if strings.Contains(err.Error(), "exit status 127") || strings.Contains(err.Error(), "not found") {
			return nil, false, nil
		}
		if strings.Contains(err.Error(), "incompatible") {
			return nil, false, fmt.Errorf("iptables-%s filter table is unreadable (changed by a tool meshd does not speak): %w", backend, err)
		}
		// legacy: no filter table loaded ("Table does not exist")
		if strings.Contains(err.Error(), "does not exist") || bytes.Contains(out, []byte("does not exist")) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("read iptables-%s filter table: %w", backend, err)
	}
	if bytes.Contains(out, []byte("incompatible")) {
		return nil, false, fmt.Errorf("iptables-%s filter table is unreadable (changed by a tool meshd does not speak): %s", backend, firstLineWith(out, "incompatible"))
	}
	d := parseXT(out)
	d.Backend = backend
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

func parseXT(out []byte) *xtDump {
	d := &xtDump{Policies: map[string]string{}}
	inFilter := false
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(l, "*"):
			inFilter = l == "*filter"
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
			d.Rules = append(d.Rules, xtRule{Chain: f[1], Line: l, Mark: xtComment(l)})
		}
	}
	return d
}

// xtComment extracts a meshd comment from a rule line.
func xtComment(l string) string {
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
	if strings.HasPrefix(s, markPrefix) {
		return s
	}
	return ""
}

// dockerBridges are the interfaces Docker's DOCKER chain forwards to (docker0, br-…).
func (d *xtDump) dockerBridges() map[string]bool {
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
func isDockerRule(r xtRule, bridges map[string]bool) bool {
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

// xtOpeningArgs is the iptables rule (without -A/-I and chain) that implements o.
// A forwarded opening matches conntrack's original destination port, the port the client
// addressed before Docker's DNAT in nat PREROUTING rewrote it.
func xtOpeningArgs(o Opening, priv Private) (string, error) {
	var b strings.Builder
	if o.Path == PathRouted {
		if priv.Interface == "" || !priv.Range.IsValid() {
			return "", fmt.Errorf("opening %s: routed between the private network's addresses, but its interface (%q) or range (%s) is not known", o, priv.Interface, priv.Range)
		}
		r := priv.Range.Masked()
		return fmt.Sprintf(`-i %s -o %s -s %s -d %s -m comment --comment "%s" -j ACCEPT`, priv.Interface, priv.Interface, r, r, o.Mark()), nil
	}
	fmt.Fprintf(&b, "-p %s", o.Proto)
	switch o.From {
	case FromAnywhere:
	case FromPrivate:
		if priv.Range.IsValid() {
			fmt.Fprintf(&b, " -s %s", priv.Range.Masked())
		}
		if priv.Interface != "" {
			fmt.Fprintf(&b, " -i %s", priv.Interface)
		}
		if priv.Interface == "" && !priv.Range.IsValid() {
			return "", fmt.Errorf("opening %s: from private, but no private network is known", o)
		}
	default:
		fmt.Fprintf(&b, " -s %s", o.From)
	}
	if o.Path == PathForwarded {
		fmt.Fprintf(&b, " -m conntrack --ctorigdstport %d", o.Port)
	} else {
		fmt.Fprintf(&b, " -m %s --dport %d", o.Proto, o.Port)
	}
	fmt.Fprintf(&b, ` -m comment --comment "%s" -j ACCEPT`, o.Mark())
	return b.String(), nil
}

// xtApply removes and inserts rules in the filter table in one iptables-restore --noflush.
func xtApply(ctx context.Context, env Env, backend string, del []xtRule, add []string) error {
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
	if _, err := env.runIn(ctx, []byte(b.String()), xtBin(backend, "iptables-restore"), "--noflush"); err != nil {
		return fmt.Errorf("iptables-%s-restore --noflush (%d removed, %d added): %w", backend, len(del), len(add), err)
	}
	return nil
}
