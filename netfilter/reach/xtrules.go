package reach

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"meshd/netfilter/xt"
)

// nonTerminal are iptables targets that leave the packet to the next rule; a mark one sets is
// read by no match this package understands, so a rule reading it is refused where it counts.
var nonTerminal = map[string]bool{"LOG": true, "NFLOG": true, "ULOG": true, "MARK": true, "CONNMARK": true,
	"TCPMSS": true, "AUDIT": true, "TRACE": true, "CLASSIFY": true, "DSCP": true, "TOS": true, "SET": true}

// fromDump is one iptables filter table in this package's terms (meshd's marked rules left out).
func fromDump(d *xt.Dump) *table {
	t := &table{name: xt.Name(d.Backend, d.V6) + " filter", v4: !d.V6, v6: d.V6, chains: map[string]*chain{}}
	for name, pol := range d.Policies {
		c := &chain{name: name}
		if pol != "-" {
			c.policy = strings.ToLower(pol)
		}
		t.chains[name] = c
	}
	for _, r := range d.Rules {
		c := t.chains[r.Chain]
		if c == nil || r.Mark != "" {
			continue
		}
		c.rules = append(c.rules, xtRule(t.name, r.Line, func(n string) bool { return t.chains[n] != nil }))
	}
	if c := t.chains["INPUT"]; c != nil {
		t.input = []*chain{c}
	}
	if c := t.chains["FORWARD"]; c != nil {
		t.fwd = []*chain{c}
	}
	return t
}

// tokens splits an iptables-save line, keeping a quoted word (a comment) whole.
func tokens(l string) []string {
	var out []string
	var b strings.Builder
	quoted, in := false, false
	for i := 0; i < len(l); i++ {
		ch := l[i]
		switch {
		case ch == '\\' && quoted && i+1 < len(l):
			i++
			b.WriteByte(l[i])
		case ch == '"':
			quoted, in = !quoted, true
		case ch == ' ' && !quoted:
			if in {
				out = append(out, b.String())
				b.Reset()
				in = false
			}
		default:
			b.WriteByte(ch)
			in = true
		}
	}
	if in {
		out = append(out, b.String())
	}
	return out
}

