package lab

import (
	"context"
	"fmt"
	"net"
	"regexp"
	"sort"
	"strings"
)

// What a test compares before and after an event: the found firewall's rules, the tunnel's
// configuration, the containers. Each dump leaves out what legitimately differs between two
// boots (packet counters, Docker's per-container addresses, handshake times).

var counters = regexp.MustCompile(`\[\d+:\d+\]`)

// FirewallKind reports which found firewall the machine boots: ufw when /etc/ufw/ufw.conf
// enables it, nftables when nftables.service is enabled, iptables when netfilter-persistent.service
// is, "" otherwise.
func (m *Machine) FirewallKind(ctx context.Context) (FirewallKind, error) {
	out, err := m.Run(ctx, `if grep -qi '^ENABLED=yes' /etc/ufw/ufw.conf; then echo ufw; elif [ -e /etc/systemd/system/sysinit.target.wants/nftables.service ]; then echo nftables; elif [ -e /etc/systemd/system/sysinit.target.wants/netfilter-persistent.service ]; then echo iptables; fi`)
	return FirewallKind(strings.TrimSpace(out)), err
}

// FirewallDump is the found firewall's rules as the kernel holds them now: for ufw, `ufw status
// verbose` and every iptables rule in a ufw chain or DOCKER-USER with the built-in chains'
// policies; for nftables, every table but the ones iptables-nft keeps for Docker; for plain
// iptables, the built-in policies and the INPUT and DOCKER-USER rules. Counters are left out.
func (m *Machine) FirewallDump(ctx context.Context) (string, error) {
	kind, err := m.FirewallKind(ctx)
	if err != nil {
		return "", err
	}
	switch kind {
	case FirewallUFW:
		status, err := m.Exec(ctx, "ufw", "status", "verbose")
		if err != nil {
			return "", err
		}
		// stderr apart: iptables-save's warnings would otherwise land mid-line in the dump.
		save, err := m.Exec(ctx, "sh", "-c", "iptables-save 2>/dev/null")
		if err != nil {
			return "", err
		}
		var keep []string
		for _, line := range strings.Split(save, "\n") {
			line = strings.TrimSpace(counters.ReplaceAllString(line, ""))
			f := strings.Fields(line)
			switch {
			case len(f) == 0 || strings.HasPrefix(line, "#"):
			case strings.HasPrefix(line, "*") || line == "COMMIT":
				keep = append(keep, line)
			case strings.HasPrefix(line, ":"):
				if strings.HasPrefix(line, ":ufw") || strings.HasPrefix(line, ":DOCKER-USER") || !strings.HasSuffix(line, " -") {
					keep = append(keep, line)
				}
			case len(f) >= 2 && f[0] == "-A" && (strings.HasPrefix(f[1], "ufw") || f[1] == "DOCKER-USER" || strings.Contains(line, "-j ufw")):
				keep = append(keep, line)
			}
		}
		return status + "\n" + strings.Join(keep, "\n") + "\n", nil
	case FirewallIptables:
		// The filter table's built-in policies, INPUT and DOCKER-USER: the chains the found
		// rules live in (Docker's own chains and its jumps in FORWARD are the engine's).
		save, err := m.Exec(ctx, "sh", "-c", "iptables-save -t filter 2>/dev/null")
		if err != nil {
			return "", err
		}
		var keep []string
		for _, line := range strings.Split(save, "\n") {
			line = strings.TrimSpace(counters.ReplaceAllString(line, ""))
			f := strings.Fields(line)
			switch {
			case len(f) == 0 || strings.HasPrefix(line, "#"):
			case line == ":INPUT" || line == ":FORWARD" || line == ":OUTPUT" || (len(f) == 2 && (f[0] == ":INPUT" || f[0] == ":FORWARD" || f[0] == ":OUTPUT")):
				keep = append(keep, line)
			case len(f) >= 2 && f[0] == "-A" && (f[1] == "INPUT" || f[1] == "DOCKER-USER"):
				keep = append(keep, line)
			}
		}
		return strings.Join(keep, "\n") + "\n", nil
	case FirewallNftables:
		tables, err := m.Exec(ctx, "nft", "list", "tables")
		if err != nil {
			return "", err
		}
		var out []string
		for _, line := range strings.Split(strings.TrimSpace(tables), "\n") {
			f := strings.Fields(line) // table FAMILY NAME
			if len(f) != 3 || ((f[1] == "ip" || f[1] == "ip6") && (f[2] == "filter" || f[2] == "nat")) {
				continue
			}
			t, err := m.Exec(ctx, "nft", "list", "table", f[1], f[2])
			if err != nil {
				return "", err
			}
			out = append(out, t)
		}
		sort.Strings(out)
		return strings.Join(out, ""), nil
	}
	return "", nil
}

// TunnelDump is a WireGuard interface's configuration (`wg showconf`: key, port, peers, their
// allowed addresses and endpoints, peers sorted by key) and its addresses but link-local ones.
func (m *Machine) TunnelDump(ctx context.Context, iface string) (string, error) {
	conf, err := m.Exec(ctx, "wg", "showconf", iface)
	if err != nil {
		return "", err
	}
	addrs, err := m.Run(ctx, `ip -o addr show dev "$1" scope global | awk '{print $3, $4}'`, iface)
	if err != nil {
		return "", err
	}
	sections := strings.Split(strings.TrimSpace(conf), "\n\n")
	sort.Strings(sections[1:])
	return strings.Join(sections, "\n\n") + "\n\n" + addrs, nil
}

// Containers lists the machine's containers, one line each: name, image, published ports, state.
func (m *Machine) Containers(ctx context.Context) (string, error) {
	out, err := m.Docker(ctx, "ps", "-a", "--format", "{{.Names}} {{.Image}} {{.Ports}} {{.State}}")
	if err != nil {
		return "", err
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	sort.Strings(lines)
	return strings.Join(lines, "\n"), nil
}

// Listening lists the TCP ports something listens on in the machine (its own namespace; what
// Docker publishes shows as docker-proxy's listeners).
func (m *Machine) Listening(ctx context.Context) ([]int, error) {
	out, err := m.Run(ctx, `ss -Htln | awk '{print $4}' | sed 's/.*://' | sort -un`)
	if err != nil {
		return nil, err
	}
	var ports []int
	for _, f := range strings.Fields(out) {
		var p int
		for _, c := range f {
			if c < '0' || c > '9' {
				p = -1
				break
			}
			p = p*10 + int(c-'0')
		}
		if p > 0 {
			ports = append(ports, p)
		}
	}
	return ports, nil
}

// Reach makes one call from the machine: target is http://HOST:PORT/PATH (the body is returned)
// or tcp://HOST:PORT (a connection accepted is success); HOST may be an IPv6 address in brackets.
// Calls time out after two seconds.
func (m *Machine) Reach(ctx context.Context, target string) (string, error) {
	if hostport, ok := strings.CutPrefix(target, "tcp://"); ok {
		host, port, err := net.SplitHostPort(hostport)
		if err != nil {
			return "", fmt.Errorf("%s: reach %s: %w", m.Name, target, err)
		}
		return m.Exec(ctx, "timeout", "2", "bash", "-c", `exec 3<>"/dev/tcp/$1/$2" && echo connected`, "bash", host, port)
	}
	return m.Exec(ctx, "curl", "-sS", "--fail", "--max-time", "2", "--noproxy", "*", target)
}
