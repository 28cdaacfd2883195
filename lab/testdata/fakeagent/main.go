// Command fakeagent stands in for meshd under meshd.service in the lab's tests: it records its
// arguments, says READY=1 from its own process (the unit's NotifyAccess=main; a systemd-notify
// child cannot speak for it without CAP_SYS_ADMIN, which the unit's sandbox drops) and waits.
package main

import (
	"net"
	"os"
	"strings"
	"time"
)

func main() {
	if err := os.MkdirAll("/run/meshd", 0o700); err != nil {
		os.Exit(1)
	}
	if err := os.WriteFile("/run/meshd/started", []byte(strings.Join(os.Args[1:], " ")+"\n"), 0o644); err != nil {
		os.Exit(1)
	}
	if addr := os.Getenv("NOTIFY_SOCKET"); addr != "" {
		c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
		if err != nil {
			os.Exit(1)
		}
		if _, err := c.Write([]byte("READY=1\nSTATUS=stand-in agent serving")); err != nil {
			os.Exit(1)
		}
		c.Close()
	}
	for {
		time.Sleep(time.Hour) // up until the unit stops it
	}
}
