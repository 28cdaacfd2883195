package fleetsim

import (
	"io"
	"log"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// counted is memberlist's own UDP/TCP transport with every byte counted, each way: what a
// simulated node's gossip costs on the wire (its datagrams and its streams, encrypted, as sent).
type counted struct {
	*memberlist.NetTransport
	out, in atomic.Uint64
	packets chan *memberlist.Packet
	streams chan net.Conn
}

// newCounted binds memberlist's transport on addr:port and counts what passes through it.
func newCounted(addr string, port int) (*counted, error) {
	nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{BindAddrs: []string{addr}, BindPort: port,
		Logger: log.New(io.Discard, "", 0)})
	if err != nil {
		return nil, err
	}
	t := &counted{NetTransport: nt, packets: make(chan *memberlist.Packet), streams: make(chan net.Conn)}
	go func() {
		for p := range nt.PacketCh() {
			t.in.Add(uint64(len(p.Buf)))
			t.packets <- p
		}
	}()
	go func() {
		for c := range nt.StreamCh() {
			t.streams <- &countedConn{Conn: c, t: t}
		}
	}()
	return t, nil
}

func (t *counted) PacketCh() <-chan *memberlist.Packet { return t.packets }
func (t *counted) StreamCh() <-chan net.Conn           { return t.streams }

func (t *counted) WriteTo(b []byte, addr string) (time.Time, error) {
	t.out.Add(uint64(len(b)))
	return t.NetTransport.WriteTo(b, addr)
}

func (t *counted) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	t.out.Add(uint64(len(b)))
	return t.NetTransport.WriteToAddress(b, a)
}

func (t *counted) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	c, err := t.NetTransport.DialTimeout(addr, timeout)
	if err != nil {
		return nil, err
	}
	return &countedConn{Conn: c, t: t}, nil
}

func (t *counted) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return t.DialTimeout(a.Addr, timeout)
}

// Shutdown stops the transport; its channels are not closed (memberlist has stopped reading).
func (t *counted) Shutdown() error { return t.NetTransport.Shutdown() }

// bytes is what went out and came in so far.
func (t *counted) bytes() (out, in uint64) { return t.out.Load(), t.in.Load() }

// countedConn is a stream whose bytes count on its transport.
type countedConn struct {
	net.Conn
	t *counted
}

func (c *countedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.t.in.Add(uint64(n))
	return n, err
}

func (c *countedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.t.out.Add(uint64(n))
	return n, err
}

// hostPort is addr:port.
func hostPort(addr string, port int) string { return net.JoinHostPort(addr, strconv.Itoa(port)) }
