package ufw

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"meshd/netfilter"
	"meshd/netfilter/xt"
)

// The IPv6 twin ufw keeps in user6.rules of a rule from anywhere is the same ufw rule, not a
// copy to remove; a stale rule under a mark is.
func TestPlanUFWTuples(t *testing.T) {
	web := netfilter.Opening{Module: "web", Proto: "tcp", Port: 7000, From: netfilter.FromAnywhere, Path: netfilter.PathIncoming}
	v6 := netfilter.Opening{Module: "v6", Proto: "tcp", Port: 7002, From: "2001:db8::/32", Path: netfilter.PathIncoming}
	priv := netfilter.Private{Interface: "wg0", Range: netip.MustParsePrefix("10.99.0.0/16")}
	store := netfilter.Opening{Module: "store", Proto: "tcp", Port: 7001, From: netfilter.FromPrivate, Path: netfilter.PathIncoming}
	want, keys, err := netfilter.Dedupe([]netfilter.Opening{web, v6, store})
	if err != nil {
		t.Fatal(err)
	}
	text := func(o netfilter.Opening) string { s, _ := tupleText(o, priv); return s }
	tuples := []tuple{
		{Text: "allow tcp 22 0.0.0.0/0 any 0.0.0.0/0 in"}, // the found firewall's own
		{Text: text(web), Comment: web.Mark()},
		{Text: text(v6), Comment: v6.Mark()},
		{Text: "allow tcp 7001 0.0.0.0/0 any 10.1.0.0/16 in_wg0", Comment: store.Mark()}, // an old private range
		{Text: "allow tcp 22 ::/0 any ::/0 in"},
		{Text: strings.ReplaceAll(text(web), "0.0.0.0/0", "::/0"), Comment: web.Mark()},
	}
	wantRules, heldBy, failed := wantedRules(tuples, want, keys, priv, true)
	if len(heldBy)+len(failed) != 0 {
		t.Fatalf("held by %v, failed %v", heldBy, failed)
	}
	add, remove := netfilter.Plan(markedTuples(tuples), wantRules)
	if len(add) != 1 || add[0] != (marked{store.Mark(), text(store)}) {
		t.Fatalf("add %v, want only store's rule on the current range", add)
	}
	if len(remove) != 1 || remove[0].text != "allow tcp 7001 0.0.0.0/0 any 10.1.0.0/16 in_wg0" {
		t.Fatalf("remove %v, want only store's rule on the old range", remove)
	}

	// An opening the found firewall already allows needs no rule; nor does a second opening
	// with the same tuple.
	ssh := netfilter.Opening{Module: "ssh", Proto: "tcp", Port: 22, From: netfilter.FromAnywhere, Path: netfilter.PathIncoming}
	www := web
	www.Module = "www"
	want, keys, _ = netfilter.Dedupe([]netfilter.Opening{ssh, www, web})
	wantRules, heldBy, _ = wantedRules(tuples, want, keys, priv, true)
	if len(wantRules) != 1 || wantRules[0].mark != web.Mark() || heldBy[ssh.Mark()] == "" || heldBy[www.Mark()] == "" {
		t.Fatalf("rules %v, held by %v", wantRules, heldBy)
	}
}

// A forwarded opening through ufw needs an IPv6 `ufw allow` at the input path, for Docker's
// proxy, and no ufw tuple of its own (its rule is in DOCKER-USER, on the port addressed): from the opening's sources (none from an IPv4 range), only where ufw keeps IPv6 rules,
// none where a rule from anywhere already lets that port in at the input path in both families.
// Its command is IPv6 alone (ufw reads "from any" as both).
func TestPlanUFWProxyTuple(t *testing.T) {
	priv := netfilter.Private{Interface: "wg0", Range: netip.MustParsePrefix("10.99.0.0/16")}
	app := netfilter.Opening{Module: "app", Proto: "tcp", Port: 8080, From: netfilter.FromAnywhere, Path: netfilter.PathForwarded}
	office := netfilter.Opening{Module: "office", Proto: "tcp", Port: 8081, From: "2001:db8:7::/48", Path: netfilter.PathForwarded}
	lan := netfilter.Opening{Module: "lan", Proto: "tcp", Port: 8082, From: "198.51.100.0/24", Path: netfilter.PathForwarded}
	store := netfilter.Opening{Module: "store", Proto: "tcp", Port: 6379, From: netfilter.FromPrivate, Path: netfilter.PathForwarded}
	web := netfilter.Opening{Module: "web", Proto: "tcp", Port: 9000, From: netfilter.FromAnywhere, Path: netfilter.PathForwarded}
	webIn := netfilter.Opening{Module: "webin", Proto: "tcp", Port: 9000, From: netfilter.FromAnywhere, Path: netfilter.PathIncoming}
	want, keys, err := netfilter.Dedupe([]netfilter.Opening{app, office, lan, store, web, webIn})
	if err != nil {
		t.Fatal(err)
	}
	rules, _, failed := wantedRules(nil, want, keys, priv, true)
	if len(failed) != 0 {
		t.Fatalf("failed %v", failed)
	}
	var got []string
	for _, r := range rules {
		got = append(got, r.mark+" "+r.text)
	}
	for _, w := range []string{
		app.Mark() + " allow tcp 8080 ::/0 any ::/0 in",
		office.Mark() + " allow tcp 8081 ::/0 any 2001:db8:7::/48 in",
	} {
		if !slices.Contains(got, w) {
			t.Errorf("no proxy tuple %q in %q", w, got)
		}
	}
	for _, r := range got {
		if strings.HasPrefix(r, lan.Mark()+" allow") || strings.HasPrefix(r, store.Mark()+" allow") || strings.HasPrefix(r, web.Mark()+" allow") {
			t.Errorf("a proxy tuple that matches no IPv6 packet, or one a rule from anywhere already carries: %q", r)
		}
	}
	if len(rules) != 3 { // the incoming opening's own, two proxy tuples
		t.Errorf("rules %q, want 3", got)
	}
	if rules, _, _ := wantedRules(nil, want, keys, priv, false); len(rules) != 1 {
		t.Errorf("with IPV6=no: %d rules, want only the incoming opening's own", len(rules))
	}
	args, err := commandArgs("allow tcp 8080 ::/0 any ::/0 in", false)
	if err != nil || strings.Join(args, " ") != "allow proto tcp from ::/0 to any port 8080" {
		t.Errorf("ufw args of the proxy tuple: %q %v", args, err)
	}
	args, _ = commandArgs("allow tcp 8080 0.0.0.0/0 any 0.0.0.0/0 in", true)
	if strings.Join(args, " ") != "delete allow proto tcp from any to any port 8080" {
		t.Errorf("ufw args of a rule from anywhere: %q", args)
	}
}

