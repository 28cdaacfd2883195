package netfilter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// foundNftConf is a found nftables firewall the way Debian's nftables.service loads it:
// default deny, a few ports allowed, beginning with flush ruleset.
func foundNftConf(l *lab) string {
	return fmt.Sprintf(`#!/usr/sbin/nft -f
flush ruleset

table inet nffound {
	chain input {
		type filter hook input priority filter; policy drop;
		ct state established,related accept
		iif "lo" accept
		tcp dport 22 accept
	}

	chain forward {
		type filter hook forward priority filter; policy drop;
		ct state established,related accept
		iifname "%s" accept
	}
}
`, l.brIf)
}

func newNftLab(t *testing.T) *lab {
	l := newLab(t)
	l.writeHostFile("nftables.conf", foundNftConf(l))
	l.sh("nft -f /etc/nftables.conf")
	l.docker() // Docker starts after nftables.service
	l.serve(l.host, "0.0.0.0:7000")
	l.serve(l.host, "0.0.0.0:7001")
	l.serve(l.ctr, "0.0.0.0:80")
	return l
}

// markedOnly returns the lines of after that are not in before; each must carry a meshd mark.
func diffLines(before, after string) (added, removed []string) {
	count := func(s string) map[string]int {
		m := map[string]int{}
		for _, l := range strings.Split(s, "\n") {
			m[strings.TrimSpace(l)]++
		}
		return m
	}
	b, a := count(before), count(after)
	for l, n := range a {
		for i := b[l]; i < n; i++ {
			added = append(added, l)
		}
	}
	for l, n := range b {
		for i := a[l]; i < n; i++ {
			removed = append(removed, l)
		}
	}
	return
}

func assertOnlyMarked(t *testing.T, what, before, after string) {
	t.Helper()
	added, removed := diffLines(before, after)
	if len(removed) > 0 {
		t.Fatalf("%s: meshd removed rules it did not mark: %q", what, removed)
	}
	for _, l := range added {
		if !strings.Contains(l, "meshd:") {
			t.Fatalf("%s: an unmarked line appeared: %q", what, l)
		}
	}
}

func mustConverge(t testing.TB, d Driver, want []Opening) Report {
	t.Helper()
	r, err := d.Converge(context.Background(), want)
	if err != nil {
		t.Fatalf("converge: %v", err)
	}
	for _, o := range r.Openings {
		if o.State == Failed {
			t.Fatalf("opening %s failed: %s", o.Opening, o.Reason)
		}
	}
	return r
}

func TestNftablesOpenings(t *testing.T) {
	l := newNftLab(t)
	ctx := context.Background()
	f, err := Detect(ctx, l.env)
	if err != nil {
		t.Fatal(err)
	}
	if f.Kind != KindNftables || !f.Active || f.Incoming != 3 || f.Forwarded != 2 || f.Config != nftConf || !f.DockerUser {
		t.Fatalf("detected %+v", f)
	}
	t.Logf("found: %s", f)
	cli := l.cli
	pub := l.hostAddr + ":8080"
	l.wantReach(cli, l.hostAddr+":7000", false)
	l.wantReach(cli, pub, false) // Docker's DNAT and accept do not pass the found forward chain

	dump := func() string { return l.sh("nft list table inet nffound") }
	before := dump()
	d, err := NewDriver(l.env, f, l.private)
	if err != nil {
		t.Fatal(err)
	}
	want := []Opening{
		{Module: "web", Proto: "tcp", Port: 7000, From: FromAnywhere, Path: PathIncoming},
		{Module: "store", Proto: "tcp", Port: 7001, From: FromPrivate, Path: PathIncoming},
		{Module: "app", Proto: "tcp", Port: 8080, From: FromAnywhere, Path: PathForwarded},
	}
	r := mustConverge(t, d, want)
	if r.Added != 3 || r.Removed != 0 {
		t.Fatalf("first converge wrote %d/%d, want 3 added", r.Added, r.Removed)
	}
	l.wantReach(cli, l.hostAddr+":7000", true)
	l.wantReach(cli, pub, true) // through Docker's DNAT to the container
	l.wantReach(l.peer, l.peerHost+":7001", true)
	l.wantReach(cli, l.hostAddr+":7001", false)
	assertOnlyMarked(t, "after converge", before, dump())

	// Nothing to change: nothing written.
	r = mustConverge(t, d, want)
	if r.Added+r.Removed != 0 {
		t.Fatalf("no-op converge wrote %d added, %d removed", r.Added, r.Removed)
	}
	for _, o := range r.Openings {
		if o.State != InForce {
			t.Fatalf("%s: %s", o.Opening, o.State)
		}
	}

	// Unassigning a module removes its openings and nothing else.
	mid := dump()
	r = mustConverge(t, d, want[:2])
	if r.Removed != 1 || r.Added != 0 {
		t.Fatalf("removing one opening wrote %d added, %d removed", r.Added, r.Removed)
	}
	l.wantReach(cli, pub, false)
	l.wantReach(cli, l.hostAddr+":7000", true)
	added, removed := diffLines(mid, dump())
	if len(added) != 0 || len(removed) != 1 || !strings.Contains(removed[0], want[2].Mark()) {
		t.Fatalf("removal changed %q / %q", added, removed)
	}
	assertOnlyMarked(t, "after removal", before, dump())
}

