// Package netsource says whom a connection counts against when a listener bounds what one caller
// may hold (the bus, the Raft port): its source, an IPv4 address or an IPv6 /64. One machine is
// handed a whole /64, so counting its IPv6 addresses one by one would give it 2^64 shares.
package netsource

import (
	"net"
	"net/netip"
)

// Addr is the address a connection comes from (an IPv4-mapped one as IPv4), or the zero address
// where it has none.
func Addr(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			return ip.Unmap()
		}
	}
	return netip.Addr{}
}

// Of is the source a connection from addr counts against: the address itself for IPv4, its /64
// for IPv6 (an IPv4-mapped one counts as its IPv4); the zero prefix for the zero address.
func Of(addr netip.Addr) netip.Prefix {
	addr = addr.Unmap()
	if !addr.IsValid() {
		return netip.Prefix{}
	}
	bits := 32
	if addr.Is6() {
		bits = 64
	}
	p, _ := addr.Prefix(bits)
	return p
}
