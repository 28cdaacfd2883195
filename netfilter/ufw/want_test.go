package ufw

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"meshd/netfilter"
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

// A forwarded opening through ufw also needs an IPv6 `ufw allow` at the input path, for Docker's
// proxy: from the opening's sources (none from an IPv4 range), only where ufw keeps IPv6 rules,
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
	if len(rules) != 8 { // six openings' own, two proxy tuples
		t.Errorf("rules %q, want 8", got)
	}
	if rules, _, _ := wantedRules(nil, want, keys, priv, false); len(rules) != 6 {
		t.Errorf("with IPV6=no: %d rules, want only the openings' own 6", len(rules))
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
