package xt_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"meshd/netfilter"
	"meshd/netfilter/firewall"
	"meshd/netfilter/internal/nflab"
	"meshd/netfilter/xt"
)

// dockerV6 is Docker's IPv6 plumbing with its ip6tables option on, as docker() is IPv4's: the
// published port 8080 DNATed to the container's [2001:db8:2::2]:80, FORWARD through DOCKER-USER
// first, FORWARD's policy DROP. Docker publishes 9090 and 6379 too, to the container's port 80
// over IPv4; their IPv6 is no DNAT but Docker's proxy on the host ([::]:9090, [::]:6379), as for
// a container on a bridge without IPv6.
func dockerV6(l *nflab.Lab) {
	br := l.BrIf
	l.Sh(strings.Join([]string{
		"iptables -t nat -A DOCKER ! -i " + br + " -p tcp -m tcp --dport 9090 -j DNAT --to-destination 192.0.2.2:80",
		"iptables -t nat -A DOCKER ! -i " + br + " -p tcp -m tcp --dport 6379 -j DNAT --to-destination 192.0.2.2:80",
		"ip6tables -t nat -N DOCKER",
		"ip6tables -t nat -A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER",
		"ip6tables -t nat -A DOCKER -i " + br + " -j RETURN",
		"ip6tables -t nat -A DOCKER ! -i " + br + " -p tcp -m tcp --dport 8080 -j DNAT --to-destination [" + nflab.Ctr6 + "]:80",
		"ip6tables -N DOCKER",
		"ip6tables -N DOCKER-USER 2>/dev/null; true",
		"ip6tables -P FORWARD DROP",
		"ip6tables -I FORWARD 1 -j DOCKER-USER",
		"ip6tables -A FORWARD -o " + br + " -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
		"ip6tables -A FORWARD -o " + br + " -j DOCKER",
		"ip6tables -A FORWARD -i " + br + " ! -o " + br + " -j ACCEPT",
		"ip6tables -A DOCKER -d " + nflab.Ctr6 + "/128 ! -i " + br + " -o " + br + " -p tcp -m tcp --dport 80 -j ACCEPT",
		"ip6tables -A DOCKER-USER -j RETURN",
	}, " && "))
	l.Serve(l.Host, "[::]:9090") // Docker's proxy for 9090 over IPv6
	l.Serve(l.Host, "[::]:6379") // and for 6379
}

// xt6Save is ip6tables-save as xtSave is iptables-save's.
func xt6Save(l *nflab.Lab) string {
	var out []string
	for _, line := range strings.Split(l.Sh("ip6tables-save"), "\n") {
		if !strings.HasPrefix(line, "#") {
			out = append(out, nflab.Counters.ReplaceAllString(line, ""))
		}
	}
	return strings.Join(out, "\n")
}

// wantBoth is wantReach over IPv4 and IPv6 from the outside machine.
func wantBoth(l *nflab.Lab, port string, want bool) {
	l.T.Helper()
	l.WantReach(l.Cli, l.HostAddr+":"+port, want)
	l.WantReach(l.Cli, nflab.Host6+":"+port, want)
}

