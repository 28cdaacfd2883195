package netfilter_test

import (
	"context"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"meshd/internal/testenv"
	"meshd/netfilter"
	"meshd/netfilter/firewall"
	"meshd/netfilter/internal/nflab"
)

// The guard refuses the store (published 8080 -> container 80, and 7001 on the host) from
// the outside namespace, whatever the found firewall allows (here an nftables ruleset with an
// opening from anywhere for both), and leaves it reachable over the private interface and
// from the machine itself.
func TestGuard(t *testing.T) {
	l := nflab.NewNftables(t)
	ctx := context.Background()
	f, err := firewall.Detect(ctx, l.Env)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := firewall.NewDriver(l.Env, f, l.Private)
	nflab.MustConverge(t, d, []netfilter.Opening{
		{Module: "store", Proto: "tcp", Port: 8080, From: netfilter.FromAnywhere, Path: netfilter.PathForwarded},
		{Module: "store", Proto: "tcp", Port: 7001, From: netfilter.FromAnywhere, Path: netfilter.PathIncoming},
	})
	l.WantReach(l.Cli, l.HostAddr+":8080", true)
	l.WantReach(l.Cli, l.HostAddr+":7001", true)

	spec := netfilter.GuardSpec{Private: l.Private, Ports: []netfilter.Port{{Proto: "tcp", Port: 8080}, {Proto: "tcp", Port: 7001}}}
	wrote, err := netfilter.Guard(ctx, l.Env, spec)
	if err != nil || !wrote {
		t.Fatalf("guard: wrote=%v err=%v", wrote, err)
	}
	l.WantReach(l.Cli, l.HostAddr+":8080", false)
	l.WantReach(l.Cli, l.HostAddr+":7001", false)
	l.WantReach(l.Peer, l.PeerHost+":8080", true) // over the private interface, through Docker's DNAT
	l.WantReach(l.Peer, l.PeerHost+":7001", true)
	l.WantReach(l.Host, "127.0.0.1:7001", true) // the machine itself
	l.WantReach(l.Cli, l.HostAddr+":7000", false)
	// Traffic passing through the machine to another address on a guarded port (a container
	// calling another at its own address, as a predecessor's app calls its redis) is not the
	// guard's: only traffic addressed to the machine is refused.
	l.Serve(l.Cli, "0.0.0.0:7001")
	testenv.Run(t, "ip", "-n", l.Cli, "route", "add", "192.0.2.0/24", "via", l.HostAddr)
	l.WantReach(l.Ctr, "198.51.100.2:7001", true)

	table := l.Sh("nft list table inet " + netfilter.GuardTable)
	t.Logf("guard:\n%s", table)
	if strings.Contains(table, "accept\n") && !strings.Contains(table, "policy accept") {
		t.Fatal("the guard holds an accept rule")
	}
	if !strings.Contains(table, "priority mangle;") && !strings.Contains(table, "priority -150;") { // mangle is -150
		t.Fatal("the guard is not ahead of dstnat")
	}
	// Loaded as desired: nothing written.
	if wrote, err := netfilter.Guard(ctx, l.Env, spec); err != nil || wrote {
		t.Fatalf("second guard: wrote=%v err=%v", wrote, err)
	}
	// A reload of the found firewall that begins with flush ruleset removes the guard's table
	// too: the re-check (the same watcher that restores openings) loads it again within 2 s.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	want := []netfilter.Opening{{Module: "store", Proto: "tcp", Port: 7001, From: netfilter.FromAnywhere, Path: netfilter.PathIncoming}}
	subscribed := make(chan struct{})
	var once sync.Once
	go netfilter.Watch(wctx, l.Env, 500*time.Millisecond, func(ctx context.Context) {
		netfilter.Guard(ctx, l.Env, spec)
		d.Converge(ctx, want)
		once.Do(func() { close(subscribed) })
	})
	<-subscribed
	l.Sh("nft -f /etc/nftables.conf")
	deadline := time.Now().Add(2 * time.Second)
	for {
		if _, err := l.Env.Run(ctx, "nft", "list", "table", "inet", netfilter.GuardTable); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("guard not loaded again within 2s of the found firewall's reload")
		}
		time.Sleep(20 * time.Millisecond)
	}
	l.WantReach(l.Cli, l.HostAddr+":7001", false)
	l.WantReach(l.Peer, l.PeerHost+":7001", true)
	cancel()
	if err := netfilter.RemoveGuard(ctx, l.Env); err != nil {
		t.Fatal(err)
	}
	l.WantReach(l.Cli, l.HostAddr+":7001", true)
}

