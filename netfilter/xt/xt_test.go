package xt_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"meshd/netfilter"
	"meshd/netfilter/firewall"
	"meshd/netfilter/internal/nflab"
)

// newXtLab raises a found plain-iptables firewall through the system's iptables (iptables-nft,
// Debian's default backend), the way a hand-written rules.v4 leaves one: INPUT dropping by
// default, accepting established traffic, loopback and ssh; a DOCKER-USER rule of its own that
// drops new traffic from the outside to the container bridge (so Docker's published ports are
// filtered); then Docker starts (FORWARD policy DROP, DNAT of 8080 to the container's 80).
func newXtLab(t *testing.T) *nflab.Lab {
	l := nflab.New(t)
	l.Sh(strings.Join([]string{
		"iptables -P INPUT DROP",
		"iptables -A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
		"iptables -A INPUT -i lo -j ACCEPT",
		"iptables -A INPUT -p tcp -m tcp --dport 22 -j ACCEPT",
		"iptables -N DOCKER-USER",
		"iptables -A DOCKER-USER -i " + l.UpIf + " -o " + l.BrIf + " -j DROP",
	}, " && "))
	l.Docker()
	l.Serve(l.Host, "0.0.0.0:7000")
	l.Serve(l.Host, "0.0.0.0:7001")
	l.Serve(l.Ctr, "0.0.0.0:80")
	return l
}

// xtSave is the whole iptables ruleset (every table) as a person would compare two saves:
// without iptables-save's dated comment lines and without packet nflab.Counters.
func xtSave(l *nflab.Lab) string {
	var out []string
	for _, line := range strings.Split(l.Sh("iptables-save"), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, nflab.Counters.ReplaceAllString(line, ""))
	}
	return strings.Join(out, "\n")
}

