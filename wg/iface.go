package wg

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

const netUp = net.FlagUp

// Config is the mesh's interface as wanted.
type Config struct {
	Name       string
	PrivateKey wgtypes.Key
	ListenPort int          // 0: any free port
	Address    netip.Prefix // the tunnel address with the range's prefix length (10.77.0.1/24)
	Peers      []Peer
	MTU        int // 0: 1420, WireGuard's usual
	// MoreAddresses are the interface's other addresses (a found interface's IPv6 one, say).
	MoreAddresses []netip.Prefix
	// FwMark is the device's firewall mark; 0: none.
	FwMark int
	// Routes are routes installed through the interface as they are (a found interface's, see
	// Kept), in any table, beside those derived from the peers' allowed IPs.
	Routes []Route
	// Rules are policy rules put back as they were found (a full tunnel's into its table).
	Rules []Rule
	// AsFound are allowed IPs that get no derived route: they came from a found interface,
	// whose routes (Routes) say how they are routed.
	AsFound []netip.Prefix
	Logger  *slog.Logger
	// Spawn, when set, starts a userspace device in a process of its own where the kernel has no
	// WireGuard (see DeviceCommand.Spawn), instead of embedding wireguard-go in this process.
	Spawn func(ctx context.Context, name string, mtu int) error
	// Stopped, when set, is called by Takeover once the found link is deleted and before the
	// mesh's interface is up: the host's crash point between the two (tunnel.after-stop-found).
	Stopped func()
}

// Interface is the mesh's WireGuard interface, raised by this process: kernel WireGuard where
// the kernel has it, else wireguard-go embedded here (then it lives as long as this process, and
// Close takes it down).
type Interface struct {
	cfg    Config
	log    *slog.Logger
	client *wgctrl.Client
	link   netlink.Link
	embed  *embedded // nil for kernel WireGuard and a device process
	// external: a userspace device in another process (Config.Spawn, Attach), configured from
	// here through its UAPI socket.
	external bool
}

// Raise creates, configures and brings up the mesh's interface.
func Raise(ctx context.Context, cfg Config) (*Interface, error) {
	i, err := prepare(cfg)
	if err != nil {
		return nil, err
	}
	if err := i.up(ctx); err != nil {
		i.Close()
		return nil, err
	}
	return i, nil
}

// Name is the interface's name.
func (i *Interface) Name() string { return i.cfg.Name }

// Embedded says whether the interface is wireguard-go inside this process.
func (i *Interface) Embedded() bool { return i.embed != nil }

// Release lets the interface go without taking it down: a kernel link or a device process stays
// up for its peers when the process that configured it ends. An embedded device cannot outlive
// this process; Release closes only the wgctrl client.
func (i *Interface) Release() {
	if i.client != nil {
		i.client.Close()
	}
}

// prepare does everything that can be done while another interface still holds the port: the
// link (kernel) or TUN and device (embedded), key, port, peers and address, all while the link
// is down, so nothing is bound and nothing is routed to it yet.
func prepare(cfg Config) (*Interface, error) {
	i, err := newInterface(cfg)
	if err != nil {
		return nil, err
	}
	cfg = i.cfg
	ok, err := i.kernelLink()
	if err != nil {
		return nil, err
	}
	switch {
	case ok:
	case cfg.Spawn != nil:
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		err := cfg.Spawn(ctx, cfg.Name, cfg.MTU)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("raising WireGuard interface %s: %w", cfg.Name, err)
		}
		i.external = true
	default:
		if i.embed, err = startEmbedded(cfg.Name, cfg.MTU, i.log); err != nil {
			return nil, err
		}
	}
	if err := i.configure(); err != nil {
		i.Close()
		return nil, err
	}
	return i, nil
}

func newInterface(cfg Config) (*Interface, error) {
	if cfg.Name == "" || cfg.PrivateKey == (wgtypes.Key{}) || !cfg.Address.IsValid() {
		return nil, fmt.Errorf("raising WireGuard interface %q: a name, a private key and an address are needed", cfg.Name)
	}
	if cfg.MTU == 0 {
		cfg.MTU = 1420
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Interface{cfg: cfg, log: cfg.Logger.With("iface", cfg.Name)}, nil
}

// kernelLink adds a kernel WireGuard link and says whether that worked; a kernel without
// WireGuard (EOPNOTSUPP and kin) is not an error, it means the embedded path.
func (i *Interface) kernelLink() (bool, error) {
	err := netlink.LinkAdd(&netlink.Wireguard{LinkAttrs: netlink.LinkAttrs{Name: i.cfg.Name, MTU: i.cfg.MTU}})
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, syscall.EEXIST):
		return false, fmt.Errorf("raising WireGuard interface %s: a link of that name exists: %w", i.cfg.Name, err)
	default:
		i.log.Debug("no kernel WireGuard, embedding wireguard-go", "err", err)
		return false, nil
	}
}