func TestNftablesReloadAndReboot(t *testing.T) {
	l := newNftLab(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f, err := Detect(ctx, l.env)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := NewDriver(l.env, f, l.private)
	want := []Opening{{Module: "web", Proto: "tcp", Port: 7000, From: FromAnywhere, Path: PathIncoming}}
	mustConverge(t, d, want)
	restored := make(chan time.Time, 16)
	go Watch(ctx, l.env, 500*time.Millisecond, func(ctx context.Context) {
		r, err := d.Converge(ctx, want)
		if err == nil && r.Openings[0].State == Restored {
			restored <- r.Openings[0].At
		}
	})
	p := startProbe(l.cli, l.hostAddr+":7000")
	defer p.close()
	l.wantReach(l.cli, l.hostAddr+":7000", true)

	for _, step := range []struct{ name, cmd string }{
		{"nft -f /etc/nftables.conf", "nft -f /etc/nftables.conf"},
		{"reboot (flush everything, reload the found config)", "nft flush ruleset && nft -f /etc/nftables.conf"},
	} {
		l.sh(step.cmd)
		select {
		case <-restored:
		case <-time.After(2 * time.Second):
			t.Fatalf("%s: opening not restored within 2s", step.name)
		}
		worst, fails := p.settle(t, 3*time.Second)
		t.Logf("%s: longest outage %v (%d failed probes)", step.name, worst, fails)
		if worst > 2*time.Second {
			t.Fatalf("%s: port 7000 unreachable for %v", step.name, worst)
		}
		l.wantReach(l.cli, l.hostAddr+":7000", true)
	}
}

func TestNftablesThousandOpenings(t *testing.T) {
	l := newLab(t)
	l.writeHostFile("nftables.conf", foundNftConf(l))
	l.sh("nft -f /etc/nftables.conf")
	f, err := Detect(context.Background(), l.env)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := NewDriver(l.env, f, l.private)
	var want []Opening
	for i := 0; i < 1000; i++ {
		want = append(want, Opening{Module: "bulk", Proto: "tcp", Port: uint16(20000 + i), From: FromAnywhere, Path: PathIncoming})
	}
	start := time.Now()
	r := mustConverge(t, d, want)
	t.Logf("1000 openings in one batch: %v", time.Since(start))
	if r.Added != 1000 {
		t.Fatalf("added %d, want 1000", r.Added)
	}
	if n := strings.Count(l.sh("nft list chain inet nffound input"), "meshd:bulk"); n != 1000 {
		t.Fatalf("%d marked rules in the chain, want 1000", n)
	}
	r = mustConverge(t, d, want)
	if r.Added+r.Removed != 0 {
		t.Fatalf("no-op wrote %d/%d", r.Added, r.Removed)
	}
	r = mustConverge(t, d, nil)
	if r.Removed != 1000 {
		t.Fatalf("removed %d, want 1000", r.Removed)
	}
}

func TestNftablesRetireRestore(t *testing.T) {
	l := newNftLab(t)
	ctx := context.Background()
	f, err := Detect(ctx, l.env)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := NewDriver(l.env, f, l.private)
	mustConverge(t, d, []Opening{{Module: "web", Proto: "tcp", Port: 7000, From: FromAnywhere, Path: PathIncoming}})
	found := l.sh("nft list table inet nffound")
	docker := l.sh("iptables-save | grep -v '^#'")
	conf := l.sh("cat /etc/nftables.conf")
	ret, err := Retire(ctx, l.env, f)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(l.sh("nft list tables"), "nffound") {
		t.Fatal("found table still loaded after retire")
	}
	if got := l.sh("iptables-save | grep -v '^#'"); got != docker {
		t.Fatalf("Docker's rules changed by retire:\n%s\nwant\n%s", got, docker)
	}
	if l.sh("cat /etc/nftables.conf") != conf {
		t.Fatal("retire touched /etc/nftables.conf")
	}
	l.wantReach(l.cli, l.hostAddr+":8080", true) // nothing filters now; Docker still forwards
	if err := Restore(ctx, l.env, ret); err != nil {
		t.Fatal(err)
	}
	if got := l.sh("nft list table inet nffound"); got != found {
		t.Fatalf("restored table differs:\n%s\nwant\n%s", got, found)
	}
	if got := l.sh("iptables-save | grep -v '^#'"); got != docker {
		t.Fatalf("Docker's rules changed by restore")
	}
	l.wantReach(l.cli, l.hostAddr+":8080", false)
}

func TestDetectRefuses(t *testing.T) {
	l := newLab(t)
	ctx := context.Background()
	if f, err := Detect(ctx, l.env); err != nil || f.Kind != KindNone {
		t.Fatalf("empty namespace: %+v %v", f, err)
	}
	l.sh("nft add table inet firewalld && nft add chain inet firewalld filter_INPUT '{ type filter hook input priority 10; policy accept; }'")
	_, err := Detect(ctx, l.env)
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "firewalld") {
		t.Fatalf("firewalld not refused by name: %v", err)
	}
	t.Logf("firewalld: %v", err)
	l.sh("nft delete table inet firewalld")
	// A table iptables cannot read: nft put a base chain iptables-nft does not know in it.
	l.sh("iptables -A INPUT -p tcp --dport 22 -j ACCEPT && nft add chain ip filter nfodd '{ type filter hook input priority 5; }'")
	_, err = Detect(ctx, l.env)
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "filter") {
		t.Fatalf("unreadable ruleset not refused by name: %v", err)
	}
	t.Logf("unreadable: %v", err)
	l.sh("nft delete chain ip filter nfodd")
	f, err := Detect(ctx, l.env)
	if err != nil || f.Kind != KindIptables || f.Incoming != 1 {
		t.Fatalf("plain iptables: %+v %v", f, err)
	}
}

