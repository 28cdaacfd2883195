package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

// notifySocket is the $NOTIFY_SOCKET the lab gives a Type=notify unit, as systemd does: a unix
// datagram socket the unit's process sends `KEY=VALUE` lines to (sd_notify). The lab accepts any
// sender (systemd's NotifyAccess=main would check the pid; the lab has no cgroups to check with).
type notifySocket struct {
	path  string
	ready string // where READY=1's datagram is kept, for ReadyStatus
	conn  *net.UnixConn
}

func listenNotify(path, ready string) (*notifySocket, error) {
	_ = os.Remove(path)
	_ = os.Remove(ready)
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return nil, fmt.Errorf("notify socket %s: %w", path, err)
	}
	// The agent runs as root; a unit that drops privileges may send too.
	_ = os.Chmod(path, 0o666)
	return &notifySocket{path: path, ready: ready, conn: c}, nil
}

func (n *notifySocket) close() {
	_ = n.conn.Close()
	_ = os.Remove(n.path)
}

// waitReady reads datagrams until one says READY=1 (kept at n.ready), the process exits, ctx
// ends or d passes; then it closes the socket. Later notifications (RELOADING, STOPPING) find
// no one listening, which sd_notify's senders ignore.
func (n *notifySocket) waitReady(ctx context.Context, exited <-chan error, d time.Duration) error {
	defer n.close()
	got := make(chan string, 1)
	go func() {
		buf := make([]byte, 4096)
		for {
			k, err := n.conn.Read(buf)
			if err != nil {
				return
			}
			msg := string(buf[:k])
			for _, l := range strings.Split(msg, "\n") {
				if strings.TrimSpace(l) == "READY=1" {
					got <- msg
					return
				}
			}
		}
	}()
	timer := time.NewTimer(d)
	defer timer.Stop()
	var last string
	select {
	case msg := <-got:
		return os.WriteFile(n.ready, []byte(msg), 0o644)
	case err := <-exited:
		// READY=1 may have been sent just before the exit: read what is queued.
		select {
		case msg := <-got:
			return os.WriteFile(n.ready, []byte(msg), 0o644)
		case <-time.After(100 * time.Millisecond):
		}
		if err == nil {
			err = errors.New("exit status 0")
		}
		last = fmt.Sprintf("exited before READY=1 (%v)", err)
	case <-timer.C:
		last = fmt.Sprintf("no READY=1 within %s", d)
	case <-ctx.Done():
		last = fmt.Sprintf("no READY=1 before %v", ctx.Err())
	}
	return errors.New(last)
}
