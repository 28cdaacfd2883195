package wg

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vishvananda/netlink"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// State is which tunnel carries the peers on a hub that takes a found tunnel over. There are
// three, not two (ADR 0105, "What review settled"): the third is the only one where the peers
// reach nothing, and it must be named, not folded into either of the others.
type State int

const (
	// FoundUp: the found interface is up; the mesh's is not in its place.
	FoundUp State = iota + 1
	// MeshUp: the found interface is gone and the mesh's is up in its place.
	MeshUp
	// Dark: the found interface is down and the mesh's is not up. Peers reach nothing.
	Dark
)

func (s State) String() string {
	switch s {
	case FoundUp:
		return "found interface up"
	case MeshUp:
		return "mesh's interface up in its place"
	case Dark:
		return "found interface down and mesh's not up"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// TakeoverConfig is the mesh's interface a found one is replaced by: the found key, port and
// address, its peers carried with their endpoints, preshared keys and a keepalive, and what Keep
// keeps (every address, the MTU, the firewall mark, the routes). Pure, so the host can show and
// check it before anything is stopped.
func TakeoverConfig(f *Found, name string) (Config, error) {
	if f.PrivateKey == (wgtypes.Key{}) || f.ListenPort == 0 || !f.Address().IsValid() {
		return Config{}, fmt.Errorf("taking over %s: it needs a private key, a listen port and an address (has port %d, address %v)",
			f.Name, f.ListenPort, f.Address())
	}
	cfg := Config{Name: name, PrivateKey: f.PrivateKey, ListenPort: f.ListenPort, Address: f.Address()}
	for _, p := range f.Peers {
		carried := p.Peer
		if carried.Keepalive <= 0 {
			carried.Keepalive = DefaultKeepalive
		}
		cfg.Peers = append(cfg.Peers, carried)
	}
	return Keep(f).Apply(cfg), nil
}

// StageName is the name the mesh's interface is prepared under when it takes the found
// interface's own name: the name is the found one's until that is stopped.
const StageName = "meshd-take"

// Takeover replaces the found interface f by the mesh's, named cfg.Name (see TakeoverConfig),
// keeping the gap the peers see as short as it can: everything that can be prepared while the
// found interface still holds the port is prepared first (the whole device: link or TUN, key,
// peers, addresses; under StageName when the mesh's interface takes the found one's name); then
// the found link is deleted, which stops it without touching its configuration (its wg-quick
// file is never opened for writing; a wireguard-go serving it exits once its TUN is gone); then
// the prepared link takes the found name, the mesh's binds the port as soon as it is free, comes
// up, and gets the found routes back (they went with the found link). A hub peer with a keepalive
// starts the new handshake at once.
//
// The State says where it ended: FoundUp when nothing was stopped (preparing failed), MeshUp on
// success, Dark when the found interface was stopped and the mesh's could not be raised; the
// error says why. ctx bounds the wait for the port.
func Takeover(ctx context.Context, f *Found, cfg Config) (State, *Interface, error) {
	name := cfg.Name
	if name == f.Name {
		cfg.Name = StageName
		if err := Remove(StageName); err != nil { // a takeover cut short left it
			return FoundUp, nil, fmt.Errorf("taking over %s: %w", f.Name, err)
		}
	}
	i, err := prepare(cfg)
	if err != nil {
		return FoundUp, nil, fmt.Errorf("taking over %s: preparing %s: %w", f.Name, cfg.Name, err)
	}
	if err := stopFound(f.Name); err != nil {
		i.Close()
		return FoundUp, nil, fmt.Errorf("taking over %s: %w", f.Name, err)
	}
	if cfg.Stopped != nil {
		cfg.Stopped()
	}
	if name != cfg.Name {
		if err := i.rename(name); err != nil {
			i.Close()
			return Dark, nil, fmt.Errorf("taking over %s: %s is stopped and %w", f.Name, f.Name, err)
		}
	}
	if err := i.up(ctx); err != nil {
		i.Close()
		return Dark, nil, fmt.Errorf("taking over %s: %s is stopped and %w", f.Name, f.Name, err)
	}
	if err := i.followName(ctx); err != nil {
		// The peers have their tunnel; only wgctrl does not find the device under its name yet.
		return MeshUp, i, fmt.Errorf("taking over %s: %w", f.Name, err)
	}
	return MeshUp, i, nil
}

// rename gives the prepared link the found interface's name (the link is down, so the kernel
// allows it); the device's UAPI socket follows in followName.
func (i *Interface) rename(name string) error {
	if err := netlink.LinkSetName(i.link, name); err != nil {
		return fmt.Errorf("renaming %s to %s: %w", i.cfg.Name, name, err)
	}
	l, err := netlink.LinkByIndex(i.link.Attrs().Index)
	if err != nil {
		return fmt.Errorf("finding %s after renaming it: %w", name, err)
	}
	i.link, i.cfg.Name, i.log = l, name, i.cfg.Logger.With("iface", name)
	return nil
}

// followName waits until the device answers wgctrl under the link's name: an embedded device's
// socket is moved here; a device process moves its own when it sees the rename.
func (i *Interface) followName(ctx context.Context) error {
	if i.embed != nil {
		return i.embed.rename(ctx, i.cfg.Name)
	}
	for !answers(i.cfg.Name) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("the device renamed %s does not answer on its UAPI socket: %w", i.cfg.Name, ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
	return nil
}

// stopFound deletes the found link. Its configuration is not flushed first: wgctrl is not asked
// to remove a peer or a key, so a kernel device's settings go with the link and a userspace
// one's process, and the file they were raised from stays as it was.
func stopFound(name string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("finding the found link %s: %w", name, err)
	}
	if !isWireGuardLink(l) {
		return fmt.Errorf("%s is a %s link, not WireGuard: not stopping it", name, l.Type())
	}
	if err := netlink.LinkDel(l); err != nil {
		return fmt.Errorf("stopping the found interface %s (deleting its link): %w", name, err)
	}
	return nil
}

// Remove takes the mesh's own interface name down and away: its link is deleted (a device process
// exits once its TUN is gone). A takeover raises the mesh's interface under its own name with the
// found key, port and address, so an earlier one of that name — a hub that enrolled before, with
// the key it made itself — goes first. An interface that is not there is not an error.
func Remove(name string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return fmt.Errorf("finding WireGuard interface %s: %w", name, err)
	}
	if !isWireGuardLink(l) {
		return fmt.Errorf("%s is a %s link, not WireGuard: not removing it", name, l.Type())
	}
	if err := netlink.LinkDel(l); err != nil {
		return fmt.Errorf("removing WireGuard interface %s (deleting its link): %w", name, err)
	}
	return nil
}

// Observe says which State a hub is in, from the machine alone: the mesh's interface mesh up
// and answering wgctrl, else the found interface found up, else Dark. When the mesh's interface
// took the found one's name, a link of that name is the mesh's when meshd configured it (its
// alias, see Found.Ours) and the found one raised again by hand otherwise.
func Observe(found, mesh string) State {
	if linkUp(mesh) && answers(mesh) && (mesh != found || ours(mesh)) {
		return MeshUp
	}
	if FoundIsUp(found, mesh) {
		return FoundUp
	}
	return Dark
}

// FoundIsUp says whether the found interface found is up: a link of that name that is up and,
// where the mesh's interface mesh has the same name, not meshd's.
func FoundIsUp(found, mesh string) bool {
	return found != "" && linkUp(found) && (found != mesh || !ours(found))
}

// ours says whether link name is a device meshd configured (SetAlias).
func ours(name string) bool {
	l, err := netlink.LinkByName(name)
	return err == nil && l.Attrs().Alias == SetAlias
}

func linkUp(name string) bool {
	l, err := netlink.LinkByName(name)
	return err == nil && l.Attrs().Flags&netUp != 0
}

func answers(name string) bool {
	c, err := wgctrl.New()
	if err != nil {
		return false
	}
	defer c.Close()
	_, err = c.Device(name)
	return err == nil
}