// A found plain-iptables firewall that filters both families (rules.v4 and rules.v6 alike: INPUT
// dropping by default, ssh allowed, new traffic from the outside to the container bridge
// dropped in DOCKER-USER) with Docker publishing over both. Each opening is reachable from the
// outside over IPv4 and IPv6: on the machine, through Docker's DNAT, and through Docker's proxy;
// the store, published and guarded, is refused over both; removing an opening closes both
// families; nothing to change writes nothing; the found rules differ only by meshd's. One body:
// each step starts from the rules the one before left, as the passes of one agent would.
func TestIptablesOpeningsIPv6(t *testing.T) {
	l := newXtLab(t)
	foundIP6tables(l)
	ctx := context.Background()
	f, err := firewall.Detect(ctx, l.Env)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("found: %s", f)
	if f.Kind != netfilter.KindIptables || !f.IPv6 || f.Incoming6 != 4 || f.Forwarded6 != 1 {
		t.Fatalf("detected %+v", f)
	}
	for _, p := range []string{"7000", "8080", "9090", "6379"} {
		wantBoth(l, p, false)
	}
	before4, before6 := xtSave(l), xt6Save(l)

	d, err := firewall.NewDriver(l.Env, f, l.Private)
	if err != nil {
		t.Fatal(err)
	}
	web := netfilter.Opening{Module: "web", Proto: "tcp", Port: 7000, From: netfilter.FromAnywhere, Path: netfilter.PathIncoming}
	app := netfilter.Opening{Module: "app", Proto: "tcp", Port: 8080, From: netfilter.FromAnywhere, Path: netfilter.PathForwarded}
	proxied := netfilter.Opening{Module: "proxied", Proto: "tcp", Port: 9090, From: netfilter.FromAnywhere, Path: netfilter.PathForwarded}
	store := netfilter.Opening{Module: "store", Proto: "tcp", Port: 6379, From: netfilter.FromPrivate, Path: netfilter.PathForwarded}
	want := []netfilter.Opening{web, app, proxied, store}
	r := nflab.MustConverge(t, d, want)
	// IPv4: four rules; IPv6: web's, app's and proxied's in DOCKER-USER and at INPUT for the
	// proxy (store is from the private network, an IPv4 range: no twin).
	if r.Added != 9 || r.Removed != 0 {
		t.Fatalf("first converge: %d added, %d removed; want 9, 0", r.Added, r.Removed)
	}
	for _, o := range r.Openings {
		if o.State != netfilter.InForce {
			t.Fatalf("%s: %s (%s)", o.Opening, o.State, o.Reason)
		}
	}
	if _, err := netfilter.Guard(ctx, l.Env, netfilter.GuardSpec{Private: l.Private, Ports: []netfilter.Port{{Proto: "tcp", Port: 6379}}}); err != nil {
		t.Fatal(err)
	}
	wantBoth(l, "7000", true) // the machine's own port
	wantBoth(l, "8080", true) // through Docker's DNAT, in both families
	wantBoth(l, "9090", true) // IPv4 through the DNAT, IPv6 through the proxy
	wantBoth(l, "6379", false)
	l.WantReach(l.Peer, l.PeerHost+":6379", true) // the store from the private network
	after4, after6 := xtSave(l), xt6Save(l)
	nflab.AssertOnlyMarked(t, "iptables after converge", before4, after4)
	nflab.AssertOnlyMarked(t, "ip6tables after converge", before6, after6)
	added6, _ := nflab.DiffLines(before6, after6)
	t.Logf("meshd's ip6tables rules: %q", added6)
	if len(added6) != 5 || !containsLine(after6, "-A INPUT ", proxied.Mark()) || !containsLine(after6, "-A DOCKER-USER ", app.Mark()) ||
		strings.Contains(after6, store.Mark()) {
		t.Fatalf("ip6tables after converge:\n%s", after6)
	}

	// Nothing to change: nothing written in either family.
	if r = nflab.MustConverge(t, d, want); r.Added+r.Removed != 0 {
		t.Fatalf("no-op converge wrote %d added, %d removed", r.Added, r.Removed)
	}
	if xtSave(l) != after4 || xt6Save(l) != after6 {
		t.Fatal("no-op converge changed a ruleset")
	}

	// The forwarded openings unassigned: closed over both families, their rules gone from both.
	r = nflab.MustConverge(t, d, []netfilter.Opening{web, store})
	if r.Removed != 6 || r.Added != 0 {
		t.Fatalf("removing two forwarded openings wrote %d added, %d removed; want 0, 6", r.Added, r.Removed)
	}
	wantBoth(l, "8080", false)
	wantBoth(l, "9090", false)
	wantBoth(l, "7000", true)
	wantBoth(l, "6379", false)

	// Nothing declared: both families are the found ones again, and closed.
	if r = nflab.MustConverge(t, d, nil); r.Removed != 3 {
		t.Fatalf("empty converge removed %d, want 3", r.Removed)
	}
	if netfilter.RemoveGuard(ctx, l.Env) != nil || xtSave(l) != before4 || xt6Save(l) != before6 {
		a, rm := nflab.DiffLines(before6, xt6Save(l))
		t.Fatalf("with no openings the rulesets differ from the found ones (ip6tables +%q -%q)", a, rm)
	}
	wantBoth(l, "7000", false)

	// The flip retires both families: the firewall then reads as none (nothing of its own in
	// force in either), and the return gives both back rule for rule.
	ret, err := firewall.Retire(ctx, l.Env, f)
	if err != nil {
		t.Fatal(err)
	}
	if f, err := firewall.Detect(ctx, l.Env); err != nil || f.Kind != netfilter.KindNone {
		t.Fatalf("after retiring both families: %+v %v", f, err)
	}
	if err := firewall.Restore(ctx, l.Env, ret); err != nil || xtSave(l) != before4 || xt6Save(l) != before6 {
		t.Fatalf("restore: %v", err)
	}
}