// xtRule reads one "-A CHAIN ..." line.
func xtRule(tname, line string, isChain func(string) bool) rule {
	f := tokens(line)
	r := rule{where: fmt.Sprintf("%s: %s", tname, line)}
	if len(f) < 2 {
		r.unknown = "is not a rule"
		return r
	}
	f = f[2:]
	neg := false
	var proto string
	bad := func(what string) { r.matches = append(r.matches, match{unknown: what}) }
	arg := func(i int) string {
		if i < len(f) {
			return f[i]
		}
		return ""
	}
	for i := 0; i < len(f); i++ {
		opt, v := f[i], arg(i+1)
		n := neg
		neg = false
		switch opt {
		case "!":
			neg = true
			continue
		case "-m":
			i++
			continue
		case "-s", "--source", "--ctorigsrc":
			ps, err := prefixes(v)
			if err != nil {
				bad(fmt.Sprintf("%s %s: %v", opt, v, err))
			}
			r.matches = append(r.matches, match{isSrc: true, src: ps, neg: n})
		case "-d", "--destination":
			ps, err := prefixes(v)
			if err != nil {
				bad(fmt.Sprintf("%s %s: %v", opt, v, err))
			}
			r.matches = append(r.matches, dstIn(ps, n))
		case "-i", "--in-interface":
			r.matches = append(r.matches, iifOutside(v, n))
		case "-o", "--out-interface":
			r.matches = append(r.matches, oifIs(v, n))
		case "-p", "--protocol":
			proto = v
			r.matches = append(r.matches, protoIs([]string{v}, n))
		case "--dport", "--destination-port", "--dports", "--destination-ports", "--ports", "--ctorigdstport":
			rs, err := portRanges(v)
			if err != nil {
				bad(fmt.Sprintf("%s %s: %v", opt, v, err))
				break
			}
			orig := opt == "--ctorigdstport"
			r.matches = append(r.matches, match{test: func(p *packet) res {
				port := p.dport
				if orig {
					port = p.origDport
				}
				return of(portIn(rs, port) != n)
			}})
		case "--sport", "--source-port", "--sports", "--source-ports":
			// The client chooses its source port.
			r.matches = append(r.matches, match{test: func(*packet) res { return maybe }})
		case "--ctstate", "--state":
			r.matches = append(r.matches, ctState(strings.Split(strings.ToLower(v), ","), n))
		case "--ctstatus":
			r.matches = append(r.matches, match{unknown: "matches conntrack status " + v,
				test: func(p *packet) res {
					if strings.EqualFold(v, "DNAT") {
						return of(!p.input != n)
					}
					return unk
				}})
		case "--tcp-flags":
			mask, comp := strings.Split(v, ","), strings.Split(arg(i+2), ",")
			i++
			// A new connection starts with SYN alone: its flags under the mask are SYN, if the
			// mask has it.
			has := func(xs []string, f string) bool {
				for _, x := range xs {
					if x == f || x == "ALL" {
						return true
					}
				}
				return false
			}
			want := has(mask, "SYN")
			ok := has(comp, "SYN") == want
			for _, c := range comp {
				if c != "SYN" && c != "NONE" {
					ok = false
				}
			}
			r.matches = append(r.matches, match{test: func(*packet) res { return of(ok != n) }})
		case "--syn":
			r.matches = append(r.matches, match{test: func(*packet) res { return of(!n) }})
			continue
		case "--dst-type", "--src-type":
			types := strings.Split(v, ",")
			dst := opt == "--dst-type"
			r.matches = append(r.matches, match{test: func(p *packet) res {
				in := false
				for _, ty := range types {
					switch {
					case dst && ty == "LOCAL" && p.input, dst && ty == "UNICAST", !dst && ty == "UNICAST":
						in = true
					}
				}
				return of(in != n)
			}})
		case "--pkt-type":
			r.matches = append(r.matches, match{test: func(*packet) res { return of((v == "unicast") != n) }})
		case "--comment":
		case "--limit", "--limit-burst", "--hitcount", "--seconds", "--name", "--mask", "--rsource", "--rcheck",
			"--update", "--set", "--rttl", "--remove", "--hashlimit", "--hashlimit-upto", "--hashlimit-above",
			"--hashlimit-burst", "--hashlimit-mode", "--hashlimit-name", "--hashlimit-htable-expire", "--connlimit-above",
			"--connlimit-upto", "--connlimit-mask", "--connlimit-saddr", "--reap":
			// Rates and counts: a packet may meet them or not.
			r.matches = append(r.matches, match{test: func(*packet) res { return maybe }})
			if !strings.HasPrefix(v, "-") && opt != "--rsource" && opt != "--rcheck" && opt != "--update" &&
				opt != "--set" && opt != "--rttl" && opt != "--remove" && opt != "--reap" {
				i++
			}
			continue
		case "--icmp-type", "--icmpv6-type":
			if proto != "icmp" && proto != "ipv6-icmp" && proto != "icmpv6" {
				bad(opt + " " + v)
			}
		case "-j", "--jump", "-g", "--goto":
			switch {
			case v == "ACCEPT":
				r.verdict = vAccept
			case v == "DROP" || v == "REJECT":
				r.verdict = vDrop
			case v == "RETURN":
				r.verdict = vReturn
			case nonTerminal[v]:
				return r
			case !isChain(v):
				r.unknown = "target " + v + " is not understood"
				return r
			default:
				r.verdict, r.target = vJump, v
				if opt == "-g" || opt == "--goto" {
					r.verdict = vGoto
				}
			}
			return r
		default:
			bad(fmt.Sprintf("match %s %s is not understood", opt, v))
			if !strings.HasPrefix(v, "-") && v != "!" {
				i++
			}
			continue
		}
		if opt != "--syn" {
			i++
		}
	}
	return r
}

// protoIs tests the protocol; "all" and 0 are any.
func protoIs(ps []string, neg bool) match {
	return match{test: func(p *packet) res {
		in := false
		for _, x := range ps {
			x = strings.ToLower(x)
			num := map[string]string{"6": "tcp", "17": "udp"}[x]
			if x == p.proto || num == p.proto || x == "all" || x == "0" {
				in = true
			}
		}
		return of(in != neg)
	}}
}

// ctState tests conntrack's state of a new connection from outside: NEW (and DNAT, forwarded).
func ctState(states []string, neg bool) match {
	return match{test: func(p *packet) res {
		in := false
		for _, s := range states {
			if s == "new" || (s == "dnat" && !p.input) {
				in = true
			}
		}
		return of(in != neg)
	}}
}

// prefixes reads an address, a prefix, or a comma list of them.
func prefixes(v string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, x := range strings.Split(v, ",") {
		if p, err := netip.ParsePrefix(x); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(x)
		if err != nil {
			return nil, fmt.Errorf("%q is not an address or prefix", x)
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// portRanges reads "80", "1024:65535", "80,443,8000:8100".
func portRanges(v string) ([][2]uint16, error) {
	var out [][2]uint16
	for _, x := range strings.Split(v, ",") {
		lo, hi, isRange := strings.Cut(x, ":")
		if !isRange {
			hi = lo
		}
		if lo == "" {
			lo = "0"
		}
		if hi == "" {
			hi = "65535"
		}
		a, err1 := strconv.ParseUint(lo, 10, 16)
		b, err2 := strconv.ParseUint(hi, 10, 16)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%q is not a port or range", x)
		}
		out = append(out, [2]uint16{uint16(a), uint16(b)})
	}
	return out, nil
}