func (i *Interface) configure() error {
	name := i.cfg.Name
	var err error
	if i.link, err = netlink.LinkByName(name); err != nil {
		return fmt.Errorf("raising WireGuard interface %s: finding its link: %w", name, err)
	}
	if i.client, err = wgctrl.New(); err != nil {
		return fmt.Errorf("raising WireGuard interface %s: opening wgctrl: %w", name, err)
	}
	key, port, mark := i.cfg.PrivateKey, i.cfg.ListenPort, i.cfg.FwMark
	if err := i.client.ConfigureDevice(name, wgtypes.Config{PrivateKey: &key, ListenPort: &port, FirewallMark: &mark,
		Peers: planPeers(nil, i.cfg.Peers)}); err != nil {
		return fmt.Errorf("configuring WireGuard interface %s: %w", name, err)
	}
	// The alias says the link is meshd's: under a found interface's name it is how the mesh's
	// interface and the found one raised again by hand are told apart (see Found.Ours).
	if err := netlink.LinkSetAlias(i.link, SetAlias); err != nil {
		return fmt.Errorf("marking %s as meshd's (its alias): %w", name, err)
	}
	return i.addresses()
}

// addresses gives the link every address the configuration asks for; one already there is left.
func (i *Interface) addresses() error {
	for _, a := range append([]netip.Prefix{i.cfg.Address}, i.cfg.MoreAddresses...) {
		if err := netlink.AddrReplace(i.link, &netlink.Addr{IPNet: prefixNet(a)}); err != nil {
			return fmt.Errorf("adding address %s to %s: %w", a, i.cfg.Name, err)
		}
	}
	return nil
}

// up binds the port and brings the link up, then routes the peers' allowed IPs the address's
// own prefix does not cover. The port may still be held for a moment by the interface this one
// replaces (a found wireguard-go exits only once it has noticed its TUN is gone), so binding is
// retried until ctx ends.
func (i *Interface) up(ctx context.Context) error {
	name, port := i.cfg.Name, i.cfg.ListenPort
	if port != 0 {
		if err := waitPortFree(ctx, port); err != nil {
			return fmt.Errorf("raising WireGuard interface %s: %w", name, err)
		}
	}
	var last error
	for {
		if last = i.bindAndUp(); last == nil {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("raising WireGuard interface %s on port %d: %w", name, port, last)
		case <-time.After(5 * time.Millisecond):
		}
	}
	if i.external && port != 0 {
		// the device process binds the port once it sees its link up
		if err := waitPortBound(ctx, port); err != nil {
			return fmt.Errorf("raising WireGuard interface %s: %w", name, err)
		}
	}
	return i.syncRoutes(i.cfg.Peers)
}

// bindAndUp brings an embedded device up before its link (it starts the peers' handshakes
// at once; packets wait for the link only microseconds). A kernel device binds when its link
// comes up.
func (i *Interface) bindAndUp() error {
	if i.embed != nil {
		if err := i.embed.up(i.cfg.ListenPort); err != nil {
			return err
		}
	}
	if err := netlink.LinkSetUp(i.link); err != nil {
		return fmt.Errorf("setting %s up: %w", i.cfg.Name, err)
	}
	return nil
}

// SetPeers makes the device's peers equal to want by a diff (see planPeers) and routes their
// allowed IPs; a peer that already matches is not touched, so its session goes on.
func (i *Interface) SetPeers(want []Peer) error {
	dev, err := i.client.Device(i.cfg.Name)
	if err != nil {
		return fmt.Errorf("reading WireGuard interface %s: %w", i.cfg.Name, err)
	}
	if plan := planPeers(dev.Peers, want); len(plan) > 0 {
		if err := i.client.ConfigureDevice(i.cfg.Name, wgtypes.Config{Peers: plan}); err != nil {
			return fmt.Errorf("changing %d peers of WireGuard interface %s: %w", len(plan), i.cfg.Name, err)
		}
	}
	i.cfg.Peers = append([]Peer(nil), want...)
	return i.syncRoutes(want)
}

