package netfilter

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"meshd/internal/testenv"
)

// The guard refuses the store (published 8080 -> container 80, and 7001 on the host) from
// the outside namespace, whatever the found firewall allows (here an nftables ruleset with an
// opening from anywhere for both), and leaves it reachable over the private interface and
// from the machine itself.
func TestGuard(t *testing.T) {
	l := newNftLab(t)
	ctx := context.Background()
	f, err := Detect(ctx, l.env)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := NewDriver(l.env, f, l.private)
	mustConverge(t, d, []Opening{
		{Module: "store", Proto: "tcp", Port: 8080, From: FromAnywhere, Path: PathForwarded},
		{Module: "store", Proto: "tcp", Port: 7001, From: FromAnywhere, Path: PathIncoming},
	})
	l.wantReach(l.cli, l.hostAddr+":8080", true)
	l.wantReach(l.cli, l.hostAddr+":7001", true)

	spec := GuardSpec{Private: l.private, Ports: []Port{{"tcp", 8080}, {"tcp", 7001}}}
	wrote, err := Guard(ctx, l.env, spec)
	if err != nil || !wrote {
		t.Fatalf("guard: wrote=%v err=%v", wrote, err)
	}
	l.wantReach(l.cli, l.hostAddr+":8080", false)
	l.wantReach(l.cli, l.hostAddr+":7001", false)
	l.wantReach(l.peer, l.peerHost+":8080", true) // over the private interface, through Docker's DNAT
	l.wantReach(l.peer, l.peerHost+":7001", true)
	l.wantReach(l.host, "127.0.0.1:7001", true) // the machine itself
	l.wantReach(l.cli, l.hostAddr+":7000", false)
	// Traffic passing through the machine to another address on a guarded port (a container
	// calling another at its own address, as a predecessor's app calls its redis) is not the
	// guard's: only traffic addressed to the machine is refused.
	l.serve(l.cli, "0.0.0.0:7001")
	testenv.Run(t, "ip", "-n", l.cli, "route", "add", "192.0.2.0/24", "via", l.hostAddr)
	l.wantReach(l.ctr, "198.51.100.2:7001", true)

	table := l.sh("nft list table inet " + GuardTable)
	t.Logf("guard:\n%s", table)
	if strings.Contains(table, "accept\n") && !strings.Contains(table, "policy accept") {
		t.Fatal("the guard holds an accept rule")
	}
	if !strings.Contains(table, "priority mangle;") && !strings.Contains(table, "priority -150;") { // mangle is -150
		t.Fatal("the guard is not ahead of dstnat")
	}
	// Loaded as desired: nothing written.
	if wrote, err := Guard(ctx, l.env, spec); err != nil || wrote {
		t.Fatalf("second guard: wrote=%v err=%v", wrote, err)
	}
	// A reload of the found firewall that begins with flush ruleset removes the guard's table
	// too: the re-check (the same watcher that restores openings) loads it again within 2 s.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	want := []Opening{{Module: "store", Proto: "tcp", Port: 7001, From: FromAnywhere, Path: PathIncoming}}
	subscribed := make(chan struct{})
	var once sync.Once
	go Watch(wctx, l.env, 500*time.Millisecond, func(ctx context.Context) {
		Guard(ctx, l.env, spec)
		d.Converge(ctx, want)
		once.Do(func() { close(subscribed) })
	})
	<-subscribed
	l.sh("nft -f /etc/nftables.conf")
	deadline := time.Now().Add(2 * time.Second)
	for {
		if _, err := l.env.run(ctx, "nft", "list", "table", "inet", GuardTable); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("guard not loaded again within 2s of the found firewall's reload")
		}
		time.Sleep(20 * time.Millisecond)
	}
	l.wantReach(l.cli, l.hostAddr+":7001", false)
	l.wantReach(l.peer, l.peerHost+":7001", true)
	cancel()
	if err := RemoveGuard(ctx, l.env); err != nil {
		t.Fatal(err)
	}
	l.wantReach(l.cli, l.hostAddr+":7001", true)
}

// The derived filter of a converged node: drop by default, the mesh's ports from the private
// network, and the openings.
func TestDerivedFilter(t *testing.T) {
	l := newLab(t)
	ctx := context.Background()
	l.docker()
	l.serve(l.host, "0.0.0.0:7000")
	l.serve(l.host, "0.0.0.0:7001")
	l.serve(l.host, "0.0.0.0:7002")
	l.serve(l.ctr, "0.0.0.0:80")
	spec := FilterSpec{
		Private:     l.private,
		MeshPorts:   []Port{{"tcp", 7001}},
		Openings:    []Opening{{Module: "web", Proto: "tcp", Port: 7000, From: FromAnywhere, Path: PathIncoming}, {Module: "app", Proto: "tcp", Port: 8080, From: FromAnywhere, Path: PathForwarded}},
		ForwardFrom: []string{l.brIf},
	}
	if wrote, err := LoadFilter(ctx, l.env, spec); err != nil || !wrote {
		t.Fatalf("load filter: %v %v", wrote, err)
	}
	l.wantReach(l.cli, l.hostAddr+":7000", true)
	l.wantReach(l.cli, l.hostAddr+":8080", true)
	l.wantReach(l.cli, l.hostAddr+":7001", false)
	l.wantReach(l.cli, l.hostAddr+":7002", false)
	l.wantReach(l.peer, l.peerHost+":7001", true)
	l.wantReach(l.host, "127.0.0.1:7002", true)
	if wrote, err := LoadFilter(ctx, l.env, spec); err != nil || wrote {
		t.Fatalf("reload unchanged filter: wrote=%v err=%v", wrote, err)
	}
	spec.Openings = spec.Openings[:1]
	if _, err := LoadFilter(ctx, l.env, spec); err != nil {
		t.Fatal(err)
	}
	l.wantReach(l.cli, l.hostAddr+":8080", false)
	if err := RemoveFilter(ctx, l.env); err != nil {
		t.Fatal(err)
	}
	l.wantReach(l.cli, l.hostAddr+":7002", true)
}
