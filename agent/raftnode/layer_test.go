package raftnode

import (
	"crypto/x509"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"meshd/internal/netsource"
	"meshd/pki"
)

// fakeGuard counts the addresses in servers as the record's servers' and admits everyone.
type fakeGuard struct{ servers map[netip.Addr]bool }

func (g fakeGuard) Server(a netip.Addr) bool    { return g.servers[a] }
func (fakeGuard) Admit(*x509.Certificate) error { return nil }

// floodedLayer is a hub's Raft layer on 127.0.0.1 whose guard holds 127.0.0.1 as a server's
// address, with the hub's and a server's identity of one mesh.
func floodedLayer(t *testing.T) (l *StreamLayer, srv member, ca *pki.CA) {
	t.Helper()
	ca, err := pki.NewCA("hub", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	hub := issue(t, ca, "hub", pki.ServerCert)
	guard := fakeGuard{servers: map[netip.Addr]bool{netip.MustParseAddr("127.0.0.1"): true}}
	l, err = ListenTLS("127.0.0.1:0", nil, hub.raftTLS(t, ca), guard, discardLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	answer(t, l)
	return l, issue(t, ca, "s2", pki.ServerCert), ca
}

// Silent connections from 200 addresses hold every place in the handshake there is for
// strangers; a server connecting from its own address (the record's) still completes its
// handshake, at once. Before the record's servers had places of their own, 64 silent
// connections held them all and the server's was closed.
func TestRaftFloodFromManyAddressesLeavesServersTheirPlaces(t *testing.T) {
	l, srv, ca := floodedLayer(t)
	flood(t, l.Addr().String(), loopbacks(1, 200), 1)
	// The flood holds every stranger's place: one more is closed at once.
	if err := handshakeFrom("127.3.0.1", l.Addr().String(), srv.raftTLS(t, ca), 2*time.Second); err == nil {
		t.Fatal("the flood holds no place: a stranger's connection got through")
	}
	for i := range 3 {
		if err := handshakeFrom("127.0.0.1", l.Addr().String(), srv.raftTLS(t, ca), 2*time.Second); err != nil {
			t.Fatalf("try %d: a server from its own address is kept out by the flood: %v", i, err)
		}
	}
}

// One source (an address, or an IPv6 /64) holds only a few of the strangers' places: a flood of
// 200 silent connections from one address leaves a server connecting from another address the
// record does not know (behind NAT, say) its handshake. Before, the flood took all 64.
func TestRaftFloodFromOneSourceLeavesOthersTheirPlaces(t *testing.T) {
	l, srv, ca := floodedLayer(t)
	flood(t, l.Addr().String(), []string{"127.2.0.1"}, 200)
	if err := handshakeFrom("127.2.0.2", l.Addr().String(), srv.raftTLS(t, ca), 2*time.Second); err != nil {
		t.Fatalf("a server from another address is kept out by one source's flood: %v", err)
	}
}

// A connection that never speaks is closed within the short handshake deadline, giving its
// place back. Before, it held it for 10 s.
func TestRaftSilentConnectionIsClosedSoon(t *testing.T) {
	t.Parallel()
	l, _, _ := floodedLayer(t)
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	c.SetReadDeadline(start.Add(8 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("a silent connection: read %v, want it closed by the server", err)
	}
	if d := time.Since(start); d > raftHandshakeTimeout+time.Second {
		t.Fatalf("a silent connection was held %s", d)
	}
}

// The places are counted by source: an IPv4 address, an IPv6 /64 (its addresses all one source,
// another /64 another); the record's servers' in a pool of their own.
func TestRaftPendingPlacesBySource(t *testing.T) {
	l := &StreamLayer{}
	for i := range l.pools {
		l.pools[i].bySource = map[netip.Prefix]int{}
	}
	src := func(a string) netip.Prefix { return netsource.Of(netip.MustParseAddr(a).Unmap()) }
	for i := range raftMaxPendingPerSource {
		if why := l.take(0, src(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: byte(i + 1)}).String())); why != "" {
			t.Fatalf("place %d of a /64: %s", i, why)
		}
	}
	if why := l.take(0, src("2001:db8::ffff:1")); why == "" {
		t.Fatal("another address of the same /64 got a place beyond the source's limit")
	}
	if why := l.take(0, src("2001:db8:0:1::1")); why != "" {
		t.Fatalf("another /64: %s", why)
	}
	if why := l.take(1, src("2001:db8::1")); why != "" {
		t.Fatalf("the same /64 as a record server's address, in the servers' pool: %s", why)
	}
	if src("::ffff:192.0.2.1") != src("192.0.2.1") || src("192.0.2.1") == src("192.0.2.2") {
		t.Fatal("an IPv4 address is not its own source")
	}
	for range raftMaxPending - raftMaxPendingPerSource - 1 {
		l.take(0, src("2001:db8:0:2::1"))
		l.release(0, src("2001:db8:0:2::1"))
	}
	for i := range raftMaxPending - raftMaxPendingPerSource - 1 {
		if why := l.take(0, src(netip.AddrFrom4([4]byte{192, 0, 2, byte(i + 1)}).String())); why != "" {
			t.Fatalf("place %d: %s", i, why)
		}
	}
	if why := l.take(0, src("198.51.100.1")); why == "" {
		t.Fatalf("a place beyond the %d in all", raftMaxPending)
	}
	l.release(0, src("192.0.2.1"))
	if why := l.take(0, src("198.51.100.1")); why != "" {
		t.Fatalf("a place given back is not taken again: %s", why)
	}
}
