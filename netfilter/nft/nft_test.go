package nft_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"meshd/netfilter"
	"meshd/netfilter/firewall"
	"meshd/netfilter/internal/nflab"
	"meshd/netfilter/nft"
)

func TestNftablesOpenings(t *testing.T) {
	l := nflab.NewNftables(t)
	ctx := context.Background()
	f, err := firewall.Detect(ctx, l.Env)
	if err != nil {
		t.Fatal(err)
	}
	if f.Kind != netfilter.KindNftables || !f.Active || f.Incoming != 3 || f.Forwarded != 2 || f.Config != nft.Conf || !f.DockerUser {
		t.Fatalf("detected %+v", f)
	}
	t.Logf("found: %s", f)
	cli := l.Cli
	pub := l.HostAddr + ":8080"
	// metrics: published on 9090, listening inside on 8080, the port app's opening names
	metrics := l.HostAddr + ":9090"
	l.Publish(9090, 8080)
	l.Serve(l.Ctr, "0.0.0.0:8080")
	l.WantReach(cli, l.HostAddr+":7000", false)
	l.WantReach(cli, pub, false) // Docker's DNAT and accept do not pass the found forward chain
	l.WantReach(cli, metrics, false)

	dump := func() string { return l.Sh("nft list table inet nffound") }
	before := dump()
	d, err := firewall.NewDriver(l.Env, f, l.Private)
	if err != nil {
		t.Fatal(err)
	}
	want := []netfilter.Opening{
		{Module: "web", Proto: "tcp", Port: 7000, From: netfilter.FromAnywhere, Path: netfilter.PathIncoming},
		{Module: "store", Proto: "tcp", Port: 7001, From: netfilter.FromPrivate, Path: netfilter.PathIncoming},
		{Module: "app", Proto: "tcp", Port: 8080, From: netfilter.FromAnywhere, Path: netfilter.PathForwarded},
	}
	r := nflab.MustConverge(t, d, want)
	if r.Added != 3 || r.Removed != 0 {
		t.Fatalf("first converge wrote %d/%d, want 3 added", r.Added, r.Removed)
	}
	l.WantReach(cli, l.HostAddr+":7000", true)
	l.WantReach(cli, pub, true)      // through Docker's DNAT to the container
	l.WantReach(cli, metrics, false) // the published port addressed, not the container's
	l.WantReach(l.Peer, l.PeerHost+":7001", true)
	l.WantReach(cli, l.HostAddr+":7001", false)
	nflab.AssertOnlyMarked(t, "after converge", before, dump())

	// Nothing to change: nothing written.
	r = nflab.MustConverge(t, d, want)
	if r.Added+r.Removed != 0 {
		t.Fatalf("no-op converge wrote %d added, %d removed", r.Added, r.Removed)
	}
	for _, o := range r.Openings {
		if o.State != netfilter.InForce {
			t.Fatalf("%s: %s", o.Opening, o.State)
		}
	}

	// Unassigning a module removes its openings and nothing else.
	mid := dump()
	r = nflab.MustConverge(t, d, want[:2])
	if r.Removed != 1 || r.Added != 0 {
		t.Fatalf("removing one opening wrote %d added, %d removed", r.Added, r.Removed)
	}
	l.WantReach(cli, pub, false)
	l.WantReach(cli, l.HostAddr+":7000", true)
	added, removed := nflab.DiffLines(mid, dump())
	if len(added) != 0 || len(removed) != 1 || !strings.Contains(removed[0], want[2].Mark()) {
		t.Fatalf("removal changed %q / %q", added, removed)
	}
	nflab.AssertOnlyMarked(t, "after removal", before, dump())
}

