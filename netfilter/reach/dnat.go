package reach

import (
	"fmt"
	"net/netip"
	"strings"

	"meshd/netfilter/xt"
)

// dnat is one DNAT rule of an iptables nat table, as Docker writes one for a published port:
// "-A DOCKER ! -i docker0 -p tcp -m tcp --dport 9090 -j DNAT --to-destination 172.17.0.2:9091".
type dnat struct {
	where   string
	v6      bool
	proto   string
	ports   [][2]uint16
	hostIP  netip.Addr // -d: the port is published on this address of the machine only
	bridge  string     // ! -i: the container's bridge
	to      netip.AddrPort
	unknown string
}

// dnats reads the DNAT rules of a nat table, and the bridges its DOCKER chain names (Docker's
// "-A DOCKER -i BRIDGE -j RETURN", and each DNAT's "! -i BRIDGE").
func dnats(d *xt.Dump, bridges map[string]bool) []dnat {
	var out []dnat
	name := xt.Name(d.Backend, d.V6) + " nat"
	for _, r := range d.Rules {
		f := tokens(r.Line)
		if r.Chain == "DOCKER" && len(f) == 6 && f[2] == "-i" && f[4] == "-j" && f[5] == "RETURN" {
			bridges[f[3]] = true
		}
		if r.Mark != "" || !strings.Contains(r.Line, "-j DNAT") {
			continue
		}
		n := dnat{where: name + ": " + r.Line, v6: d.V6}
		for i := 2; i < len(f); i++ {
			v := ""
			if i+1 < len(f) {
				v = f[i+1]
			}
			switch f[i] {
			case "-m", "-j", "--comment":
				i++
			case "!":
				if v == "-i" && i+2 < len(f) {
					n.bridge = f[i+2]
					bridges[n.bridge] = true
					i += 2
				} else {
					n.unknown = "a negated match other than ! -i"
				}
			case "-p":
				n.proto = v
				i++
			case "--dport", "--dports":
				rs, err := portRanges(v)
				if err != nil {
					n.unknown = err.Error()
				}
				n.ports = rs
				i++
			case "-d":
				ps, err := prefixes(v)
				if err != nil || len(ps) != 1 || !ps[0].IsSingleIP() {
					n.unknown = "destination " + v + " is not one address"
				} else {
					n.hostIP = ps[0].Addr()
				}
				i++
			case "--to-destination":
				ap, err := netip.ParseAddrPort(v)
				if err != nil {
					n.unknown = fmt.Sprintf("DNAT to %s is not one address and port", v)
				}
				n.to = ap
				i++
			default:
				n.unknown = "match " + f[i] + " is not understood"
			}
		}
		out = append(out, n)
	}
	return out
}

// meets says whether n rewrites a new connection to the published port p in its family; a rule
// for the port that says more than Docker's is an error naming it.
func (n dnat) meets(p Port) (bool, error) {
	if n.proto != p.Proto || !portIn(n.ports, p.HostPort) {
		return false, nil
	}
	if n.hostIP.IsValid() && (p.HostIP == "" || n.hostIP.String() != p.HostIP) {
		return false, nil
	}
	if n.unknown != "" {
		return false, &refusal{where: n.where, why: n.unknown}
	}
	return true, nil
}