func TestIptablesOpenings(t *testing.T) {
	l := newXtLab(t)
	ctx := context.Background()
	f, err := firewall.Detect(ctx, l.Env)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("found: %s", f)
	// 3 incoming (established, lo, 22); 1 forwarded (its DOCKER-USER drop: Docker's own
	// FORWARD plumbing and DOCKER-USER's closing RETURN are not the found firewall's rules).
	if f.Kind != netfilter.KindIptables || f.Backend != "nft" || !f.Active || f.Incoming != 3 || f.Forwarded != 1 || !f.DockerUser {
		t.Fatalf("detected %+v", f)
	}
	cli, pub := l.Cli, l.HostAddr+":8080"
	// metrics: published on 9090, listening inside on 8080, the port app's opening names
	metrics := l.HostAddr + ":9090"
	l.Publish(9090, 8080)
	l.Serve(l.Ctr, "0.0.0.0:8080")
	l.WantReach(cli, metrics, false)
	l.WantReach(cli, l.HostAddr+":7000", false)
	l.WantReach(l.Peer, l.PeerHost+":7001", false)
	l.WantReach(cli, pub, false) // the found DOCKER-USER drop filters Docker's published port

	// The found rules as the machine would keep them on disk (iptables-save > rules.v4).
	saved := filepath.Join(l.Dir, "found.rules")
	l.Sh("iptables-save > " + saved)
	before := xtSave(l)

	d, err := firewall.NewDriver(l.Env, f, l.Private)
	if err != nil {
		t.Fatal(err)
	}
	if d.Kind() != netfilter.KindIptables {
		t.Fatalf("driver kind %s", d.Kind())
	}
	want := []netfilter.Opening{
		{Module: "web", Proto: "tcp", Port: 7000, From: netfilter.FromAnywhere, Path: netfilter.PathIncoming},
		{Module: "store", Proto: "tcp", Port: 7001, From: netfilter.FromPrivate, Path: netfilter.PathIncoming},
		{Module: "app", Proto: "tcp", Port: 8080, From: netfilter.FromAnywhere, Path: netfilter.PathForwarded},
	}
	r := nflab.MustConverge(t, d, want)
	if r.Kind != netfilter.KindIptables || r.Added != 3 || r.Removed != 0 {
		t.Fatalf("first converge: kind %s, %d added, %d removed; want iptables, 3 added", r.Kind, r.Added, r.Removed)
	}
	for _, o := range r.Openings {
		if o.State != netfilter.InForce || o.At.IsZero() {
			t.Fatalf("%s: %s at %v", o.Opening, o.State, o.At)
		}
	}
	l.WantReach(cli, l.HostAddr+":7000", true)
	l.WantReach(l.Peer, l.PeerHost+":7000", true)
	l.WantReach(l.Peer, l.PeerHost+":7001", true)
	l.WantReach(cli, l.HostAddr+":7001", false) // private: not from the outside
	l.WantReach(cli, pub, true)                 // through Docker's DNAT to the container
	l.WantReach(cli, metrics, false)            // the published port addressed, not the container's
	after := xtSave(l)
	nflab.AssertOnlyMarked(t, "after converge", before, after)
	added, _ := nflab.DiffLines(before, after)
	if len(added) != 3 {
		t.Fatalf("converge added %d lines, want 3: %q", len(added), added)
	}
	t.Logf("meshd's rules: %q", added)
	for _, o := range want {
		chain := "-A INPUT "
		if o.Path == netfilter.PathForwarded {
			chain = "-A DOCKER-USER "
		}
		if !containsLine(after, chain, o.Mark()) {
			t.Fatalf("no %s...%s rule after converge:\n%s", chain, o.Mark(), after)
		}
	}

	// Nothing to change: nothing written, and the ruleset is byte for byte the same.
	r = nflab.MustConverge(t, d, want)
	if r.Added+r.Removed != 0 {
		t.Fatalf("no-op converge wrote %d added, %d removed", r.Added, r.Removed)
	}
	if got := xtSave(l); got != after {
		a, rm := nflab.DiffLines(after, got)
		t.Fatalf("no-op converge changed the ruleset: +%q -%q", a, rm)
	}

	// Unassigning a module removes its opening's rule and nothing else.
	mid := xtSave(l)
	r = nflab.MustConverge(t, d, want[:2])
	if r.Removed != 1 || r.Added != 0 {
		t.Fatalf("removing one opening wrote %d added, %d removed", r.Added, r.Removed)
	}
	l.WantReach(cli, pub, false)
	l.WantReach(cli, l.HostAddr+":7000", true)
	added, removed := nflab.DiffLines(mid, xtSave(l))
	if len(added) != 0 || len(removed) != 1 || !strings.Contains(removed[0], want[2].Mark()) {
		t.Fatalf("removal changed +%q -%q", added, removed)
	}
	nflab.AssertOnlyMarked(t, "after removal", before, xtSave(l))

	// A reload of the found rules (netfilter-persistent's iptables-restore < rules.v4) drops
	// meshd's rules; the next converge puts them back and reports them restored.
	l.Sh("iptables-restore < " + saved)
	if got := xtSave(l); got != before {
		a, rm := nflab.DiffLines(before, got)
		t.Fatalf("the reload did not give back the found rules: +%q -%q", a, rm)
	}
	l.WantReach(cli, l.HostAddr+":7000", false)
	r = nflab.MustConverge(t, d, want[:2])
	if r.Added != 2 || r.Removed != 0 {
		t.Fatalf("re-converge after reload wrote %d added, %d removed; want 2 added", r.Added, r.Removed)
	}
	for _, o := range r.Openings {
		if o.State != netfilter.Restored {
			t.Fatalf("%s after the reload: %s, want %s", o.Opening, o.State, netfilter.Restored)
		}
	}
	l.WantReach(cli, l.HostAddr+":7000", true)
	l.WantReach(l.Peer, l.PeerHost+":7001", true)
	l.WantReach(cli, l.HostAddr+":7001", false)
	l.WantReach(cli, pub, false)
	nflab.AssertOnlyMarked(t, "after the reload and re-converge", before, xtSave(l))
	if r = nflab.MustConverge(t, d, want[:2]); r.Added+r.Removed != 0 {
		t.Fatalf("no-op converge after restore wrote %d added, %d removed", r.Added, r.Removed)
	}

	// Converging the empty set leaves exactly the found rules.
	if r = nflab.MustConverge(t, d, nil); r.Removed != 2 || r.Added != 0 {
		t.Fatalf("empty converge wrote %d added, %d removed; want 2 removed", r.Added, r.Removed)
	}
	if got := xtSave(l); got != before {
		a, rm := nflab.DiffLines(before, got)
		t.Fatalf("with no openings the ruleset differs from the found one: +%q -%q", a, rm)
	}
}