// A forwarded opening is never a `ufw route allow`: ufw's route rules match the port after
// Docker's DNAT, so one on the published port opens every container listening on that port
// inside. A route rule meshd marked (left by a meshd that wrote them) is removed, the found
// firewall's own route rule left alone and not taken as allowing the opening.
func TestPlanUFWNoRouteTuple(t *testing.T) {
	priv := netfilter.Private{Interface: "wg0", Range: netip.MustParsePrefix("10.99.0.0/16")}
	webapp := netfilter.Opening{Module: "webapp", Proto: "tcp", Port: 8080, From: netfilter.FromAnywhere, Path: netfilter.PathForwarded}
	registry := netfilter.Opening{Module: "registry", Proto: "tcp", Port: 5000, From: netfilter.FromAnywhere, Path: netfilter.PathForwarded}
	want, keys, err := netfilter.Dedupe([]netfilter.Opening{webapp, registry})
	if err != nil {
		t.Fatal(err)
	}
	tuples := []tuple{
		{Text: "route:allow tcp 8080 0.0.0.0/0 any 0.0.0.0/0 in", Comment: webapp.Mark(), Route: true}, // an older meshd's
		{Text: "route:allow tcp 8080 ::/0 any ::/0 in", Comment: webapp.Mark(), Route: true},
		{Text: "route:allow tcp 5000 0.0.0.0/0 any 0.0.0.0/0 in", Route: true}, // the found firewall's own
	}
	for _, ipv6 := range []bool{false, true} {
		rules, heldBy, failed := wantedRules(tuples, want, keys, priv, ipv6)
		if len(heldBy)+len(failed) != 0 {
			t.Fatalf("ipv6 %v: held by %v, failed %v", ipv6, heldBy, failed)
		}
		for _, r := range rules {
			if strings.HasPrefix(r.text, "route:") {
				t.Errorf("ipv6 %v: a route rule wanted: %v", ipv6, r)
			}
		}
		_, remove := netfilter.Plan(markedTuples(tuples), rules)
		if len(remove) != 1 || remove[0].text != "route:allow tcp 8080 0.0.0.0/0 any 0.0.0.0/0 in" || remove[0].mark != webapp.Mark() {
			t.Errorf("ipv6 %v: remove %v, want the marked route rule (one ufw rule, both families)", ipv6, remove)
		}
	}
}

// A forwarded opening's rule in ufw's iptables backend goes at the head of DOCKER-USER where
// Docker made it, else at the head of FORWARD in IPv4 (never a route rule); over IPv6 only into a
// DOCKER-USER Docker made there.
func TestXTChainsForwarded(t *testing.T) {
	fwd := netfilter.Opening{Module: "webapp", Proto: "tcp", Port: 8080, From: netfilter.FromAnywhere, Path: netfilter.PathForwarded}
	dump := func(v6 bool, chains ...string) *xt.Dump {
		x := &xt.Dump{V6: v6, Policies: map[string]string{"INPUT": "DROP", "FORWARD": "DROP", "OUTPUT": "ACCEPT"}}
		for _, c := range chains {
			x.Policies[c] = "-"
		}
		return x
	}
	for _, c := range []struct {
		x    *xt.Dump
		want string
	}{
		{dump(false, "DOCKER-USER"), "DOCKER-USER"},
		{dump(false), "FORWARD"},
		{dump(true, "DOCKER-USER"), "DOCKER-USER"},
		{dump(true), ""},
	} {
		if got := strings.Join(xtChains(fwd, c.x), ","); got != c.want {
			t.Errorf("v6 %v, chains %v: %q, want %q", c.x.V6, c.x.Policies, got, c.want)
		}
	}
}