// A found plain-iptables firewall in both families, retired at the flip: its ip6tables rules
// go as its iptables rules do (saved in order, removed, the closed INPUT policy opened, Docker's
// chains, meshd's marked rules and rules.v6 kept), so nothing of it stays in force over IPv6
// beside the derived filter; the return appends them back in their order, twice changing nothing
// more. A retirement interrupted between the two families (IPv4's removed, IPv6's not yet) goes
// on from what it saved: IPv4's saved rules are not lost to the empty table it finds.
func TestIptablesRetireRestoreIPv6(t *testing.T) {
	l := newXtLab(t)
	l.Env.StateDir = t.TempDir()
	foundIP6tables(l)
	ctx := context.Background()
	f, err := firewall.Detect(ctx, l.Env)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := firewall.NewDriver(l.Env, f, l.Private)
	web := netfilter.Opening{Module: "web", Proto: "tcp", Port: 7000, From: netfilter.FromAnywhere, Path: netfilter.PathIncoming}
	nflab.MustConverge(t, d, []netfilter.Opening{web})
	before4, before6 := xtSave(l), xt6Save(l)
	nat6 := l.Sh("ip6tables-save -t nat | grep -v '^#'")
	l.Sh("ip6tables-save > /etc/iptables/rules.v6")
	conf6 := l.Sh("cat /etc/iptables/rules.v6")
	wantBoth(l, "7001", false)

	ret, err := firewall.Retire(ctx, l.Env, f)
	if err != nil {
		t.Fatal(err)
	}
	if ret.XT6 == nil || len(ret.XT6.Rules) != 5 || ret.XT6.Policies["INPUT"] != "DROP" || ret.Removing {
		t.Fatalf("retired from ip6tables: %+v (removing %v)", ret.XT6, ret.Removing)
	}
	after6 := l.Sh("ip6tables-save -t filter | grep -v '^#'")
	if !strings.Contains(after6, ":INPUT ACCEPT") || strings.Contains(after6, "--dport 22") || strings.Contains(after6, "-A DOCKER-USER -i "+l.UpIf) {
		t.Fatalf("found ip6tables rules still in force after retire:\n%s", after6)
	}
	if !strings.Contains(after6, web.Mark()) {
		t.Fatalf("retire removed meshd's marked ip6tables rule:\n%s", after6)
	}
	if got := l.Sh("ip6tables-save -t nat | grep -v '^#'"); got != nat6 {
		t.Fatalf("Docker's IPv6 NAT changed by retire:\n%s\nwant\n%s", got, nat6)
	}
	if l.Sh("cat /etc/iptables/rules.v6") != conf6 {
		t.Fatal("retire touched /etc/iptables/rules.v6")
	}
	if f, err := firewall.Detect(ctx, l.Env); err != nil || f.Kind != netfilter.KindNone {
		t.Fatalf("after retiring: %+v %v", f, err)
	}
	wantBoth(l, "7001", true) // nothing of the found firewall filters either family now
	for range 2 {
		if err := firewall.Restore(ctx, l.Env, ret); err != nil {
			t.Fatal(err)
		}
		if xtSave(l) != before4 || xt6Save(l) != before6 {
			a, rm := nflab.DiffLines(before6, xt6Save(l))
			t.Fatalf("restored rulesets differ from the ones retired (ip6tables +%q -%q)", a, rm)
		}
	}
	wantBoth(l, "7001", false)

	// Interrupted between the families: IPv4's rules removed, IPv6's still in force, the record
	// saying Removing. The firewall reads active (its IPv6 rules), so the flip retires again.
	first, err := firewall.Retire(ctx, l.Env, f)
	if err != nil {
		t.Fatal(err)
	}
	if err := xt.RestoreFamily(ctx, l.Env, first.XT6, true); err != nil {
		t.Fatal(err)
	}
	first.Removing = true
	if err := first.Save(l.Env); err != nil {
		t.Fatal(err)
	}
	if f2, err := firewall.Detect(ctx, l.Env); err != nil || f2.Kind != netfilter.KindIptables || !f2.Active {
		t.Fatalf("with only its ip6tables rules in force: %+v %v", f2, err)
	}
	again, err := firewall.Retire(ctx, l.Env, f)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(again.XT.Rules) != fmt.Sprint(ret.XT.Rules) || fmt.Sprint(again.XT6.Rules) != fmt.Sprint(ret.XT6.Rules) ||
		again.XT.Policies["INPUT"] != "DROP" || again.XT6.Policies["INPUT"] != "DROP" {
		t.Fatalf("the retirement gone on after an interruption saved %+v / %+v, want %+v / %+v", again.XT, again.XT6, ret.XT, ret.XT6)
	}
	if err := firewall.Restore(ctx, l.Env, again); err != nil || xtSave(l) != before4 || xt6Save(l) != before6 {
		t.Fatalf("restore after the interrupted retirement: %v", err)
	}
	if kept, err := netfilter.LoadRetired(l.Env.StateDir); err != nil || kept.Removing {
		t.Fatalf("the kept record after the restore: removing %v, %v", kept.Removing, err)
	}
}

