package host

import (
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"meshd/report"
)

func TestParseHexAddr(t *testing.T) {
	for in, want := range map[string]string{
		"0100007F:1F90":                         "127.0.0.1:8080",
		"00000000:1388":                         "0.0.0.0:5000",
		"00000000000000000000000000000000:0016": "[::]:22",
		"0000000000000000FFFF00000100007F:0050": "127.0.0.1:80",
	} {
		a, p, err := parseHexAddr(in)
		if err != nil || netip.AddrPortFrom(a, p).String() != want {
			t.Errorf("parseHexAddr(%s) = %v:%d %v, want %s", in, a, p, err, want)
		}
	}
}

// A socket this test opens is found, with this process named as its holder.
func TestListenersFindsOwnSocket(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	udp, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	ls, err := Listeners()
	if err != nil {
		t.Fatal(err)
	}
	tcpPort := uint16(ln.Addr().(*net.TCPAddr).Port)
	udpPort := uint16(udp.LocalAddr().(*net.UDPAddr).Port)
	var gotTCP, gotUDP bool
	for _, l := range ls {
		if l.Proto == "tcp" && l.Port == tcpPort && l.PID == os.Getpid() && l.Process != "" {
			gotTCP = true
		}
		if l.Proto == "udp" && l.Port == udpPort && l.PID == os.Getpid() {
			gotUDP = true
		}
	}
	if !gotTCP || !gotUDP {
		t.Fatalf("own sockets not found with their holder (tcp %v, udp %v) in %v", gotTCP, gotUDP, ls)
	}
	l := report.Listener{Proto: "tcp", Addr: netip.MustParseAddr("0.0.0.0"), Port: 5000}
	if !l.Covers("tcp", netip.MustParseAddr("198.51.100.10"), 5000) || l.Covers("udp", netip.MustParseAddr("0.0.0.0"), 5000) ||
		!(report.Listener{Proto: "tcp", Addr: netip.MustParseAddr("127.0.0.1"), Port: 5}).Covers("tcp", netip.MustParseAddr("0.0.0.0"), 5) {
		t.Fatal("Covers is wrong")
	}
}

// A reader kept across passes names the holder of a socket that starts listening after its first
// read (it looks the holders up again when a new socket appears), and drops one that closed.
func TestListenerReaderFollowsNewSockets(t *testing.T) {
	var r ListenerReader
	first, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(); err != nil {
		t.Fatal(err)
	}
	second, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	first.Close()
	ls, err := r.Read()
	if err != nil {
		t.Fatal(err)
	}
	has := func(port int) (report.Listener, bool) {
		for _, l := range ls {
			if l.Proto == "tcp" && int(l.Port) == port {
				return l, true
			}
		}
		return report.Listener{}, false
	}
	if l, ok := has(second.Addr().(*net.TCPAddr).Port); !ok || l.PID != os.Getpid() || l.Process == "" {
		t.Fatalf("the socket opened after the first read is not named with its holder: %+v (found %v)", l, ok)
	}
	if _, ok := has(first.Addr().(*net.TCPAddr).Port); ok {
		t.Fatal("a closed socket is still reported listening")
	}
}

// The socket diagnostics and /proc/net name the same listeners: TCP and UDP, IPv4 and IPv6
// (a dual-stack socket on [::] once), a connected UDP socket and a TCP connection left out.
func TestListenersDiagnosticsMatchProcNet(t *testing.T) {
	for _, a := range []struct{ network, addr string }{{"tcp", "127.0.0.1:0"}, {"tcp", "[::]:0"}, {"tcp6", "[::1]:0"}} {
		ln, err := net.Listen(a.network, a.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		if a.network == "tcp" && a.addr == "127.0.0.1:0" {
			c, err := net.Dial("tcp", ln.Addr().String()) // an established pair: not listeners
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
		}
	}
	for _, a := range []string{"127.0.0.1:0", "[::]:0"} {
		u, err := net.ListenPacket("udp", a)
		if err != nil {
			t.Fatal(err)
		}
		defer u.Close()
	}
	peer, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	conn, err := net.Dial("udp", peer.LocalAddr().String()) // connected: not a listener
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	connPort := uint16(conn.LocalAddr().(*net.UDPAddr).Port)

	diag, diagInodes, err := diagListeners()
	if err != nil {
		t.Fatal(err)
	}
	proc, procInodes, err := procListeners()
	if err != nil {
		t.Fatal(err)
	}
	key := func(ls []report.Listener, inodes []string) []string {
		var out []string
		for i, l := range ls {
			out = append(out, l.String()+" inode "+inodes[i])
		}
		slices.Sort(out)
		return out
	}
	d, p := key(diag, diagInodes), key(proc, procInodes)
	if !slices.Equal(d, p) {
		t.Fatalf("socket diagnostics:\n%s\n/proc/net:\n%s", strings.Join(d, "\n"), strings.Join(p, "\n"))
	}
	if len(d) < 5 {
		t.Fatalf("only %d listeners read: %v", len(d), d)
	}
	for _, l := range diag {
		if l.Proto == "udp" && l.Port == connPort {
			t.Fatalf("a connected UDP socket is reported listening: %v", l)
		}
	}
}

// BenchmarkListeners is one read of the listening sockets each way: the socket diagnostics
// (what a pass does) and /proc/net's tables (what it did).
func BenchmarkListeners(b *testing.B) {
	b.Run("diag", func(b *testing.B) {
		for range b.N {
			if _, _, err := diagListeners(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("procnet", func(b *testing.B) {
		for range b.N {
			if _, _, err := procListeners(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
