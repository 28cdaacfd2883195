package netfilter

import (
	"fmt"
	"net/netip"
	"os"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// nlBuffer is the netlink socket buffer size. google/nftables v0.3.0 asks the kernel to echo
// every rule of a batch; with the default buffers one Flush of ~150 rules overruns the read
// buffer (ENOBUFS), sometimes after the kernel committed. 32 MiB carries thousands of rules.
const nlBuffer = 32 << 20

// bigBuffers forces large send and receive buffers (the *FORCE options pass rmem_max; we
// run as root). Without privilege it falls back to the capped ordinary options.
func bigBuffers(c *netlink.Conn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		if e := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, nlBuffer); e != nil {
			serr = c.SetReadBuffer(nlBuffer)
		}
		if e := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, nlBuffer); e != nil && serr == nil {
			serr = c.SetWriteBuffer(nlBuffer)
		}
	}); err != nil {
		return err
	}
	return serr
}

// NftConn opens a google/nftables connection in env's network namespace, with big buffers.
// The returned close func releases the namespace handle and the socket.
func (e Env) NftConn() (*nftables.Conn, func(), error) {
	opts := []nftables.ConnOption{nftables.AsLasting(), nftables.WithSockOptions(bigBuffers)}
	var f *os.File
	if e.NetNS != "" {
		var err error
		f, err = os.Open(e.NetNS)
		if err != nil {
			return nil, nil, fmt.Errorf("open network namespace %s: %w", e.NetNS, err)
		}
		opts = append(opts, nftables.WithNetNSFd(int(f.Fd())))
	}
	c, err := nftables.New(opts...)
	if err != nil {
		if f != nil {
			f.Close()
		}
		return nil, nil, fmt.Errorf("netlink to nftables in %s: %w", e.NSName(), err)
	}
	return c, func() {
		_ = c.CloseLasting()
		if f != nil {
			f.Close()
		}
	}, nil
}

// NSName names env's network namespace for errors and logs.
func (e Env) NSName() string {
	if e.NetNS == "" {
		return "the machine's network namespace"
	}
	return "network namespace " + e.NetNS
}

// FamilyName is a table family as nft names it (inet, ip, ip6, …).
func FamilyName(f nftables.TableFamily) string {
	switch f {
	case nftables.TableFamilyINet:
		return "inet"
	case nftables.TableFamilyIPv4:
		return "ip"
	case nftables.TableFamilyIPv6:
		return "ip6"
	case nftables.TableFamilyARP:
		return "arp"
	case nftables.TableFamilyBridge:
		return "bridge"
	case nftables.TableFamilyNetdev:
		return "netdev"
	}
	return fmt.Sprintf("family%d", f)
}

// TableName is a table as nft names it: "inet filter".
func TableName(t *nftables.Table) string { return FamilyName(t.Family) + " " + t.Name }

func commentData(s string) []byte { return userdata.AppendString(nil, userdata.TypeComment, s) }

func ifname(n string) []byte {
	b := make([]byte, 16)
	copy(b, n)
	return b
}

func protoNum(p string) byte {
	if p == "udp" {
		return unix.IPPROTO_UDP
	}
	return unix.IPPROTO_TCP
}

// matchIIF matches (or, with neq, excludes) an input interface.
// matchIIF matches the input interface's name; a name ending in "*" matches every name with
// that prefix (as nft's iifname "br-*").
func matchIIF(name string, neq bool) []expr.Any {
	op := expr.CmpOpEq
	if neq {
		op = expr.CmpOpNeq
	}
	data := ifname(name)
	if prefix, ok := strings.CutSuffix(name, "*"); ok {
		data = []byte(prefix)
	}
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Cmp{Op: op, Register: 1, Data: data},
	}
}

// matchLocalDestination matches a packet addressed to the machine itself (fib daddr type local):
// in prerouting, before any DNAT, that is one of the machine's own addresses, IPv4 or IPv6.
func matchLocalDestination() []expr.Any {
	return []expr.Any{
		&expr.Fib{Register: 1, FlagDADDR: true, ResultADDRTYPE: true},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(unix.RTN_LOCAL)},
	}
}

// matchSource matches a source prefix; in an inet table it first pins the address family.
func matchSource(fam nftables.TableFamily, p netip.Prefix) []expr.Any {
	return matchAddr(fam, p, false)
}