// containsLine says whether one line of s starts with prefix and holds sub.
func containsLine(s, prefix, sub string) bool {
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(line, prefix) && strings.Contains(line, sub) {
			return true
		}
	}
	return false
}

// A found plain-iptables firewall retired at the flip loses its own rules and its closed INPUT
// policy (Docker's chains and NAT, meshd's marked rules and the rules file stay); restored, it
// is back rule for rule, and a restore repeated adds nothing twice.
func TestIptablesRetireRestore(t *testing.T) {
	l := newXtLab(t)
	ctx := context.Background()
	f, err := firewall.Detect(ctx, l.Env)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := firewall.NewDriver(l.Env, f, l.Private)
	nflab.MustConverge(t, d, []netfilter.Opening{{Module: "web", Proto: "tcp", Port: 7000, From: netfilter.FromAnywhere, Path: netfilter.PathIncoming}})
	before := xtSave(l)
	nat := l.Sh("iptables-save -t nat | grep -v '^#'")
	l.Sh("mkdir -p /etc/iptables && iptables-save > /etc/iptables/rules.v4")
	conf := l.Sh("cat /etc/iptables/rules.v4")
	l.WantReach(l.Cli, l.HostAddr+":7001", false)
	ret, err := firewall.Retire(ctx, l.Env, f)
	if err != nil {
		t.Fatal(err)
	}
	if ret.XT == nil || len(ret.XT.Rules) != 4 || ret.XT.Policies["INPUT"] != "DROP" {
		t.Fatalf("retired: %+v", ret.XT)
	}
	after := l.Sh("iptables-save -t filter | grep -v '^#'")
	if !strings.Contains(after, ":INPUT ACCEPT") || strings.Contains(after, "--dport 22") || strings.Contains(after, "-A DOCKER-USER -i "+l.UpIf) {
		t.Fatalf("found rules still in force after retire:\n%s", after)
	}
	if !strings.Contains(after, "meshd") {
		t.Fatalf("retire removed meshd's marked rule:\n%s", after)
	}
	if got := l.Sh("iptables-save -t nat | grep -v '^#'"); got != nat {
		t.Fatalf("Docker's NAT changed by retire:\n%s\nwant\n%s", got, nat)
	}
	if l.Sh("cat /etc/iptables/rules.v4") != conf {
		t.Fatal("retire touched /etc/iptables/rules.v4")
	}
	l.WantReach(l.Cli, l.HostAddr+":7001", true) // nothing filters now
	l.WantReach(l.Cli, l.HostAddr+":8080", true) // Docker still forwards
	for range 2 {
		if err := firewall.Restore(ctx, l.Env, ret); err != nil {
			t.Fatal(err)
		}
		if got := xtSave(l); got != before {
			t.Fatalf("restored ruleset differs from the one retired:\n%s\nwant\n%s", got, before)
		}
	}
	l.WantReach(l.Cli, l.HostAddr+":7001", false)
	l.WantReach(l.Cli, l.HostAddr+":8080", false)
}
