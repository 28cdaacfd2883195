package wg

// The routes through a WireGuard link: what its owner installed is read before a takeover and
// installed again on the mesh's interface, because every route through a link goes with it.

import (
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Route is one route through a link, as its owner installed it.
type Route struct {
	Dst netip.Prefix `json:"dst"`
	// Table is the routing table: 254 (main) for wg-quick's per-allowed-IP routes, its own
	// (51820 by default) for a peer allowed everything.
	Table    int        `json:"table"`
	Metric   int        `json:"metric,omitempty"`
	Src      netip.Addr `json:"src,omitzero"`
	Protocol int        `json:"protocol,omitempty"`
	Scope    uint8      `json:"scope"`
}

// MainTable is the kernel's main routing table.
const MainTable = unix.RT_TABLE_MAIN

func (r Route) String() string {
	s := r.Dst.String()
	if r.Table != MainTable {
		s += fmt.Sprintf(" table %d", r.Table)
	}
	if r.Metric != 0 {
		s += fmt.Sprintf(" metric %d", r.Metric)
	}
	return s
}

// linkRoutes are the routes through link in every table, IPv4 and IPv6, but the kernel's own
// (an address's prefix, the local table) and IPv6 multicast and link-local ones.
func linkRoutes(link netlink.Link) ([]Route, error) {
	filter := &netlink.Route{LinkIndex: link.Attrs().Index, Table: unix.RT_TABLE_UNSPEC}
	rs, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, filter, netlink.RT_FILTER_OIF|netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("listing routes through %s: %w", link.Attrs().Name, err)
	}
	var out []Route
	for _, r := range rs {
		if r.Protocol == unix.RTPROT_KERNEL || r.Table == unix.RT_TABLE_LOCAL || r.Type != unix.RTN_UNICAST {
			continue
		}
		dst := defaultRoute(r.Family)
		if r.Dst != nil {
			a, ok := netip.AddrFromSlice(r.Dst.IP)
			if !ok {
				continue
			}
			ones, _ := r.Dst.Mask.Size()
			dst = netip.PrefixFrom(a.Unmap(), ones)
		}
		if dst.Addr().Is6() && (dst.Addr().IsLinkLocalUnicast() || dst.Addr().IsMulticast()) {
			continue
		}
		rt := Route{Dst: dst, Table: r.Table, Metric: r.Priority, Protocol: int(r.Protocol), Scope: uint8(r.Scope)}
		if a, ok := netip.AddrFromSlice(r.Src); ok {
			rt.Src = a.Unmap()
		}
		out = append(out, rt)
	}
	return out, nil
}

func defaultRoute(family int) netip.Prefix {
	if family == netlink.FAMILY_V6 {
		return netip.MustParsePrefix("::/0")
	}
	return netip.MustParsePrefix("0.0.0.0/0")
}

// installRoutes puts routes through link as they were found (RouteReplace: one already there
// is left as it is).
func installRoutes(link netlink.Link, routes []Route) error {
	for _, r := range routes {
		nr := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: prefixNet(r.Dst), Table: r.Table,
			Priority: r.Metric, Protocol: netlink.RouteProtocol(r.Protocol), Scope: netlink.Scope(r.Scope)}
		if r.Src.IsValid() {
			nr.Src = r.Src.AsSlice()
		}
		if err := netlink.RouteReplace(nr); err != nil && !errors.Is(err, syscall.EEXIST) {
			return fmt.Errorf("routing %s through %s as it was found: %w", r, link.Attrs().Name, err)
		}
	}
	return nil
}