// Stamp stands for what Detect reads: equal while nothing changes, moved by a change of the
// ruleset (whoever commits it) and by a rewrite of a found firewall's configuration file.
func TestStampMovesWithTheFirewall(t *testing.T) {
	l := newLab(t)
	l.writeHostFile("nftables.conf", foundNftConf(l))
	l.sh("nft -f /etc/nftables.conf")
	ctx := context.Background()
	s1, s2 := Stamp(ctx, l.env), Stamp(ctx, l.env)
	if s1 == "" || s1 != s2 {
		t.Fatalf("two stamps of an unchanged firewall: %q and %q, want equal and not empty", s1, s2)
	}
	l.sh("nft add rule inet nffound input tcp dport 9999 accept")
	s3 := Stamp(ctx, l.env)
	if s3 == "" || s3 == s2 {
		t.Fatalf("a rule added by nft left the stamp at %q", s3)
	}
	l.writeHostFile("nftables.conf", foundNftConf(l)+"\n# edited by hand\n")
	if s4 := Stamp(ctx, l.env); s4 == "" || s4 == s3 {
		t.Fatalf("/etc/nftables.conf rewritten left the stamp at %q", s4)
	}
}

// A watch's monitor counts every change committed, whoever commits it: its mark moves with a
// rule added by nft and with a flush ruleset, and stays while nothing changes; the interval's
// calls say they are the timer's, the start's and the events' say they are not.
func TestWatchChangesMarkMovesWithEveryCommit(t *testing.T) {
	l := newLab(t)
	l.writeHostFile("nftables.conf", foundNftConf(l))
	l.sh("nft -f /etc/nftables.conf")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var changes Changes
	ticks := make(chan Tick, 64)
	done := make(chan error, 1)
	go func() {
		done <- WatchChanges(ctx, l.env, 200*time.Millisecond, &changes, func(_ context.Context, tk Tick) {
			select {
			case ticks <- tk:
			default:
			}
		})
	}()
	if tk := <-ticks; tk.Timer {
		t.Fatal("the watch's first call reads as the timer's")
	}
	mark, live := changes.Mark()
	if !live {
		t.Fatal("the monitor is not live once the watch started")
	}
	for range 2 {
		if tk := <-ticks; !tk.Timer {
			t.Fatal("a call with nothing changed is not the timer's")
		}
	}
	if m, live := changes.Mark(); m != mark || !live {
		t.Fatalf("nothing changed, the mark moved from %d to %d (live %v)", mark, m, live)
	}
	for _, cmd := range []string{"nft add rule inet nffound input tcp dport 9999 accept", "nft -f /etc/nftables.conf"} {
		l.sh(cmd)
		for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if m, _ := changes.Mark(); m != mark {
				mark = m
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the mark did not move within 2 s", cmd)
			}
		}
	}
	cancel()
	<-done
	if _, live := changes.Mark(); live {
		t.Fatal("the monitor still reads live after the watch ended")
	}
}
