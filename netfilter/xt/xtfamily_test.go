package xt

import (
	"net/netip"
	"strings"
	"testing"

	"meshd/netfilter"
)

// Each opening's rule in each family's table: the same rule where its source can be matched in
// both, none in the family its source is not of, and a forwarded opening's proxy rule matching the
// port the machine's own proxy listens on.
func TestUnitXTRuleFamilies(t *testing.T) {
	priv := netfilter.Private{Interface: "meshd0", Range: netip.MustParsePrefix("10.44.0.0/24")}
	mark := func(o netfilter.Opening) string { return ` -m comment --comment "` + o.Mark() + `" -j ACCEPT` }
	web := netfilter.Opening{Module: "web", Proto: "tcp", Port: 8080, From: netfilter.FromAnywhere, Path: netfilter.PathIncoming}
	app := netfilter.Opening{Module: "app", Proto: "udp", Port: 5353, From: netfilter.FromAnywhere, Path: netfilter.PathForwarded}
	store := netfilter.Opening{Module: "store", Proto: "tcp", Port: 6379, From: netfilter.FromPrivate, Path: netfilter.PathIncoming}
	doc4 := netfilter.Opening{Module: "ops", Proto: "tcp", Port: 9100, From: "192.0.2.7/24", Path: netfilter.PathForwarded}
	doc6 := netfilter.Opening{Module: "ops", Proto: "tcp", Port: 9100, From: "2001:db8::7/32", Path: netfilter.PathIncoming}
	routed := netfilter.RoutedOpening("mesh")
	for _, c := range []struct {
		o          netfilter.Opening
		v4, v6, px string // the rule in iptables, in ip6tables, the proxy's in ip6tables
	}{
		{web, "-p tcp -m tcp --dport 8080" + mark(web), "-p tcp -m tcp --dport 8080" + mark(web), "-p tcp -m tcp --dport 8080" + mark(web)},
		{app, "-p udp -m conntrack --ctorigdstport 5353" + mark(app), "-p udp -m conntrack --ctorigdstport 5353" + mark(app), "-p udp -m udp --dport 5353" + mark(app)},
		{store, "-p tcp -s 10.44.0.0/24 -i meshd0 -m tcp --dport 6379" + mark(store), "", ""},
		{doc4, "-p tcp -s 192.0.2.0/24 -m conntrack --ctorigdstport 9100" + mark(doc4), "", ""},
		{doc6, "", "-p tcp -s 2001:db8::/32 -m tcp --dport 9100" + mark(doc6), "-p tcp -s 2001:db8::/32 -m tcp --dport 9100" + mark(doc6)},
		{routed, "-i meshd0 -o meshd0 -s 10.44.0.0/24 -d 10.44.0.0/24" + mark(routed), "", ""},
	} {
		for _, f := range []struct {
			name string
			got  func() (string, error)
			want string
		}{
			{"iptables", func() (string, error) { return openingArgs(c.o, priv, false) }, c.v4},
			{"ip6tables", func() (string, error) { return openingArgs(c.o, priv, true) }, c.v6},
			{"ip6tables proxy", func() (string, error) { return proxyArgs(c.o, priv, true) }, c.px},
		} {
			got, err := f.got()
			if err != nil || got != f.want {
				t.Errorf("%s in %s:\n got %q (%v)\nwant %q", c.o, f.name, got, err, f.want)
			}
		}
	}
	// A private network known only by its interface: its rule matches the interface in both.
	for _, v6 := range []bool{false, true} {
		if got, _ := openingArgs(store, netfilter.Private{Interface: "meshd0"}, v6); got != "-p tcp -i meshd0 -m tcp --dport 6379"+mark(store) {
			t.Errorf("store on an interface alone (v6 %v): %q", v6, got)
		}
	}
}

// Whether a family's table filters, as the driver and Detect decide it: a rule of the found
// firewall's own, or a closed INPUT policy; not Docker's plumbing, its closed FORWARD policy, or
// meshd's own rules.
func TestUnitXTFilters(t *testing.T) {
	dump := func(s string) *Dump { return parse([]byte("*filter\n" + s + "COMMIT\n")) }
	docker := ":INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:DOCKER-USER - [0:0]\n:DOCKER - [0:0]\n" +
		"-A FORWARD -j DOCKER-USER\n-A FORWARD -o docker0 -j DOCKER\n-A DOCKER-USER -j RETURN\n"
	marked := `-A INPUT -p tcp -m tcp --dport 80 -m comment --comment "meshd:web:incoming:tcp/80:anywhere" -j ACCEPT` + "\n"
	for _, c := range []struct {
		name    string
		table   string
		in, fwd int
		filters bool
	}{
		{"empty", ":INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n", 0, 0, false},
		{"Docker's alone", docker, 0, 0, false},
		{"meshd's rule alone", docker + marked, 0, 0, false},
		{"a closed INPUT", ":INPUT DROP [0:0]\n:FORWARD ACCEPT [0:0]\n", 0, 0, true},
		{"a DOCKER-USER drop", docker + "-A DOCKER-USER -i eth0 -o docker0 -j DROP\n", 0, 1, true},
		{"rules of its own", docker + "-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT\n-A INPUT -j DROP\n", 2, 0, true},
	} {
		in, fwd, filters := filtering(dump(c.table))
		if in != c.in || fwd != c.fwd || filters != c.filters {
			t.Errorf("%s: %d incoming, %d forwarded, filters %v; want %d, %d, %v", c.name, in, fwd, filters, c.in, c.fwd, c.filters)
		}
	}
	f := netfilter.Found{Kind: netfilter.KindIptables, Backend: "nft", Active: true, Incoming: 3, Forwarded: 1}
	if s := f.String(); !strings.Contains(s, "IPv6 not filtered") {
		t.Errorf("found: %s", s)
	}
	f.IPv6, f.Incoming6 = true, 3
	if s := f.String(); !strings.Contains(s, "IPv6 filtered too (3 incoming and 0 forwarded rules in ip6tables)") {
		t.Errorf("found: %s", s)
	}
}
