package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"syscall"
	"time"
)

// serveBound serves handler on addr to what arrives on the interface named iface only, the way
// a resolver configured by interface name serves (dnsmasq's `interface=wg0` with bind-dynamic):
// the listening socket is bound to the device with SO_BINDTODEVICE, so the kernel checks each
// arriving packet's interface, and nothing that came in on another interface is served, whatever
// address it was sent to.
//
// SO_BINDTODEVICE rather than IP_PKTINFO: a TCP accept carries no per-packet control message
// naming the arriving interface (IP_PKTINFO is a datagram socket's), while a device-bound
// listener is matched by the kernel on every SYN. A bound socket holds the link's index, not
// its name, so a link deleted and raised again under the same name would never be served by it:
// every pollEvery the name is looked up again, and when it names another link (or none) the
// listener is closed and bound again to the link that has the name now, as dnsmasq re-binds on
// a netlink event. Calls arriving in the moment between the links are refused; a service bound
// by name sees an interface that keeps its name as the same interface.
func serveBound(ctx context.Context, addr, iface string, handler http.Handler) error {
	const pollEvery = 100 * time.Millisecond
	var (
		ln    net.Listener
		index int
	)
	closeLn := func(why string) {
		if ln != nil {
			_ = ln.Close()
			log.Printf("labsvc: %s on %s closed: %s", addr, iface, why)
			ln, index = nil, 0
		}
	}
	defer closeLn("stopping")
	for {
		i, err := net.InterfaceByName(iface)
		switch {
		case err != nil:
			closeLn(fmt.Sprintf("no interface %s", iface))
		case i.Index != index:
			closeLn(fmt.Sprintf("%s is another link now (index %d)", iface, i.Index))
			lc := net.ListenConfig{Control: func(network, address string, c syscall.RawConn) error {
				var serr error
				if err := c.Control(func(fd uintptr) {
					serr = syscall.SetsockoptString(int(fd), syscall.SOL_SOCKET, syscall.SO_BINDTODEVICE, iface)
				}); err != nil {
					return err
				}
				if serr != nil {
					return fmt.Errorf("bind to device %s: %w", iface, serr)
				}
				return nil
			}}
			l, err := lc.Listen(ctx, "tcp", addr)
			if err != nil {
				log.Printf("labsvc: listen on %s bound to %s: %v", addr, iface, err)
				break
			}
			ln, index = l, i.Index
			srv := &http.Server{Handler: handler}
			go func() {
				if err := srv.Serve(l); err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, http.ErrServerClosed) {
					log.Printf("labsvc: serving %s on %s: %v", addr, iface, err)
				}
			}()
			log.Printf("labsvc: serving on %s, only what arrives on %s (index %d)", l.Addr(), iface, i.Index)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pollEvery):
		}
	}
}