// matchOIF matches the output interface's name.
func matchOIF(name string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(name)},
	}
}

// matchAddr matches a source (or, with dst, a destination) prefix; in an inet table it first
// pins the address family.
func matchAddr(fam nftables.TableFamily, p netip.Prefix, dst bool) []expr.Any {
	p = p.Masked()
	var out []expr.Any
	off, l, nfp := uint32(12), uint32(4), byte(unix.NFPROTO_IPV4)
	if p.Addr().Is6() {
		off, l, nfp = 8, 16, unix.NFPROTO_IPV6
	}
	if dst {
		off += l
	}
	if fam == nftables.TableFamilyINet {
		out = append(out,
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{nfp}})
	}
	mask := make([]byte, l)
	for i := 0; i < p.Bits(); i++ {
		mask[i/8] |= 0x80 >> (i % 8)
	}
	out = append(out,
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: l},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: l, Mask: mask, Xor: make([]byte, l)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: p.Addr().AsSlice()})
	return out
}

// matchFamily matches IPv6 packets (six) or IPv4 packets, in an inet table.
func matchFamily(six bool) []expr.Any {
	nfp := byte(unix.NFPROTO_IPV4)
	if six {
		nfp = unix.NFPROTO_IPV6
	}
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{nfp}},
	}
}

// matchSourceAddrNot matches a packet whose source is not a; the family must be pinned first
// (matchFamily), as the address is read at that family's offset.
func matchSourceAddrNot(a netip.Addr) []expr.Any {
	off, l := uint32(12), uint32(4)
	if a.Is6() {
		off, l = 8, 16
	}
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: l},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: a.AsSlice()},
	}
}

// matchPort matches l4 protocol and destination port. original matches the port the client
// addressed before any DNAT (conntrack's original tuple), which is what a forwarded opening
// to a published container port needs: Docker rewrote the port in nat PREROUTING.
func matchPort(proto string, port uint16, original bool) []expr.Any {
	out := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{protoNum(proto)}},
	}
	if original {
		out = append(out, &expr.Ct{Key: expr.CtKeyPROTODST, Register: 1, Direction: 0})
	} else {
		out = append(out, &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2})
	}
	return append(out, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)})
}

// OpeningExprs is the match-and-accept of an opening in a chain of family fam.
func OpeningExprs(fam nftables.TableFamily, o Opening, priv Private) ([]expr.Any, error) {
	var out []expr.Any
	if o.Path == PathRouted {
		if priv.Interface == "" || !priv.Range.IsValid() {
			return nil, fmt.Errorf("opening %s: routed between the private network's addresses, but its interface (%q) or range (%s) is not known", o, priv.Interface, priv.Range)
		}
		if !famFits(fam, priv.Range) {
			return nil, nil
		}
		out = append(out, matchIIF(priv.Interface, false)...)
		out = append(out, matchOIF(priv.Interface)...)
		out = append(out, matchAddr(fam, priv.Range, false)...)
		out = append(out, matchAddr(fam, priv.Range, true)...)
		return append(out, &expr.Verdict{Kind: expr.VerdictAccept}), nil
	}
	switch o.From {
	case FromAnywhere:
	case FromPrivate:
		if priv.Interface == "" && !priv.Range.IsValid() {
			return nil, fmt.Errorf("opening %s: from private, but no private network is known", o)
		}
		if priv.Interface != "" {
			out = append(out, matchIIF(priv.Interface, false)...)
		}
		if priv.Range.IsValid() {
			if !famFits(fam, priv.Range) {
				return nil, nil
			}
			out = append(out, matchSource(fam, priv.Range)...)
		}
	default:
		p, err := netip.ParsePrefix(o.From)
		if err != nil {
			return nil, fmt.Errorf("opening %s: %w", o, err)
		}
		if !famFits(fam, p) {
			return nil, nil
		}
		out = append(out, matchSource(fam, p)...)
	}
	out = append(out, matchPort(o.Proto, o.Port, o.Path == PathForwarded)...)
	return append(out, &expr.Verdict{Kind: expr.VerdictAccept}), nil
}

// famFits says whether a prefix can be matched in a table of family fam.
func famFits(fam nftables.TableFamily, p netip.Prefix) bool {
	switch fam {
	case nftables.TableFamilyIPv4:
		return p.Addr().Is4()
	case nftables.TableFamilyIPv6:
		return p.Addr().Is6()
	}
	return true
}