// Peers is what the device has now for each peer, handshakes and bytes included.
func (i *Interface) Peers() ([]PeerStatus, error) {
	dev, err := i.client.Device(i.cfg.Name)
	if err != nil {
		return nil, fmt.Errorf("reading WireGuard interface %s: %w", i.cfg.Name, err)
	}
	out := make([]PeerStatus, 0, len(dev.Peers))
	for _, p := range dev.Peers {
		out = append(out, statusOf(p))
	}
	return out, nil
}

// syncRoutes routes through the interface every allowed IP its address's prefix does not cover
// already, and removes the routes on it nobody wants any more. The link is the mesh's, so every
// route on it that the kernel did not add is one this made. A peer allowed everything (/0) is
// not routed: sending the machine's traffic into the tunnel is not this package's decision.
func (i *Interface) syncRoutes(peers []Peer) error {
	want := map[netip.Prefix]bool{}
	for _, p := range peers {
		for _, a := range p.AllowedIPs {
			a = a.Masked()
			if a.Bits() == 0 || containsPrefix(i.cfg.AsFound, a) || i.cfg.Address.Masked().Overlaps(a) && i.cfg.Address.Bits() <= a.Bits() {
				continue
			}
			want[a] = true
		}
	}
	// The found routes are installed as they were; those in the main table are wanted too.
	kept := map[netip.Prefix]bool{}
	for _, r := range i.cfg.Routes {
		if r.Table == MainTable || r.Table == 0 {
			kept[r.Dst] = true
		}
	}
	have, err := netlink.RouteList(i.link, netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("listing routes of %s: %w", i.cfg.Name, err)
	}
	for _, r := range have {
		if r.Protocol == 2 /* kernel */ || r.Dst == nil {
			continue
		}
		if d, ok := netip.AddrFromSlice(r.Dst.IP); ok {
			ones, _ := r.Dst.Mask.Size()
			p := netip.PrefixFrom(d.Unmap(), ones)
			if kept[p] {
				delete(want, p)
				continue
			}
			if want[p] {
				delete(want, p)
				continue
			}
			if err := netlink.RouteDel(&r); err != nil {
				return fmt.Errorf("removing route %s from %s: %w", p, i.cfg.Name, err)
			}
		}
	}
	for p := range want {
		r := &netlink.Route{LinkIndex: i.link.Attrs().Index, Dst: prefixNet(p.Masked()), Scope: netlink.SCOPE_LINK}
		if err := netlink.RouteReplace(r); err != nil {
			return fmt.Errorf("routing %s through %s: %w", p, i.cfg.Name, err)
		}
	}
	if err := installRoutes(i.link, i.cfg.Routes); err != nil {
		return err
	}
	return installRules(i.cfg.Rules)
}

// Close takes the interface down and away: the embedded device closes its TUN (which removes the
// link), a kernel link is deleted.
func (i *Interface) Close() error {
	var err error
	if i.embed != nil {
		err = i.embed.close()
	} else if i.link != nil {
		err = netlink.LinkDel(i.link)
	} else {
		if l, e := netlink.LinkByName(i.cfg.Name); e == nil {
			err = netlink.LinkDel(l)
		}
	}
	if i.client != nil {
		i.client.Close()
	}
	if err != nil {
		return fmt.Errorf("closing WireGuard interface %s: %w", i.cfg.Name, err)
	}
	return nil
}

// waitPortFree waits until UDP port can be bound, on IPv4 and IPv6 both as wireguard-go binds it.
func waitPortFree(ctx context.Context, port int) error {
	for {
		busy := ""
		for _, nw := range []string{"udp4", "udp6"} {
			c, err := net.ListenUDP(nw, &net.UDPAddr{Port: port})
			if err == nil {
				c.Close()
			} else if errors.Is(err, syscall.EADDRINUSE) {
				busy = nw
			}
		}
		if busy == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("port %d/%s is still held: %w", port, busy, ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// isWireGuardLink says whether a link is a WireGuard device (kernel) or a TUN (embedded or a
// found wireguard-go).
func isWireGuardLink(l netlink.Link) bool {
	t := l.Type()
	return t == "wireguard" || t == "tuntap" || strings.HasPrefix(t, "tun")
}
