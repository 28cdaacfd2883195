package host

import (
	"net"
	"net/netip"
	"os"
	"testing"
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
	l := Listener{Proto: "tcp", Addr: netip.MustParseAddr("0.0.0.0"), Port: 5000}
	if !l.Covers("tcp", netip.MustParseAddr("198.51.100.10"), 5000) || l.Covers("udp", netip.MustParseAddr("0.0.0.0"), 5000) ||
		!(Listener{Proto: "tcp", Addr: netip.MustParseAddr("127.0.0.1"), Port: 5}).Covers("tcp", netip.MustParseAddr("0.0.0.0"), 5) {
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
	has := func(port int) (Listener, bool) {
		for _, l := range ls {
			if l.Proto == "tcp" && int(l.Port) == port {
				return l, true
			}
		}
		return Listener{}, false
	}
	if l, ok := has(second.Addr().(*net.TCPAddr).Port); !ok || l.PID != os.Getpid() || l.Process == "" {
		t.Fatalf("the socket opened after the first read is not named with its holder: %+v (found %v)", l, ok)
	}
	if _, ok := has(first.Addr().(*net.TCPAddr).Port); ok {
		t.Fatal("a closed socket is still reported listening")
	}
}
