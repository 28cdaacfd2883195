package agent

// systemd's readiness protocol (sd_notify), spoken directly: a unit of Type=notify gives the
// service $NOTIFY_SOCKET, a unix datagram socket (a path, or "@name" in the abstract namespace),
// and the service sends newline-separated KEY=VALUE assignments to it: READY=1 once it serves,
// RELOADING=1 and READY=1 around a reload, STOPPING=1 on the way out, STATUS= for
// `systemctl status`. Outside systemd (no $NOTIFY_SOCKET) nothing is sent.

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
)

// SdNotify sends states to $NOTIFY_SOCKET in one datagram; it does nothing when the variable is
// unset, so the agent runs the same under systemd and by hand.
func SdNotify(states ...string) error {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return nil
	}
	if strings.HasPrefix(addr, "@") {
		addr = "\x00" + addr[1:]
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("notify socket %s: %w", os.Getenv("NOTIFY_SOCKET"), err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(strings.Join(states, "\n") + "\n")); err != nil {
		return fmt.Errorf("notify socket %s: %w", os.Getenv("NOTIFY_SOCKET"), err)
	}
	return nil
}

// notifyReady tells systemd the agent serves, once its role is ready: on a server once the record
// has replayed the Raft log (the operator's commands are answered from then on), on a client once
// its API listens.
func (a *Agent) notifyReady(ctx context.Context) {
	if err := a.role.waitReady(ctx); err != nil {
		return
	}
	status := "STATUS=serving as " + a.node.Name
	if a.node.Server {
		status += " (server: the record replayed)"
	}
	if err := SdNotify("READY=1", status); err != nil {
		a.log.Warn("systemd not told the agent is ready", "err", err)
		return
	}
	a.log.Debug("told systemd: ready")
}

// waitReady: a server is ready once its record caught up with the Raft log.
func (s *serverRole) waitReady(ctx context.Context) error { return s.rec.WaitCaughtUp(ctx) }

// waitReady: a client holds no record; it is ready once started.
func (c *clientRole) waitReady(context.Context) error { return nil }
