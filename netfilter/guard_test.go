package netfilter

import (
	"context"
	"io"
	"net"
	"net/netip"
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
		if _, err := l.env.Run(ctx, "nft", "list", "table", "inet", GuardTable); err == nil {
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

// reachFrom is reach with the connection's source address chosen (one of ns's addresses; ""
// leaves it to the kernel).
func reachFrom(ns, local, addr string, timeout time.Duration) bool {
	var c net.Conn
	err := testenv.InNetns(ns, func() error {
		d := net.Dialer{Timeout: timeout}
		if local != "" {
			d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(local)}
		}
		var err error
		c, err = d.Dial("tcp", addr)
		return err
	})
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	b := make([]byte, 2)
	_, err = io.ReadFull(c, b)
	return err == nil && string(b) == "ok"
}

func (l *lab) wantReachFrom(ns, local, addr string, want bool) {
	l.t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		got := reachFrom(ns, local, addr, 400*time.Millisecond)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("from %s at %s to %s: reachable=%v, want %v", ns, local, addr, got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// The derived filter of a converged server admits the Raft port (the mesh module's opening from
// anywhere, narrowed by Admit to the record's servers) from the servers' underlay addresses
// alone, over IPv4 and IPv6; anyone else on the underlay is refused, the private network and
// the machine itself still get in. Without Admit the same opening is open to anyone.
func TestDerivedFilterAdmitsOnlyServersToRaft(t *testing.T) {
	l := newLab(t)
	l.addIPv6()
	ctx := context.Background()
	// A second machine on the underlay, a server, at .3 and ::3 beside the outsider at .2 and ::2.
	testenv.Run(t, "ip", "-n", l.cli, "addr", "add", "198.51.100.3/24", "dev", l.upIf+"c")
	testenv.Run(t, "ip", "-n", l.cli, "addr", "add", "2001:db8:100::3/64", "dev", l.upIf+"c", "nodad")
	l.serve(l.host, "[::]:7071") // both families
	raft := Port{"tcp", 7071}
	spec := FilterSpec{
		Private:   l.private,
		MeshPorts: []Port{raft},
		Openings:  []Opening{{Module: "mesh", Proto: "tcp", Port: 7071, From: FromAnywhere, Path: PathIncoming}},
		Admit:     map[Port][]netip.Addr{raft: {netip.MustParseAddr("198.51.100.3"), netip.MustParseAddr("2001:db8:100::3")}},
	}
	if wrote, err := LoadFilter(ctx, l.env, spec); err != nil || !wrote {
		t.Fatalf("load filter: %v %v", wrote, err)
	}
	t.Logf("derived filter:\n%s", l.sh("nft list table inet "+FilterTable))
	l.wantReachFrom(l.cli, "198.51.100.2", l.hostAddr+":7071", false)
	l.wantReachFrom(l.cli, "2001:db8:100::2", host6+":7071", false)
	l.wantReachFrom(l.cli, "198.51.100.3", l.hostAddr+":7071", true)
	l.wantReachFrom(l.cli, "2001:db8:100::3", host6+":7071", true)
	l.wantReach(l.peer, l.peerHost+":7071", true) // the private network
	l.wantReach(l.host, "127.0.0.1:7071", true)   // loopback
	l.wantReach(l.host, l.hostAddr+":7071", true) // the machine at its own underlay address
	if wrote, err := LoadFilter(ctx, l.env, spec); err != nil || wrote {
		t.Fatalf("reload unchanged filter: wrote=%v err=%v", wrote, err)
	}
	// A server leaves the record: its address is refused from the next load on.
	spec.Admit[raft] = spec.Admit[raft][1:]
	if wrote, err := LoadFilter(ctx, l.env, spec); err != nil || !wrote {
		t.Fatalf("load filter without the IPv4 server: %v %v", wrote, err)
	}
	l.wantReachFrom(l.cli, "198.51.100.3", l.hostAddr+":7071", false)
	l.wantReachFrom(l.cli, "2001:db8:100::3", host6+":7071", true)
	// What the filter did before Admit: the opening from anywhere lets the outsider in.
	spec.Admit = nil
	if _, err := LoadFilter(ctx, l.env, spec); err != nil {
		t.Fatal(err)
	}
	l.wantReachFrom(l.cli, "198.51.100.2", l.hostAddr+":7071", true)
}