// A found plain-iptables firewall in iptables alone (a rules.v4, no rules.v6), Docker publishing
// over both families: ip6tables filters nothing, so meshd writes nothing there (the openings are
// as open over IPv6 as the found firewall leaves them), and the store, refused over IPv4 by the
// found firewall, is refused over IPv6 by the guard, which meshd loads in both families.
func TestIptablesOpeningsIPv6Unfiltered(t *testing.T) {
	l := newXtLab(t)
	l.AddIPv6()
	dockerV6(l)
	ctx := context.Background()
	f, err := firewall.Detect(ctx, l.Env)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("found: %s", f)
	if f.Kind != netfilter.KindIptables || f.IPv6 || !strings.Contains(f.String(), "IPv6 not filtered") {
		t.Fatalf("detected %+v", f)
	}
	before6 := xt6Save(l)
	d, _ := firewall.NewDriver(l.Env, f, l.Private)
	web := netfilter.Opening{Module: "web", Proto: "tcp", Port: 7000, From: netfilter.FromAnywhere, Path: netfilter.PathIncoming}
	app := netfilter.Opening{Module: "app", Proto: "tcp", Port: 8080, From: netfilter.FromAnywhere, Path: netfilter.PathForwarded}
	store := netfilter.Opening{Module: "store", Proto: "tcp", Port: 6379, From: netfilter.FromPrivate, Path: netfilter.PathForwarded}
	if r := nflab.MustConverge(t, d, []netfilter.Opening{web, app, store}); r.Added != 3 {
		t.Fatalf("converge added %d, want 3 (IPv4 alone)", r.Added)
	}
	if got := xt6Save(l); got != before6 {
		a, rm := nflab.DiffLines(before6, got)
		t.Fatalf("meshd wrote in an ip6tables that filters nothing: +%q -%q", a, rm)
	}
	wantBoth(l, "7000", true)
	wantBoth(l, "8080", true)
	l.WantReach(l.Cli, l.HostAddr+":6379", false) // the found DOCKER-USER drop
	l.WantReach(l.Cli, nflab.Host6+":6379", true) // the found firewall leaves IPv6 open
	if _, err := netfilter.Guard(ctx, l.Env, netfilter.GuardSpec{Private: l.Private, Ports: []netfilter.Port{{Proto: "tcp", Port: 6379}}}); err != nil {
		t.Fatal(err)
	}
	wantBoth(l, "6379", false)
	l.WantReach(l.Peer, l.PeerHost+":6379", true)
}

// foundIP6tables gives the lab IPv6 and a found plain-iptables firewall in ip6tables: a closed
// INPUT allowing ssh (4 incoming rules), a DOCKER-USER that drops the uplink to the bridge (1
// forwarded rule), and Docker publishing over IPv6.
func foundIP6tables(l *nflab.Lab) {
	l.AddIPv6()
	l.Sh(strings.Join([]string{
		"ip6tables -P INPUT DROP",
		"ip6tables -A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
		"ip6tables -A INPUT -i lo -j ACCEPT",
		"ip6tables -A INPUT -p ipv6-icmp -j ACCEPT",
		"ip6tables -A INPUT -p tcp -m tcp --dport 22 -j ACCEPT",
		"ip6tables -N DOCKER-USER",
		"ip6tables -A DOCKER-USER -i " + l.UpIf + " -o " + l.BrIf + " -j DROP",
	}, " && "))
	dockerV6(l)
}
