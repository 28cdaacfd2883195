package wg

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// QuickDir is where wg-quick keeps its files.
const QuickDir = "/etc/wireguard"

// Found is a WireGuard interface found on the machine, as the machine has it now (wgctrl and
// netlink), with its wg-quick file when there is one.
type Found struct {
	Name       string
	Kernel     bool // kernel WireGuard; false: a userspace implementation behind a UAPI socket
	Up         bool
	PrivateKey wgtypes.Key
	ListenPort int
	// Addresses are the link's addresses with their prefix length (10.77.0.1/24); when the link
	// has none, the wg-quick file's.
	Addresses []netip.Prefix
	Peers     []PeerStatus
	// MTU is the link's MTU as it is (wg-quick computes one when its file gives none).
	MTU int
	// FwMark is the device's firewall mark (wg-quick sets one for a peer allowed 0.0.0.0/0 or
	// ::/0, so the tunnel's own packets escape its policy routing); 0 when none.
	FwMark int
	// Routes are the routes through the link that its owner installed, in every table (wg-quick:
	// one per allowed IP in the main table, or its own table for a default route; none with
	// Table = off). The kernel's own routes (an address's prefix) are not among them.
	Routes []Route
	// Rules are the policy rules that lead into the link's own routing tables (tableRules).
	Rules []Rule
	// Ours says the link is a device meshd configured (its alias is SetAlias): under the found
	// interface's own name, the mesh's interface and a found one raised again by hand differ
	// only there.
	Ours bool
	// File is the parsed wg-quick file, nil when there is none at FilePath.
	File     *QuickFile
	FilePath string
}

// Address is the interface's first IPv4 address (else its first address): the tunnel address.
func (f *Found) Address() netip.Prefix {
	for _, a := range f.Addresses {
		if a.Addr().Is4() {
			return a
		}
	}
	if len(f.Addresses) > 0 {
		return f.Addresses[0]
	}
	return netip.Prefix{}
}

// Range is the network the tunnel address belongs to (10.77.0.0/24 for 10.77.0.1/24).
func (f *Found) Range() netip.Prefix { return f.Address().Masked() }

// Discover reads the found interface iface: the device through wgctrl (userspace devices through
// their UAPI socket in /var/run/wireguard), its addresses through netlink, and its wg-quick file
// in quickDir (QuickDir when empty) when there is one. Nothing is changed. An interface that is
// not there is an error satisfying errors.Is(err, fs.ErrNotExist).
func Discover(iface, quickDir string) (*Found, error) {
	if quickDir == "" {
		quickDir = QuickDir
	}
	f := &Found{Name: iface, FilePath: QuickPath(quickDir, iface)}
	c, err := wgctrl.New()
	if err != nil {
		return nil, fmt.Errorf("discovering WireGuard interface %s: opening wgctrl: %w", iface, err)
	}
	defer c.Close()
	dev, err := c.Device(iface)
	if err != nil {
		return nil, fmt.Errorf("discovering WireGuard interface %s: %w", iface, err)
	}
	f.Kernel = dev.Type == wgtypes.LinuxKernel
	f.PrivateKey, f.ListenPort, f.FwMark = dev.PrivateKey, dev.ListenPort, dev.FirewallMark
	for _, p := range dev.Peers {
		f.Peers = append(f.Peers, statusOf(p))
	}

	link, err := netlink.LinkByName(iface)
	if err != nil {
		return nil, fmt.Errorf("discovering WireGuard interface %s: its link: %w", iface, err)
	}
	f.Up = link.Attrs().Flags&netUp != 0
	f.MTU, f.Ours = link.Attrs().MTU, link.Attrs().Alias == SetAlias
	if f.Addresses, err = linkAddresses(link); err != nil {
		return nil, fmt.Errorf("discovering WireGuard interface %s: %w", iface, err)
	}
	if f.Routes, err = linkRoutes(link); err != nil {
		return nil, fmt.Errorf("discovering WireGuard interface %s: %w", iface, err)
	}
	var tables []int
	for _, r := range f.Routes {
		tables = append(tables, r.Table)
	}
	if f.Rules, err = tableRules(tables); err != nil {
		return nil, fmt.Errorf("discovering WireGuard interface %s: %w", iface, err)
	}

	q, err := ReadQuickFile(f.FilePath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("discovering WireGuard interface %s: %w", iface, err)
	default:
		f.File = q
		if len(f.Addresses) == 0 {
			f.Addresses = q.Addresses
		}
	}
	return f, nil
}

// linkAddresses are a link's global addresses (no link-local IPv6) as address/prefix length.
func linkAddresses(link netlink.Link) ([]netip.Prefix, error) {
	addrs, err := netlink.AddrList(link, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("listing addresses of %s: %w", link.Attrs().Name, err)
	}
	var out []netip.Prefix
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if ip.IsLinkLocalUnicast() {
			continue
		}
		ones, _ := a.Mask.Size()
		out = append(out, netip.PrefixFrom(ip, ones))
	}
	return out, nil
}
