package ufw_test

import (
	"context"
	"strings"
	"testing"

	"meshd/netfilter"
	"meshd/netfilter/firewall"
	"meshd/netfilter/internal/nflab"
)

// Issue 34's second finding, as the attack: on a ufw whose after.rules sends DOCKER-USER through
// ufw-user-forward (ufw-docker's recipe), webapp's forwarded opening of its published 8080 must
// not open metrics, a container published on 9090 that listens on 8080 inside (Docker's DNAT
// rewrites 9090 to 8080 before FORWARD, where ufw's route rules look). A `ufw route allow … port
// 8080` did: it matched metrics' packets after the DNAT. Here the route rule an older meshd wrote
// under webapp's mark is in force first (metrics answers: the leak); one pass of the driver takes
// it away and opens webapp on the port the client addressed alone, batch and command alike, and
// so it stays after a `ufw reload` and a second pass. The lab's container answers on 80 (webapp,
// published 8080) and 8080 (metrics, published 9090): one address stands for two containers.
func TestUFWForwardedOpeningOpensOnlyThePublishedPort(t *testing.T) {
	l := nflab.NewUFW(t)
	l.Publish(9090, 8080)
	l.Serve(l.Ctr, "0.0.0.0:8080")
	webapp, metrics := l.HostAddr+":8080", l.HostAddr+":9090"
	f, err := firewall.Detect(context.Background(), l.Env)
	if err != nil {
		t.Fatal(err)
	}
	l.WantReach(l.Cli, webapp, false)
	l.WantReach(l.Cli, metrics, false)

	open := netfilter.Opening{Module: "webapp", Proto: "tcp", Port: 8080, From: netfilter.FromAnywhere, Path: netfilter.PathForwarded}
	routeRules := func() string {
		return l.Sh("ufw status | grep -i 'ALLOW FWD' || true")
	}
	for _, env := range []struct {
		name string
		env  netfilter.Env
	}{{"batch", l.Env}, {"ufw commands", netfilter.Env{NetNS: l.Env.NetNS, Runner: l.Env.Runner}}} {
		// The route rule an older meshd wrote for webapp's opening: metrics answers from outside.
		l.Sh("ufw route allow proto tcp from any to any port 8080 comment '" + open.Mark() + "' >/dev/null")
		l.WantReach(l.Cli, metrics, true)

		d, _ := firewall.NewDriver(env.env, f, l.Private)
		r := nflab.MustConverge(t, d, []netfilter.Opening{open})
		if len(r.Openings) != 1 || r.Openings[0].State != netfilter.InForce {
			t.Fatalf("%s: %+v", env.name, r.Openings)
		}
		check := func(when string) {
			t.Helper()
			l.WantReach(l.Cli, webapp, true)
			l.WantReach(l.Cli, metrics, false)
			if fwd := routeRules(); strings.TrimSpace(fwd) != "" {
				t.Fatalf("%s, %s: ufw holds a route rule:\n%s", env.name, when, fwd)
			}
		}
		check("converged")
		l.Sh("ufw reload >/dev/null")
		nflab.MustConverge(t, d, []netfilter.Opening{open}) // the watch's pass after a reload
		check("after ufw reload")
		if r := nflab.MustConverge(t, d, []netfilter.Opening{open}); r.Added+r.Removed != 0 {
			t.Fatalf("%s: a second pass wrote %d/%d", env.name, r.Added, r.Removed)
		}
		nflab.MustConverge(t, d, nil)
		l.WantReach(l.Cli, webapp, false)
		l.WantReach(l.Cli, metrics, false)
	}
}
