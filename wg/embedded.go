package wg

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"

	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/ipc"
	"golang.zx2c4.com/wireguard/tun"
)

// embedded is wireguard-go running inside meshd over a TUN device, with a UAPI socket in
// /var/run/wireguard so wgctrl (ours and an operator's `wg`) finds and configures it the way it
// finds any userspace device. The TUN and the UDP socket belong to the network namespace of the
// thread that creates them: meshd creates them in its own.
type embedded struct {
	dev  *device.Device
	uapi net.Listener
}

func startEmbedded(name string, mtu int, log *slog.Logger) (*embedded, error) {
	t, err := tun.CreateTUN(name, mtu)
	if err != nil {
		return nil, fmt.Errorf("creating TUN %s for embedded WireGuard: %w", name, err)
	}
	logger := &device.Logger{
		Verbosef: func(f string, a ...any) { log.Debug(fmt.Sprintf(f, a...)) },
		Errorf:   func(f string, a ...any) { log.Warn(fmt.Sprintf(f, a...)) },
	}
	e := &embedded{dev: device.NewDevice(t, conn.NewDefaultBind(), logger)}
	f, err := ipc.UAPIOpen(name)
	if err != nil {
		e.dev.Close()
		return nil, fmt.Errorf("opening the UAPI socket of %s: %w", name, err)
	}
	if e.uapi, err = ipc.UAPIListen(name, f); err != nil {
		f.Close()
		e.dev.Close()
		return nil, fmt.Errorf("listening on the UAPI socket of %s: %w", name, err)
	}
	f.Close() // the listener holds its own descriptor
	go func() {
		for {
			c, err := e.uapi.Accept()
			if err != nil {
				return
			}
			go e.dev.IpcHandle(c)
		}
	}()
	return e, nil
}

// up brings the device up on port. wireguard-go forgets the port when a bind fails (it goes back
// to 0, "any"), so the port is set again whenever it is not the one wanted.
func (e *embedded) up(port int) error {
	if err := e.dev.Up(); err != nil {
		return fmt.Errorf("binding: %w", err)
	}
	if port == 0 {
		return nil
	}
	got, err := e.port()
	if err != nil {
		return err
	}
	if got == port {
		return nil
	}
	if err := e.dev.IpcSet(fmt.Sprintf("listen_port=%d\n", port)); err != nil {
		return fmt.Errorf("binding port %d: %w", port, err)
	}
	if got, err = e.port(); err == nil && got != port {
		err = fmt.Errorf("bound port %d, not %d", got, port)
	}
	return err
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
	err := e.uapi.Close()
	e.dev.Close()
	return err
}
