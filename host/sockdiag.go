package host

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"meshd/report"
)

// The listening sockets over the kernel's socket diagnostics (NETLINK_SOCK_DIAG, what ss uses),
// asked for the listening states alone. Reading /proc/net/tcp walks the whole established-socket
// hash table (262144 buckets on a machine with a few GB, shared by every network namespace) for
// tcp and again for tcp6: about 5 ms of kernel time each, every pass. A diagnostics dump asked
// for TCP_LISTEN only walks the listening hash and skips the established one, a fraction of a
// millisecond. The answer is the same table: the listeners of this process's network namespace.

const (
	tcpListen = 10 // TCP_LISTEN
	udpClose  = 7  // TCP_CLOSE: an unconnected UDP socket (with no peer)
	// sizes of struct inet_diag_req_v2 and struct inet_diag_msg
	diagReqLen = 56
	diagMsgLen = 72
)

// diagListeners reads every listening socket (TCP in LISTEN, UDP bound with no peer) of this
// process's network namespace, with beside each its inode, as readProcNet does for each table.
func diagListeners() ([]report.Listener, []string, error) {
	c, err := netlink.Dial(unix.NETLINK_INET_DIAG, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("socket diagnostics: %w", err)
	}
	defer c.Close()
	var out []report.Listener
	var inodes []string
	for _, q := range []struct {
		family, proto uint8
		state         uint8
		name          string
	}{
		{unix.AF_INET, unix.IPPROTO_TCP, tcpListen, "tcp"}, {unix.AF_INET6, unix.IPPROTO_TCP, tcpListen, "tcp"},
		{unix.AF_INET, unix.IPPROTO_UDP, udpClose, "udp"}, {unix.AF_INET6, unix.IPPROTO_UDP, udpClose, "udp"},
	} {
		req := make([]byte, diagReqLen)
		req[0], req[1] = q.family, q.proto
		binary.NativeEndian.PutUint32(req[4:8], 1<<q.state)
		msgs, err := c.Execute(netlink.Message{
			Header: netlink.Header{Type: unix.SOCK_DIAG_BY_FAMILY, Flags: netlink.Request | netlink.Dump},
			Data:   req,
		})
		if err != nil {
			return nil, nil, fmt.Errorf("socket diagnostics (%s, family %d): %w", q.name, q.family, err)
		}
		for _, m := range msgs {
			d := m.Data
			if len(d) < diagMsgLen || d[0] != q.family || d[1] != q.state {
				continue
			}
			if q.proto == unix.IPPROTO_UDP && binary.BigEndian.Uint16(d[6:8]) != 0 {
				continue // connected: it has a peer
			}
			var addr netip.Addr
			if q.family == unix.AF_INET {
				addr = netip.AddrFrom4([4]byte(d[8:12]))
			} else {
				addr = netip.AddrFrom16([16]byte(d[8:24])).Unmap()
			}
			out = append(out, report.Listener{Proto: q.name, Addr: addr, Port: binary.BigEndian.Uint16(d[4:6])})
			inodes = append(inodes, fmt.Sprint(binary.NativeEndian.Uint32(d[68:72])))
		}
	}
	return out, inodes, nil
}
