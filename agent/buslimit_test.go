package agent

import (
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"meshd/internal/netsource"
	"meshd/internal/ratelog"
	"meshd/internal/testenv"
)

// fakeListener hands out one connection per address in addrs, then blocks until closed.
type fakeListener struct {
	addrs chan netip.Addr
	done  chan struct{}
	once  sync.Once
}

func (f *fakeListener) Accept() (net.Conn, error) {
	select {
	case a := <-f.addrs:
		c, other := net.Pipe()
		go func() { _, _ = other.Read(make([]byte, 1)); other.Close() }()
		return addrConn{Conn: c, from: &net.TCPAddr{IP: a.AsSlice(), Port: 40000}}, nil
	case <-f.done:
		return nil, net.ErrClosed
	}
}
func (f *fakeListener) Close() error   { f.once.Do(func() { close(f.done) }); return nil }
func (f *fakeListener) Addr() net.Addr { return &net.TCPAddr{} }

type addrConn struct {
	net.Conn
	from net.Addr
}

func (c addrConn) RemoteAddr() net.Addr { return c.from }

// Issue 26, finding 8: the per-address limit counted each IPv6 address apart, so one machine's
// /64 held every place of the bus. Addresses of one /64 count as one source now, another /64 is
// another source, and the record's nodes are counted apart from everyone else.
func TestUnitBusLimitCountsAnIPv6SlashSixtyFourAsOneSource(t *testing.T) {
	node := netip.MustParseAddr("2001:db8:1::7")
	fl := &fakeListener{addrs: make(chan netip.Addr, 64), done: make(chan struct{})}
	l := newLimitListener(fl, 8, 4, ratelog.New(slog.New(slog.DiscardHandler), 10, time.Minute),
		func(a netip.Addr) bool { return a == node })
	defer fl.Close()
	// Six addresses of one /64, then one of another /64, then the record's node.
	for i := range 6 {
		fl.addrs <- netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: byte(i + 1)})
	}
	other := netip.MustParseAddr("2001:db8:0:1::1")
	fl.addrs <- other
	fl.addrs <- node
	var got []netip.Addr
	for range 6 {
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		got = append(got, netsource.Addr(c))
	}
	want := 4
	for i, a := range got[:want] {
		if !netip.MustParsePrefix("2001:db8::/64").Contains(a) {
			t.Fatalf("connection %d came from %s, want the first /64's", i, a)
		}
	}
	if got[want] != other || got[want+1] != node {
		t.Fatalf("after the /64's limit of %d the bus took %v, want %s then the record's node %s", want, got[want:], other, node)
	}
	if n := l.pools[0].bySource[netip.MustParsePrefix("2001:db8::/64")]; n != want {
		t.Fatalf("the /64 holds %d places, want %d", n, want)
	}
}

// Issue 37: every client watches on the first server it knows, so at a thousand nodes that server
// holds a connection or two of each; the record's nodes' places grow with the record. With a
// bound of 8 and 3 places a node for 3 nodes, the record's nodes (one address each, under the
// per-source limit) hold 9 connections; the tenth is closed, and so is one source's fifth.
func TestUnitBusLimitGrowsWithTheRecord(t *testing.T) {
	var nodes []netip.Addr
	for i := range 10 {
		nodes = append(nodes, netip.AddrFrom4([4]byte{100, 64, 0, byte(i + 1)}))
	}
	known := func(a netip.Addr) bool { return a.Is4() && a.As4()[0] == 100 }
	fl := &fakeListener{addrs: make(chan netip.Addr, 64), done: make(chan struct{})}
	l := newLimitListener(fl, 8, 4, ratelog.New(slog.New(slog.DiscardHandler), 10, time.Minute), known)
	l.knownMax = func() int { return 3 * 3 }
	defer fl.Close()
	for _, a := range nodes {
		fl.addrs <- a
	}
	outsider := netip.MustParseAddr("192.0.2.9")
	for range 5 {
		fl.addrs <- netip.MustParseAddr("192.0.2.1").Next()
	}
	fl.addrs <- outsider
	var got []netip.Addr
	for range 9 + 4 + 1 {
		c, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		got = append(got, netsource.Addr(c))
	}
	for i, a := range got[:9] {
		if a != nodes[i] {
			t.Fatalf("connection %d came from %s, want the record's node %s", i, a, nodes[i])
		}
	}
	if got[13] != outsider {
		t.Fatalf("after 9 of the record's nodes and 4 of one source, the bus took %v, want %s", got[9:], outsider)
	}
	if n := l.pools[1].total; n != 9 {
		t.Fatalf("the record's nodes hold %d places, want 9", n)
	}
}

// Issue 26, finding 8, played from outside: sixteen addresses that open silent connections up to
// their limit held all 512 places of the bus, and the record's own node could not reach it. Now
// the node's connection is served while the flood holds its places, and a seventeenth address
// finds the bus full.
func TestBusFloodFromManySourcesLeavesTheRecordsNodes(t *testing.T) {
	ts := startTestServer(t)
	ts.startBus(t)
	var flood []net.Conn
	defer func() {
		for _, c := range flood {
			c.Close()
		}
	}()
	for src := range busMaxConns / busMaxConnsPerIP {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 1, byte(10+src))}, Timeout: 5 * time.Second}
		for range busMaxConnsPerIP {
			c, err := d.Dial("tcp", ts.busAddr)
			if err != nil {
				t.Fatal(err)
			}
			flood = append(flood, c)
		}
	}
	// Every place from outside is held once one more source is closed at once.
	late := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 1, 200)}, Timeout: 5 * time.Second}
	if err := testenv.Poll(t, 5*time.Second, func() error {
		c, err := late.Dial("tcp", ts.busAddr)
		if err != nil {
			return nil
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		var ne net.Error
		if _, err := c.Read(make([]byte, 1)); err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
			return nil
		}
		return errors.New("a connection from a new source was held while the flood holds every place")
	}); err != nil {
		t.Fatal(err)
	}
	// The hub is the record's node at 127.0.0.1: its TLS handshake completes.
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}, Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", ts.busAddr, &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatalf("the record's node could not reach the bus during the flood: %v", err)
	}
	c.Close()
}
