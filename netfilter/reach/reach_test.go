package reach

import (
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"meshd/netfilter/xt"
)

// ruleset parses iptables-save text (filter: IPv4; filter6: IPv6, "" for none) with Docker's nat
// table, and an nftables ruleset from testdata when nft names one.
func ruleset(t *testing.T, filter, filter6, nft string) *Ruleset {
	t.Helper()
	fs := []*xt.Dump{dump(filter, "filter", false)}
	if filter6 != "" {
		fs = append(fs, dump(filter6, "filter", true))
	}
	var js, text []byte
	if nft != "" {
		var err error
		if js, err = os.ReadFile("testdata/" + nft + ".json"); err != nil {
			t.Fatal(err)
		}
		if text, err = os.ReadFile("testdata/" + nft + ".txt"); err != nil {
			t.Fatal(err)
		}
	}
	rs, err := Parse(fs, []*xt.Dump{dump(dockerNat, "nat", false)}, js, text)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func dump(s, table string, v6 bool) *xt.Dump {
	d := xt.Parse([]byte(s), table)
	d.Backend, d.V6 = "nft", v6
	return d
}

func tcp(port uint16) Port { return Port{HostPort: port, Proto: "tcp"} }

// check asserts who reaches port, and that each of closedBy is named among what stops the rest.
func check(t *testing.T, rs *Ruleset, port uint16, from []string, closedBy ...string) {
	t.Helper()
	a := rs.Reach(tcp(port))
	if a.Refused != "" {
		t.Fatalf("port %d refused: %s", port, a.Refused)
	}
	if !slices.Equal(a.From, from) {
		t.Errorf("port %d: reached from %q, want %q (closed by %q)", port, a.From, from, a.ClosedBy)
	}
	for _, c := range closedBy {
		if !slices.ContainsFunc(a.ClosedBy, func(s string) bool { return strings.Contains(s, c) }) {
			t.Errorf("port %d: closed by %q, want %q named", port, a.ClosedBy, c)
		}
	}
}

// Docker alone publishes every port to anywhere; ufw's default (deny incoming) does not stop
// it, since Docker's FORWARD rules come before ufw's: over IPv4 9090 is open to anywhere, and
// over IPv6 (Docker's proxy, on ufw's INPUT) only what ufw allows is.
func TestUnitDockerPublishesPastUFWDefault(t *testing.T) {
	check(t, ruleset(t, dockerOnly, "", ""), 9090, []string{Anywhere})
	rs := ruleset(t, ufwDefault, ufw6, "")
	check(t, rs, 9090, []string{"0.0.0.0/0"}, "ip6tables-nft filter chain INPUT policy drop")
	check(t, rs, 8080, []string{Anywhere})
	// 5000 has no DNAT: it is the machine's own (a proxy), and ufw's INPUT closes it.
	check(t, rs, 5000, nil, "iptables-nft filter chain INPUT policy drop", "ip6tables-nft filter chain INPUT policy drop")
}

// ufw-docker's DOCKER-USER lets the private ranges through and ufw's route rules decide the
// rest: 9090 is reached from the private ranges and the one network a route rule allows.
func TestUnitUFWDockerRules(t *testing.T) {
	rs := ruleset(t, ufwDocker, ufw6, "")
	check(t, rs, 9090, []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "203.0.113.0/24"},
		"-A ufw-docker-logging-deny -j DROP")
	check(t, rs, 7001, []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"})
	// Its rule for DNS answers (udp from source port 53 to 1024-65535) lets anyone in who sends
	// from port 53: the client chooses its source port, so all of IPv4 reaches udp 5353.
	if a := rs.Reach(Port{HostPort: 5353, Proto: "udp"}); !slices.Equal(a.From, []string{"0.0.0.0/0"}) {
		t.Errorf("udp 5353: %+v, want all of IPv4 (ufw's IPv6 input closes it)", a)
	}
}

// A plain rules.v4 dropping in DOCKER-USER what is new toward docker0 closes 9090 to everyone,
// naming the drop; 8080, let through on the port the client addressed, is open.
func TestUnitPlainIptablesDockerUserDrop(t *testing.T) {
	rs := ruleset(t, plainIptables, plain6, "")
	check(t, rs, 9090, nil, "iptables-nft filter: -A DOCKER-USER -o docker0 -m conntrack --ctstate NEW -j DROP",
		"ip6tables-nft filter chain INPUT policy drop")
	check(t, rs, 8080, []string{Anywhere})
}

// An nftables forward chain with policy drop: 9090 only from the LAN, 8080 from anywhere, 7001
// from 10.0.0.0/8 (a drop of the rest in a chain jumped to), each also through Docker's own
// FORWARD in iptables-nft; over IPv6 the input chain decides.
func TestUnitNftablesForwardFilter(t *testing.T) {
	rs := ruleset(t, dockerOnly, "", "nftables")
	check(t, rs, 9090, []string{"192.168.0.0/16"}, "nft inet filter chain forward policy drop", "nft inet filter chain input policy drop")
	check(t, rs, 8080, []string{Anywhere})
	check(t, rs, 7001, []string{"10.0.0.0/8"}, `nft inet filter chain extra: tcp dport 7000-7010 ip saddr != 10.0.0.0/8 drop`)
	// A match on a packet mark is not understood: refused, naming the rule.
	a := rs.Reach(tcp(6000))
	if want := `nft inet filter chain extra: tcp dport 6000 meta mark 0x00000001 accept`; !strings.Contains(a.Refused, want) || len(a.From) > 0 {
		t.Errorf("6000: %+v, want refused naming %q", a, want)
	}
}

// A rule the packet may meet and that is not understood (an ipset, a mark, an interface that is
// neither loopback nor a container bridge) is a refusal naming it; one the packet cannot meet
// (another protocol) is passed over.
func TestUnitRefusesWhatItCannotRead(t *testing.T) {
	for _, c := range []struct{ rule, why string }{
		{"-A DOCKER-USER -m set --match-set admins src -j RETURN", "match --match-set admins is not understood"},
		{"-A DOCKER-USER -m mark --mark 0x1 -j DROP", "match --mark 0x1"},
		{"-A DOCKER-USER -i eth0 -j DROP", "input interface eth0"},
		{"-A DOCKER-USER -m string --string evil --algo bm -j DROP", "match --string evil"},
		{"-A DOCKER-USER -j NFQUEUE --queue-num 1", "target NFQUEUE"},
	} {
		fw := strings.Replace(plainIptables, "-A DOCKER-USER -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN\n",
			"-A DOCKER-USER -p udp -m set --match-set dns src -j RETURN\n"+c.rule+"\n", 1)
		a := ruleset(t, fw, plain6, "").Reach(tcp(9090))
		if !strings.Contains(a.Refused, "iptables-nft filter: "+c.rule) || !strings.Contains(a.Refused, c.why) || len(a.From) > 0 {
			t.Errorf("%s: answer %+v, want refused naming the rule and %q", c.rule, a, c.why)
		}
	}
}

// firewalld's zones are refused.
func TestUnitRefusesFirewalld(t *testing.T) {
	js := `{"nftables":[{"table":{"family":"inet","name":"firewalld","handle":1}},
{"chain":{"family":"inet","table":"firewalld","name":"filter_FORWARD","handle":1,"type":"filter","hook":"forward","prio":10,"policy":"accept"}}]}`
	rs, err := Parse([]*xt.Dump{dump(dockerOnly, "filter", false)}, []*xt.Dump{dump(dockerNat, "nat", false)}, []byte(js), nil)
	if err != nil {
		t.Fatal(err)
	}
	if a := rs.Reach(tcp(9090)); !strings.Contains(a.Refused, "firewalld") {
		t.Errorf("answer %+v, want firewalld refused", a)
	}
}

// meshd's own marked rules are not the found firewall's: an accept meshd put in DOCKER-USER
// does not open 9090.
func TestUnitSkipsMeshdRules(t *testing.T) {
	fw := strings.Replace(plainIptables, "-A DOCKER-USER -i docker0 -j RETURN\n",
		"-A DOCKER-USER -i docker0 -j RETURN\n-A DOCKER-USER -p tcp -m conntrack --ctorigdstport 9090 -m comment --comment \"meshd:metrics:forwarded:tcp/9090:anywhere\" -j ACCEPT\n", 1)
	check(t, ruleset(t, fw, plain6, ""), 9090, nil)
}

// The source sets: what is taken out of a set and put back merges into what it was.
func TestUnitSets(t *testing.T) {
	s := all(false).minus(netip.MustParsePrefix("10.1.0.0/16"))
	if len(s) != 16 || s.full() {
		t.Fatalf("0/0 minus 10.1/16 = %v", s)
	}
	if back := s.or(set{netip.MustParsePrefix("10.1.0.0/16")}); !back.full() {
		t.Errorf("put back: %v", back)
	}
	got := s.within(set{netip.MustParsePrefix("10.0.0.0/8")})
	if len(got) != 8 || slices.Contains(got, netip.MustParsePrefix("10.1.0.0/16")) {
		t.Errorf("10/8 without 10.1/16 = %v", got)
	}
}

// nftables' "ct state vmap": a new connection takes the verdict "new" maps to.
func TestUnitNftablesCtStateVmap(t *testing.T) {
	js := `{"nftables":[{"table":{"family":"inet","name":"f","handle":1}},
{"chain":{"family":"inet","table":"f","name":"forward","handle":1,"type":"filter","hook":"forward","prio":0,"policy":"drop"}},
{"chain":{"family":"inet","table":"f","name":"fw_new","handle":2}},
{"rule":{"family":"inet","table":"f","chain":"forward","handle":3,"expr":[{"vmap":{"key":{"ct":{"key":"state"}},"data":{"set":[["invalid",{"drop":null}],["established",{"accept":null}],["related",{"accept":null}],["new",{"jump":{"target":"fw_new"}}]]}}}]}},
{"rule":{"family":"inet","table":"f","chain":"fw_new","handle":4,"expr":[{"match":{"op":"==","left":{"payload":{"protocol":"tcp","field":"dport"}},"right":8080}},{"accept":null}]}}]}`
	rs, err := Parse([]*xt.Dump{dump(dockerOnly, "filter", false)}, []*xt.Dump{dump(dockerNat, "nat", false)}, []byte(js), nil)
	if err != nil {
		t.Fatal(err)
	}
	check(t, rs, 8080, []string{Anywhere})
	// 9090: closed over IPv4; over IPv6 (the proxy, on input, which nothing filters) open.
	check(t, rs, 9090, []string{"::/0"}, "nft inet f chain forward policy drop")
}
