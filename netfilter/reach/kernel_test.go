package reach_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"meshd/netfilter/internal/nflab"
	"meshd/netfilter/reach"
)

// answer reads the lab host's ruleset from the kernel and asks who reaches its published 8080.
func answer(t *testing.T, l *nflab.Lab) reach.Answer {
	t.Helper()
	rs, err := reach.Read(context.Background(), l.Env)
	if err != nil {
		t.Fatal(err)
	}
	a := rs.Reach(reach.Port{HostPort: 8080, Proto: "tcp"})
	t.Logf("8080/tcp: %+v", a)
	return a
}

// What reach reads from the kernel is what the kernel does: behind a found nftables forward
// chain with policy drop, the published 8080 is closed (outside is refused); a rule letting
// 198.51.100.0/24 in makes it reached from that network alone (outside, in it, connects; the
// peer, at 203.0.113.2, is still refused).
func TestReachReadsTheKernelsNftables(t *testing.T) {
	l := nflab.NewNftables(t)
	if a := answer(t, l); a.Refused != "" || len(a.From) > 0 ||
		!slices.ContainsFunc(a.ClosedBy, func(s string) bool { return strings.Contains(s, "nft inet nffound chain forward policy drop") }) {
		t.Errorf("8080 behind a forward chain dropping it: %+v, want closed by its policy", a)
	}
	l.WantReach(l.Cli, "198.51.100.1:8080", false)

	l.Sh("nft add rule inet nffound forward ip saddr 198.51.100.0/24 tcp dport 80 accept")
	if a := answer(t, l); a.Refused != "" || !slices.Equal(a.From, []string{"198.51.100.0/24"}) {
		t.Errorf("8080 with the LAN let in: %+v, want reached from 198.51.100.0/24 alone", a)
	}
	l.WantReach(l.Cli, "198.51.100.1:8080", true)
	l.WantReach(l.Peer, l.PeerHost+":8080", false)
}

// A found ufw whose DOCKER-USER drops what comes in on the uplink (a rule on an interface that
// is neither loopback nor a container bridge) is refused, naming the rule, never answered
// "anywhere"; the kernel indeed refuses outside.
func TestReachRefusesTheKernelsUplinkRule(t *testing.T) {
	l := nflab.NewUFW(t)
	a := answer(t, l)
	want := "iptables-nft filter: -A DOCKER-USER -i " + l.UpIf + " -o " + l.BrIf + " -j DROP: matches the input interface " + l.UpIf
	if !strings.Contains(a.Refused, want) || len(a.From) > 0 {
		t.Errorf("8080 behind ufw-docker's drop on the uplink: %+v, want refused naming %q", a, want)
	}
	l.WantReach(l.Cli, "198.51.100.1:8080", false)
}