// The derived filter of a converged node: drop by default, the mesh's ports from the private
// network, and the openings.
func TestDerivedFilter(t *testing.T) {
	l := nflab.New(t)
	ctx := context.Background()
	l.Docker()
	l.Serve(l.Host, "0.0.0.0:7000")
	l.Serve(l.Host, "0.0.0.0:7001")
	l.Serve(l.Host, "0.0.0.0:7002")
	l.Serve(l.Ctr, "0.0.0.0:80")
	spec := netfilter.FilterSpec{
		Private:     l.Private,
		MeshPorts:   []netfilter.Port{{Proto: "tcp", Port: 7001}},
		Openings:    []netfilter.Opening{{Module: "web", Proto: "tcp", Port: 7000, From: netfilter.FromAnywhere, Path: netfilter.PathIncoming}, {Module: "app", Proto: "tcp", Port: 8080, From: netfilter.FromAnywhere, Path: netfilter.PathForwarded}},
		ForwardFrom: []string{l.BrIf},
	}
	if wrote, err := netfilter.LoadFilter(ctx, l.Env, spec); err != nil || !wrote {
		t.Fatalf("load filter: %v %v", wrote, err)
	}
	l.WantReach(l.Cli, l.HostAddr+":7000", true)
	l.WantReach(l.Cli, l.HostAddr+":8080", true)
	l.WantReach(l.Cli, l.HostAddr+":7001", false)
	l.WantReach(l.Cli, l.HostAddr+":7002", false)
	l.WantReach(l.Peer, l.PeerHost+":7001", true)
	l.WantReach(l.Host, "127.0.0.1:7002", true)
	if wrote, err := netfilter.LoadFilter(ctx, l.Env, spec); err != nil || wrote {
		t.Fatalf("reload unchanged filter: wrote=%v err=%v", wrote, err)
	}
	spec.Openings = spec.Openings[:1]
	if _, err := netfilter.LoadFilter(ctx, l.Env, spec); err != nil {
		t.Fatal(err)
	}
	l.WantReach(l.Cli, l.HostAddr+":8080", false)
	if err := netfilter.RemoveFilter(ctx, l.Env); err != nil {
		t.Fatal(err)
	}
	l.WantReach(l.Cli, l.HostAddr+":7002", true)
}

// The derived filter of a converged server admits the Raft port (the mesh module's opening from
// anywhere, narrowed by Admit to the record's servers) from the servers' underlay addresses
// alone, over IPv4 and IPv6; anyone else on the underlay is refused, the private network and
// the machine itself still get in. Without Admit the same opening is open to anyone.
func TestDerivedFilterAdmitsOnlyServersToRaft(t *testing.T) {
	l := nflab.New(t)
	l.AddIPv6()
	ctx := context.Background()
	// A second machine on the underlay, a server, at .3 and ::3 beside the outsider at .2 and ::2.
	testenv.Run(t, "ip", "-n", l.Cli, "addr", "add", "198.51.100.3/24", "dev", l.UpIf+"c")
	testenv.Run(t, "ip", "-n", l.Cli, "addr", "add", "2001:db8:100::3/64", "dev", l.UpIf+"c", "nodad")
	l.Serve(l.Host, "[::]:7071") // both families
	raft := netfilter.Port{Proto: "tcp", Port: 7071}
	spec := netfilter.FilterSpec{
		Private:   l.Private,
		MeshPorts: []netfilter.Port{raft},
		Openings:  []netfilter.Opening{{Module: "mesh", Proto: "tcp", Port: 7071, From: netfilter.FromAnywhere, Path: netfilter.PathIncoming}},
		Admit:     map[netfilter.Port][]netip.Addr{raft: {netip.MustParseAddr("198.51.100.3"), netip.MustParseAddr("2001:db8:100::3")}},
	}
	if wrote, err := netfilter.LoadFilter(ctx, l.Env, spec); err != nil || !wrote {
		t.Fatalf("load filter: %v %v", wrote, err)
	}
	t.Logf("derived filter:\n%s", l.Sh("nft list table inet "+netfilter.FilterTable))
	l.WantReachFrom(l.Cli, "198.51.100.2", l.HostAddr+":7071", false)
	l.WantReachFrom(l.Cli, "2001:db8:100::2", nflab.Host6+":7071", false)
	l.WantReachFrom(l.Cli, "198.51.100.3", l.HostAddr+":7071", true)
	l.WantReachFrom(l.Cli, "2001:db8:100::3", nflab.Host6+":7071", true)
	l.WantReach(l.Peer, l.PeerHost+":7071", true) // the private network
	l.WantReach(l.Host, "127.0.0.1:7071", true)   // loopback
	l.WantReach(l.Host, l.HostAddr+":7071", true) // the machine at its own underlay address
	if wrote, err := netfilter.LoadFilter(ctx, l.Env, spec); err != nil || wrote {
		t.Fatalf("reload unchanged filter: wrote=%v err=%v", wrote, err)
	}
	// A server leaves the record: its address is refused from the next load on.
	spec.Admit[raft] = spec.Admit[raft][1:]
	if wrote, err := netfilter.LoadFilter(ctx, l.Env, spec); err != nil || !wrote {
		t.Fatalf("load filter without the IPv4 server: %v %v", wrote, err)
	}
	l.WantReachFrom(l.Cli, "198.51.100.3", l.HostAddr+":7071", false)
	l.WantReachFrom(l.Cli, "2001:db8:100::3", nflab.Host6+":7071", true)
	// What the filter did before Admit: the opening from anywhere lets the outsider in.
	spec.Admit = nil
	if _, err := netfilter.LoadFilter(ctx, l.Env, spec); err != nil {
		t.Fatal(err)
	}
	l.WantReachFrom(l.Cli, "198.51.100.2", l.HostAddr+":7071", true)
}
