package wg

// The device process: wireguard-go in a small process of its own, so the peers' tunnel does not
// live and die with the process that configures it.
//
// Why: an embedded device lives as long as the process that created it. If that is the agent,
// restarting or killing the agent takes the tunnel down for every peer, carried ones included,
// which is exactly what a takeover in place promises they will not see. So the agent starts
// RunDevice in a detached process (Spawn: `meshd tunnel-device NAME`, its own session, like
// wireguard-go's own daemon) and configures it from outside through its UAPI socket (wgctrl) and
// netlink, as an operator's `wg` would. A restarted agent finds the device answering and attaches
// to it (Attach): nothing the peers see changes.
//
// The device comes up when its link is set up (IFF_UP, set by the configuring process), not when
// the TUN is created: wireguard-go's own link monitor brought it up as soon as the TUN existed,
// before the found interface had freed the port (see embedded).

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// RunDevice runs a userspace WireGuard device named name until its TUN link is deleted (which is
// how the device is stopped), SIGTERM or SIGINT, or ctx ends. It creates the TUN (down) and the
// UAPI socket, then follows the link's administrative state: up binds the configured port
// (retried while another process still holds it), down unbinds it.
func RunDevice(ctx context.Context, name string, mtu int, log *slog.Logger) error {
	if mtu == 0 {
		mtu = 1420
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	e, err := startEmbedded(name, mtu, log)
	if err != nil {
		return err
	}
	defer e.close()
	updates := make(chan netlink.LinkUpdate, 16)
	done := make(chan struct{})
	defer close(done)
	if err := netlink.LinkSubscribe(updates, done); err != nil {
		return fmt.Errorf("device %s: watching its link: %w", name, err)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sig)
	l, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("device %s: its link: %w", name, err)
	}
	index, up := l.Attrs().Index, false
	follow := func(flags uint32) {
		want := flags&unix.IFF_UP != 0
		if want == up {
			return
		}
		if want {
			e.upRetrying(ctx, log)
		} else if err := e.dev.Down(); err != nil {
			log.Warn("device down", "err", err)
		}
		up = want
	}
	// The link renamed (a takeover under the found interface's name prepares the device under
	// another name and renames it once the found one is gone): the UAPI socket follows the name,
	// as soon as the found device's socket of that name is gone.
	renaming := ""
	renamed := func(now string) {
		if now == "" || now == renaming {
			return
		}
		renaming = now
		go func() {
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if err := e.rename(rctx, now); err != nil {
				log.Warn("device: its UAPI socket does not follow the link's new name", "name", now, "err", err)
			}
		}()
	}
	renaming = name
	follow(uint32(l.Attrs().RawFlags))
	tick := time.NewTicker(time.Second) // a lost netlink message is caught here
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-sig:
			return nil
		case <-e.dev.Wait():
			return nil // the TUN went away (the link was deleted)
		case u := <-updates:
			if int(u.Index) != index {
				continue
			}
			if u.Header.Type == unix.RTM_DELLINK {
				return nil
			}
			renamed(u.Attrs().Name)
			follow(u.IfInfomsg.Flags)
		case <-tick.C:
			l, err := netlink.LinkByIndex(index)
			if err != nil {
				return nil
			}
			renamed(l.Attrs().Name)
			follow(uint32(l.Attrs().RawFlags))
		}
	}
}