func TestNftablesReloadAndReboot(t *testing.T) {
	l := nflab.NewNftables(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f, err := firewall.Detect(ctx, l.Env)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := firewall.NewDriver(l.Env, f, l.Private)
	want := []netfilter.Opening{{Module: "web", Proto: "tcp", Port: 7000, From: netfilter.FromAnywhere, Path: netfilter.PathIncoming}}
	nflab.MustConverge(t, d, want)
	restored := make(chan time.Time, 16)
	go netfilter.Watch(ctx, l.Env, 500*time.Millisecond, func(ctx context.Context) {
		r, err := d.Converge(ctx, want)
		if err == nil && r.Openings[0].State == netfilter.Restored {
			restored <- r.Openings[0].At
		}
	})
	p := nflab.StartProbe(l.Cli, l.HostAddr+":7000")
	defer p.Close()
	l.WantReach(l.Cli, l.HostAddr+":7000", true)

	for _, step := range []struct{ name, cmd string }{
		{"nft -f /etc/nftables.conf", "nft -f /etc/nftables.conf"},
		{"reboot (flush everything, reload the found config)", "nft flush ruleset && nft -f /etc/nftables.conf"},
	} {
		l.Sh(step.cmd)
		select {
		case <-restored:
		case <-time.After(2 * time.Second):
			t.Fatalf("%s: opening not restored within 2s", step.name)
		}
		worst, fails := p.Settle(t, 3*time.Second)
		t.Logf("%s: longest outage %v (%d failed probes)", step.name, worst, fails)
		if worst > 2*time.Second {
			t.Fatalf("%s: port 7000 unreachable for %v", step.name, worst)
		}
		l.WantReach(l.Cli, l.HostAddr+":7000", true)
	}
}

func TestNftablesThousandOpenings(t *testing.T) {
	l := nflab.New(t)
	l.WriteHostFile("nftables.conf", nflab.FoundNftConf(l))
	l.Sh("nft -f /etc/nftables.conf")
	f, err := firewall.Detect(context.Background(), l.Env)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := firewall.NewDriver(l.Env, f, l.Private)
	var want []netfilter.Opening
	for i := 0; i < 1000; i++ {
		want = append(want, netfilter.Opening{Module: "bulk", Proto: "tcp", Port: uint16(20000 + i), From: netfilter.FromAnywhere, Path: netfilter.PathIncoming})
	}
	start := time.Now()
	r := nflab.MustConverge(t, d, want)
	t.Logf("1000 openings in one batch: %v", time.Since(start))
	if r.Added != 1000 {
		t.Fatalf("added %d, want 1000", r.Added)
	}
	if n := strings.Count(l.Sh("nft list chain inet nffound input"), "meshd:bulk"); n != 1000 {
		t.Fatalf("%d marked rules in the chain, want 1000", n)
	}
	r = nflab.MustConverge(t, d, want)
	if r.Added+r.Removed != 0 {
		t.Fatalf("no-op wrote %d/%d", r.Added, r.Removed)
	}
	r = nflab.MustConverge(t, d, nil)
	if r.Removed != 1000 {
		t.Fatalf("removed %d, want 1000", r.Removed)
	}
}

func TestNftablesRetireRestore(t *testing.T) {
	l := nflab.NewNftables(t)
	ctx := context.Background()
	f, err := firewall.Detect(ctx, l.Env)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := firewall.NewDriver(l.Env, f, l.Private)
	nflab.MustConverge(t, d, []netfilter.Opening{{Module: "web", Proto: "tcp", Port: 7000, From: netfilter.FromAnywhere, Path: netfilter.PathIncoming}})
	found := l.Sh("nft list table inet nffound")
	docker := l.Sh("iptables-save | grep -v '^#'")
	conf := l.Sh("cat /etc/nftables.conf")
	ret, err := firewall.Retire(ctx, l.Env, f)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(l.Sh("nft list tables"), "nffound") {
		t.Fatal("found table still loaded after retire")
	}
	if got := l.Sh("iptables-save | grep -v '^#'"); got != docker {
		t.Fatalf("Docker's rules changed by retire:\n%s\nwant\n%s", got, docker)
	}
	if l.Sh("cat /etc/nftables.conf") != conf {
		t.Fatal("retire touched /etc/nftables.conf")
	}
	l.WantReach(l.Cli, l.HostAddr+":8080", true) // nothing filters now; Docker still forwards
	if err := firewall.Restore(ctx, l.Env, ret); err != nil {
		t.Fatal(err)
	}
	if got := l.Sh("nft list table inet nffound"); got != found {
		t.Fatalf("restored table differs:\n%s\nwant\n%s", got, found)
	}
	if got := l.Sh("iptables-save | grep -v '^#'"); got != docker {
		t.Fatalf("Docker's rules changed by restore")
	}
	l.WantReach(l.Cli, l.HostAddr+":8080", false)
}
