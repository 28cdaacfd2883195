package agent

import (
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// notifyListener is a fake systemd: a unix datagram socket at addr, its datagrams on a channel.
func notifyListener(t *testing.T, addr string) <-chan string {
	t.Helper()
	name := addr
	if strings.HasPrefix(addr, "@") {
		name = "\x00" + addr[1:]
	}
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	got := make(chan string, 8)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			got <- string(buf[:n])
		}
	}()
	return got
}

// SdNotify speaks systemd's protocol: one datagram of newline-separated assignments to the path
// or abstract socket $NOTIFY_SOCKET names, and nothing at all without it.
func TestSdNotify(t *testing.T) {
	for _, addr := range []string{filepath.Join(t.TempDir(), "notify"), "@meshd-test-notify-" + strings.ReplaceAll(t.Name(), "/", "-")} {
		got := notifyListener(t, addr)
		t.Setenv("NOTIFY_SOCKET", addr)
		if err := SdNotify("READY=1", "STATUS=serving as hub"); err != nil {
			t.Fatalf("%s: %v", addr, err)
		}
		select {
		case d := <-got:
			if d != "READY=1\nSTATUS=serving as hub\n" {
				t.Errorf("%s: systemd got %q", addr, d)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: systemd got nothing", addr)
		}
	}
	t.Setenv("NOTIFY_SOCKET", "")
	if err := SdNotify("READY=1"); err != nil {
		t.Errorf("without NOTIFY_SOCKET: %v; want nothing sent, no error", err)
	}
	t.Setenv("NOTIFY_SOCKET", filepath.Join(t.TempDir(), "nobody-listens"))
	if err := SdNotify("READY=1"); err == nil || !strings.Contains(err.Error(), "nobody-listens") {
		t.Errorf("a notify socket nobody listens on: %v; want an error naming it", err)
	}
}