// upRetrying brings the device up on the port it was configured with, retrying while the port is
// still held (a found interface being stopped lets it go a moment later).
func (e *embedded) upRetrying(ctx context.Context, log *slog.Logger) {
	port, err := e.port()
	if err != nil {
		log.Warn("device: reading its port", "err", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := e.up(port)
		if err == nil {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			log.Warn("device: cannot come up", "port", port, "err", err)
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// DeviceCommand is how Spawn starts a device process: the program and the arguments before the
// interface's name. meshd gives itself, re-executed as `meshd tunnel-device`.
type DeviceCommand struct {
	Path string
	Args []string
	// LogFile receives the process's output; empty discards it.
	LogFile string
}

// Spawn starts a device process for name, detached in a session of its own so it outlives the
// process that started it, and returns once its UAPI socket answers.
func (c DeviceCommand) Spawn(ctx context.Context, name string, mtu int) error {
	args := append(append([]string{}, c.Args...), name, "--mtu", strconv.Itoa(mtu))
	cmd := exec.Command(c.Path, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if c.LogFile != "" {
		f, err := os.OpenFile(c.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return fmt.Errorf("device process for %s: its log: %w", name, err)
		}
		defer f.Close()
		cmd.Stdout, cmd.Stderr = f, f
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting the device process for %s (%s): %w", name, c.Path, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }() // reaped when it ends, whoever started it is alive
	deadline := time.Now().Add(10 * time.Second)
	for !answers(name) {
		select {
		case err := <-exited:
			return fmt.Errorf("the device process for %s exited at start: %v", name, err)
		case <-ctx.Done():
			return fmt.Errorf("the device process for %s: %w", name, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the device process for %s did not answer on its UAPI socket within 10s", name)
		}
	}
	return nil
}

// Attach returns the mesh's interface cfg.Name as it already runs (a device process that outlived
// the agent, or a kernel link), bringing its key, port, address and peers to cfg by difference:
// nothing the device already has is set again, so a peer's session goes on. An interface that is
// not there is an error satisfying errors.Is(err, os.ErrNotExist).
func Attach(ctx context.Context, cfg Config) (*Interface, error) {
	if !answers(cfg.Name) {
		return nil, fmt.Errorf("attaching to WireGuard interface %s: %w", cfg.Name, os.ErrNotExist)
	}
	i, err := newInterface(cfg)
	if err != nil {
		return nil, err
	}
	i.external = true
	if i.link, err = netlink.LinkByName(cfg.Name); err != nil {
		return nil, fmt.Errorf("attaching to WireGuard interface %s: %w", cfg.Name, err)
	}
	if i.client, err = wgctrl.New(); err != nil {
		return nil, fmt.Errorf("attaching to WireGuard interface %s: opening wgctrl: %w", cfg.Name, err)
	}
	dev, err := i.client.Device(cfg.Name)
	if err != nil {
		i.client.Close()
		return nil, fmt.Errorf("attaching to WireGuard interface %s: %w", cfg.Name, err)
	}
	if dev.PrivateKey != cfg.PrivateKey || cfg.ListenPort != 0 && dev.ListenPort != cfg.ListenPort {
		// A device with another key or port is not the one wanted: configure it afresh.
		if err := i.configure(); err != nil {
			i.client.Close()
			return nil, err
		}
	} else if err := i.SetPeers(cfg.Peers); err != nil {
		i.client.Close()
		return nil, err
	} else if dev.FirewallMark != i.cfg.FwMark {
		mark := i.cfg.FwMark
		if err := i.client.ConfigureDevice(cfg.Name, wgtypes.Config{FirewallMark: &mark}); err != nil {
			i.client.Close()
			return nil, fmt.Errorf("setting the firewall mark of %s to %d: %w", cfg.Name, mark, err)
		}
	}
	if err := i.addresses(); err != nil {
		i.client.Close()
		return nil, err
	}
	if i.link.Attrs().MTU != i.cfg.MTU {
		if err := netlink.LinkSetMTU(i.link, i.cfg.MTU); err != nil {
			i.client.Close()
			return nil, fmt.Errorf("setting the MTU of %s to %d: %w", cfg.Name, i.cfg.MTU, err)
		}
	}
	if i.link.Attrs().Flags&netUp == 0 {
		if err := i.up(ctx); err != nil {
			i.client.Close()
			return nil, err
		}
	}
	return i, i.syncRoutes(cfg.Peers)
}

// Running says whether a WireGuard interface name is there and answers wgctrl.
func Running(name string) bool { return answers(name) }

// waitPortBound waits until something on this machine's network namespace has bound UDP port
// (the device process, once its link is up), read from /proc/net/udp{,6} so the check itself
// binds nothing.
func waitPortBound(ctx context.Context, port int) error {
	for {
		if udpBound(port) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nothing bound port %d/udp: %w", port, ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

func udpBound(port int) bool {
	hex := fmt.Sprintf(":%04X", port)
	for _, f := range []string{"/proc/net/udp", "/proc/net/udp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) > 1 && strings.HasSuffix(fields[1], hex) {
				fh.Close()
				return true
			}
		}
		fh.Close()
	}
	return false
}
