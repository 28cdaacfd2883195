package report

import (
	"fmt"
	"net/netip"
)

// Listener is a socket listening on the machine: a TCP socket in LISTEN, or a bound UDP socket
// with no peer. It is what genesis checks its ports against and what a converge preview lists.
type Listener struct {
	Proto   string     `json:"proto"`
	Addr    netip.Addr `json:"addr"`
	Port    uint16     `json:"port"`
	PID     int        `json:"pid,omitempty"`
	Process string     `json:"process,omitempty"`
}

// String names the listener the way an operator reads it: "tcp 0.0.0.0:5000 (docker-proxy, pid
// 812)".
func (l Listener) String() string {
	s := fmt.Sprintf("%s %s", l.Proto, netip.AddrPortFrom(l.Addr, l.Port))
	if l.Process != "" {
		s += fmt.Sprintf(" (%s, pid %d)", l.Process, l.PID)
	}
	return s
}

// Covers says whether a bind of addr:port would collide with this listener: the same port, and
// one of the two on the unspecified address or both on the same one.
func (l Listener) Covers(proto string, addr netip.Addr, port uint16) bool {
	if l.Proto != proto || l.Port != port {
		return false
	}
	if l.Addr.Is4() != addr.Is4() && !l.Addr.IsUnspecified() && !addr.IsUnspecified() {
		return false
	}
	return l.Addr.IsUnspecified() || addr.IsUnspecified() || l.Addr == addr
}
