package gossip

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"net"
	"strconv"
	"testing"
)

// The udp reach probe is a ping a real memberlist member answers, only when it is encrypted with
// a key on that member's ring.
func TestPingUDPAnsweredByAMember(t *testing.T) {
	key := make([]byte, KeySize)
	other := make([]byte, KeySize)
	rand.Read(key)
	rand.Read(other)
	_, id, _ := ed25519.GenerateKey(rand.Reader)
	g, err := Start(Config{Name: "probed", BindAddr: "127.0.0.1", BindPort: 0, Keyring: [][]byte{key}, Identity: id,
		Verify: func(string) (ed25519.PublicKey, bool) { return nil, false }})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Shutdown()
	host, p, _ := net.SplitHostPort(g.Addr())
	port, _ := strconv.Atoi(p)
	if err := Ping(context.Background(), host, uint16(port), key); err != nil {
		t.Fatalf("a ping with the member's key was not answered: %v", err)
	}
	if err := Ping(context.Background(), host, uint16(port), other); err == nil {
		t.Fatal("a ping with a key not on the member's ring was answered")
	}
	// Nothing listens on a port just freed: the probe says so, naming the address.
	ln, _ := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	free := ln.LocalAddr().(*net.UDPAddr).Port
	ln.Close()
	if err := Ping(context.Background(), "127.0.0.1", uint16(free), key); err == nil {
		t.Fatal("a ping to a closed port was answered")
	}
}
