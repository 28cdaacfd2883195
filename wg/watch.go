package wg

// Watching the machine's links: how the host learns at once that a tunnel interface was
// removed, taken down or readdressed by hand, rather than on its next timer tick.

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Backoff between subscriptions when the kernel's stream breaks (a full socket buffer drops
// messages: ENOBUFS ends the subscription).
const (
	watchBackoffMin = 100 * time.Millisecond
	watchBackoffMax = 5 * time.Second
)

// WatchLinks follows rtnetlink's link and address notifications in the calling process's network
// namespace until ctx ends, calling changed with the name of each link that was added, removed,
// set up or down, or given or stripped of an address. When the stream breaks, messages may have
// been lost: changed is called with no name, and the subscription is made again with backoff
// (0.1 s doubling to 5 s).
//
// A device's peers and keys are not links: wireguard-go announces nothing when `wg set IFACE peer
// KEY remove` changes them, and a kernel WireGuard device sends no rtnetlink message for it
// either. A device this package runs (RunDevice, an embedded one) sets its link's alias
// (SetAlias) after every UAPI set, which the kernel announces as a link message, so a peer changed
// by hand there is seen here too; on any other device it is found only by reading the device
// (wgctrl) on a pass.
//
// An idle machine sends nothing: the watch sleeps in the kernel.
func WatchLinks(ctx context.Context, changed func(names ...string), log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	backoff := time.Duration(0)
	for ctx.Err() == nil {
		if backoff > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			changed() // what changed while nothing listened was not seen
		}
		err := watchLinksOnce(ctx, changed)
		if ctx.Err() != nil {
			return nil
		}
		log.Warn("link watch broken; subscribing again with backoff", "err", err)
		changed()
		backoff = min(max(2*backoff, watchBackoffMin), watchBackoffMax)
	}
	return nil
}

// watchLinksOnce runs one subscription to link and address messages until it breaks or ctx ends.
func watchLinksOnce(ctx context.Context, changed func(names ...string)) error {
	done := make(chan struct{})
	defer close(done)
	errs := make(chan error, 2)
	report := func(err error) {
		select {
		case errs <- err:
		default:
		}
	}
	links := make(chan netlink.LinkUpdate, 64)
	if err := netlink.LinkSubscribeWithOptions(links, done, netlink.LinkSubscribeOptions{ErrorCallback: report}); err != nil {
		return err
	}
	addrs := make(chan netlink.AddrUpdate, 64)
	if err := netlink.AddrSubscribeWithOptions(addrs, done, netlink.AddrSubscribeOptions{ErrorCallback: report}); err != nil {
		return err
	}
	// The names of the links seen, by index: an address message names only its link's index,
	// and the link may be gone by the time the message is read.
	names := map[int]string{}
	for {
		select {
		case <-ctx.Done():
			return nil
		case u, ok := <-links:
			if !ok {
				return firstErr(errs, "link")
			}
			a := u.Attrs()
			if u.Header.Type == unix.RTM_DELLINK {
				delete(names, a.Index) // its addresses' removals came before it
			} else {
				names[a.Index] = a.Name
			}
			changed(a.Name)
		case u, ok := <-addrs:
			if !ok {
				return firstErr(errs, "address")
			}
			name := names[u.LinkIndex]
			if name == "" {
				if i, err := net.InterfaceByIndex(u.LinkIndex); err == nil {
					name = i.Name
				}
			}
			if name != "" {
				changed(name)
			}
		}
	}
}

// firstErr is why a subscription's stream of kind ended.
func firstErr(errs chan error, kind string) error {
	select {
	case err := <-errs:
		return err
	default:
		return errors.New("the " + kind + " notifications ended")
	}
}
