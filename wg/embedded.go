package wg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/ipc"
	"golang.zx2c4.com/wireguard/tun"
)

// embedded is wireguard-go running inside meshd over a TUN device, with a UAPI socket in
// /var/run/wireguard so wgctrl (ours and an operator's `wg`) finds and configures it the way it
// finds any userspace device. The TUN and the UDP socket belong to the network namespace of the
// thread that creates them: meshd creates them in its own.
//
// The TUN is unmonitored: wireguard-go's usual TUN watches the link and brings the device up
// by itself when it thinks the link is up, which on these machines happened as soon as the TUN
// was created, binding the port before the found interface had let it go (and, once that bind
// had failed, on a random port, so the peers' answers went nowhere for a 5 s handshake retry).
// Here the device comes up when up is called and not before.
type embedded struct {
	dev   *device.Device
	log   *slog.Logger
	index int // the TUN link's index: it keeps it through a rename

	mu   sync.Mutex
	name string       // the name its UAPI socket is under
	uapi net.Listener // nil once closed
}

func startEmbedded(name string, mtu int, log *slog.Logger) (*embedded, error) {
	t, err := openTUN(name, mtu)
	if err != nil {
		return nil, fmt.Errorf("creating TUN %s for embedded WireGuard: %w", name, err)
	}
	logger := &device.Logger{
		Verbosef: func(f string, a ...any) { log.Debug(fmt.Sprintf(f, a...)) },
		Errorf:   func(f string, a ...any) { log.Warn(fmt.Sprintf(f, a...)) },
	}
	e := &embedded{dev: device.NewDevice(t, conn.NewDefaultBind(), logger), log: log}
	l, err := netlink.LinkByName(name)
	if err != nil {
		e.dev.Close()
		return nil, fmt.Errorf("finding the TUN link %s: %w", name, err)
	}
	e.index = l.Attrs().Index
	if err := e.listen(name); err != nil {
		e.dev.Close()
		return nil, err
	}
	return e, nil
}

// listen serves the device's UAPI socket under name, and stops serving it under the name it had
// (the link was renamed: a takeover under the found interface's name prepares the device under
// another, see Takeover). A socket of that name still answering is another device's: an error.
func (e *embedded) listen(name string) error {
	f, err := ipc.UAPIOpen(name)
	if err != nil {
		return fmt.Errorf("opening the UAPI socket of %s: %w", name, err)
	}
	l, err := ipc.UAPIListen(name, f)
	f.Close() // the listener holds its own descriptor
	if err != nil {
		return fmt.Errorf("listening on the UAPI socket of %s: %w", name, err)
	}
	e.mu.Lock()
	old, oldName := e.uapi, e.name
	e.uapi, e.name = l, name
	e.mu.Unlock()
	go e.serve(l)
	if old != nil {
		old.Close()
		os.Remove(socketPath(oldName))
	}
	return nil
}

// rename moves the UAPI socket to the link's new name, retrying while the name's socket is still
// another device's (a found wireguard-go that has not yet noticed its TUN is gone) until ctx ends.
func (e *embedded) rename(ctx context.Context, name string) error {
	for {
		e.mu.Lock()
		done := e.name == name || e.uapi == nil
		e.mu.Unlock()
		if done {
			return nil
		}
		err := e.listen(name)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("device renamed to %s: %w", name, err)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (e *embedded) serve(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			sc := &setSeen{Conn: c}
			e.dev.IpcHandle(sc)
			if sc.set {
				announceSet(e.index, e.log)
			}
		}()
	}
}

// socketPath is where wireguard-go keeps the UAPI socket of name (ipc's own directory).
func socketPath(name string) string { return filepath.Join("/var/run/wireguard", name+".sock") }

// SetAlias is the alias a device sets on its link after each UAPI set (`wg set`, wgctrl's
// ConfigureDevice, meshd's own peer changes): setting it makes the kernel send an rtnetlink
// link message, so a watch of the links (WatchLinks) learns at once that the device's peers or
// keys may have changed, which neither wireguard-go nor the kernel announces otherwise.
const SetAlias = "meshd wireguard device"

// announceSet sets the link's alias, which sends a link message while the link is up.
func announceSet(index int, log *slog.Logger) {
	l, err := netlink.LinkByIndex(index)
	if err == nil {
		err = netlink.LinkSetAlias(l, SetAlias)
	}
	if err != nil {
		log.Debug("announcing a UAPI set on the link", "index", index, "err", err)
	}
}

// setSeen is a UAPI connection that notes whether a set operation came through it.
type setSeen struct {
	net.Conn
	set  bool
	tail []byte // the last bytes of the previous read, for an operation split across reads
}

func (c *setSeen) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.set && n > 0 {
		buf := append(c.tail, p[:n]...)
		c.set = bytes.Contains(buf, []byte("set=1\n"))
		c.tail = append([]byte(nil), buf[max(0, len(buf)-5):]...)
	}
	return n, err
}

// up brings the device up on port. wireguard-go forgets the port when a bind fails (it goes back
// to 0, "any"), so the port is set again before each try whenever it is not the one wanted: the
// device never comes up on another port, where the peers' answers would not arrive.
func (e *embedded) up(port int) error {
	if port != 0 {
		got, err := e.port()
		if err != nil {
			return err
		}
		if got != port {
			if err := e.dev.IpcSet(fmt.Sprintf("listen_port=%d\n", port)); err != nil {
				return fmt.Errorf("setting port %d: %w", port, err)
			}
		}
	}
	if err := e.dev.Up(); err != nil {
		return fmt.Errorf("binding port %d: %w", port, err)
	}
	if got, err := e.port(); err != nil || port != 0 && got != port {
		return fmt.Errorf("bound port %d, not %d (%v)", got, port, err)
	}
	return nil
}

// openTUN creates the TUN link name (down) with the flags wireguard-go expects, without its
// link monitor, and sets its MTU.
func openTUN(name string, mtu int) (tun.Device, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI | unix.IFF_VNET_HDR)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("TUNSETIFF: %w", err)
	}
	t, _, err := tun.CreateUnmonitoredTUNFromFD(fd)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	l, err := netlink.LinkByName(name)
	if err == nil {
		err = netlink.LinkSetMTU(l, mtu)
	}
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("setting the MTU of %s: %w", name, err)
	}
	return t, nil
}

func (e *embedded) port() (int, error) {
	s, err := e.dev.IpcGet()
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(l, "listen_port="); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, errors.New("the device reports no listen port")
}

func (e *embedded) close() error {
	e.mu.Lock()
	l := e.uapi
	e.uapi = nil
	e.mu.Unlock()
	var err error
	if l != nil {
		err = l.Close()
	}
	e.dev.Close()
	return err
}
