package gossip

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"meshd/internal/testenv"
)

// The attack: a machine with no key sends the gossip port datagrams and connections of random
// bytes, from many addresses and ports. Each is refused and counted by kind, yet the log holds a
// few lines of each kind, not one a datagram: a flood cannot fill the disk (or push the agent's
// real lines out of the journal).
func TestJunkOnTheGossipPortIsCountedNotLoggedEach(t *testing.T) {
	rec := &lineRecorder{}
	m, err := gsStart(t, &gsRegistry{}, "gs-target", [][]byte{gsKey(t)}, nil, gsFast,
		func(c *Config) { c.Logger = slog.New(rec) })
	if err != nil {
		t.Fatal(err)
	}
	target := m.Addr()
	refused := func() (n uint64) {
		for _, v := range m.Refused() {
			n += v
		}
		return n
	}
	// senders are 40 loopback addresses; every datagram and connection leaves from a new port.
	var senders []net.IP
	for i := 2; i < 42; i++ {
		senders = append(senders, net.IPv4(127, 0, 0, byte(i)))
	}
	junk := func(min int) []byte {
		b := make([]byte, min+int(randByte())%64)
		_, _ = rand.Read(b)
		return b
	}
	var sent uint64
	settle := func(what string) {
		t.Helper()
		if err := testenv.Poll(t, 20*time.Second, func() error {
			if n := refused(); n != sent {
				return fmt.Errorf("%d of %d %s counted as refused: %v", n, sent, what, m.Refused())
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	// In rounds the socket buffer holds, so that none is dropped before memberlist reads it.
	for range 25 {
		for _, ip := range senders {
			c, err := net.DialUDP("udp", &net.UDPAddr{IP: ip}, udpAddr(t, target))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Write(junk(1)); err != nil {
				t.Fatal(err)
			}
			c.Close()
			sent++
		}
		settle("datagrams")
	}
	datagrams := sent
	for _, ip := range senders {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: ip}, Timeout: 5 * time.Second}
		c, err := d.DialContext(context.Background(), "tcp", target)
		if err != nil {
			t.Fatal(err)
		}
		// at least 5 bytes: memberlist reads a stream's first byte and length before it refuses
		if _, err := c.Write(junk(5)); err != nil {
			t.Fatal(err)
		}
		c.Close()
		sent++
	}
	settle("datagrams and connections")
	t.Logf("%d datagrams and %d connections refused: %v", datagrams, sent-datagrams, m.Refused())
	for kind := range m.Refused() {
		if !strings.HasPrefix(kind, "packet_") && !strings.HasPrefix(kind, "stream_") {
			t.Errorf("refused traffic counted under kind %q", kind)
		}
	}

	byKind := map[string]int{}
	total := 0
	for _, l := range rec.lines() {
		if k := refusedKind(l); k != "" {
			byKind[k]++
			total++
		}
	}
	t.Logf("log lines about them, by kind: %v", byKind)
	for kind, n := range byKind {
		// a few: the burst, twice when the test straddles the end of a window
		if n > 10 {
			t.Errorf("%d lines of kind %s for %d datagrams and connections; want a few (at most 10)",
				n, kind, sent)
		}
	}
	if total == 0 {
		t.Error("no line at all said junk arrived")
	}
}

func udpAddr(t *testing.T, hostport string) *net.UDPAddr {
	t.Helper()
	a, err := net.ResolveUDPAddr("udp", hostport)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func randByte() byte {
	var b [1]byte
	_, _ = rand.Read(b[:])
	return b[0]
}

// lineRecorder is a slog handler keeping the messages of memberlist's lines it is given.
type lineRecorder struct {
	mu  sync.Mutex
	got []string
}

func (r *lineRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (r *lineRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, rec.Message)
	return nil
}

func (r *lineRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *lineRecorder) WithGroup(string) slog.Handler      { return r }

func (r *lineRecorder) lines() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

// memberlist's other lines are kinds by their constant start: the same line from another sender,
// or with another error, is the same kind.
func TestLineKind(t *testing.T) {
	for _, c := range []struct{ a, b, kind string }{
		{"Decrypt packet failed: no installed keys could decrypt the message from=10.0.0.1:1",
			"Decrypt packet failed: payload is too small to decrypt: 3 from=10.0.0.2:2", "packet_decrypt"},
		{"discarding packet with unacceptable label \"x\": from=10.0.0.1:1",
			"discarding packet with unacceptable label \"y: z\": from=10.0.0.2:2", "packet_label"},
		{"failed to receive and remove the stream label header: cannot decode label from=10.0.0.1:1",
			"failed to receive and remove the stream label header: EOF from=10.0.0.2:2", "stream_label"},
		{"failed to receive: encryption is configured but remote state is not encrypted from=10.0.0.1:1",
			"failed to receive: unexpected EOF from=10.0.0.2:2", "stream_read"},
		{"Stream connection from=10.0.0.1:1", "Stream connection from=10.0.0.2:2", ""},
		{"Failed to send gossip to 10.0.0.1:7946: i/o timeout", "Failed to send gossip to 10.0.0.1:7946: refused", ""},
		{"Received invalid msgType (9) from=10.0.0.1:1", "Received invalid msgType (12) from=10.0.0.2:2", ""},
	} {
		ka, kb := refusedKind(c.a), refusedKind(c.b)
		if ka != c.kind || kb != c.kind {
			t.Errorf("refused kinds %q and %q, want %q: %q, %q", ka, kb, c.kind, c.a, c.b)
		}
		if c.kind == "" && lineKind(c.a) != lineKind(c.b) {
			t.Errorf("kinds %q and %q differ: %q, %q", lineKind(c.a), lineKind(c.b), c.a, c.b)
		}
	}
}
