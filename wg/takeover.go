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
// address, and its peers carried with their endpoints and a keepalive. Pure, so the host can
// show and check it before anything is stopped.
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
	return cfg, nil
}

// Takeover replaces the found interface f by the mesh's, named cfg.Name (see TakeoverConfig),
// keeping the gap the peers see as short as it can: everything that can be prepared while the
// found interface still holds the port is prepared first (with a different name, the whole
// device: link or TUN, key, peers, address); then the found link is deleted, which stops it
// without touching its configuration (its wg-quick file is never opened for writing; a
// wireguard-go serving it exits once its TUN is gone); then the mesh's binds the port as soon as
// it is free and comes up. A hub peer with a keepalive starts the new handshake at once.
//
// The State says where it ended: FoundUp when nothing was stopped (preparing failed), MeshUp on
// success, Dark when the found interface was stopped and the mesh's could not be raised; the
// error says why. ctx bounds the wait for the port.
func Takeover(ctx context.Context, f *Found, cfg Config) (State, *Interface, error) {
	same := cfg.Name == f.Name
	var i *Interface
	var err error
	if !same {
		if i, err = prepare(cfg); err != nil {
			return FoundUp, nil, fmt.Errorf("taking over %s: preparing %s: %w", f.Name, cfg.Name, err)
		}
	}
	if err := stopFound(f.Name); err != nil {
		if i != nil {
			i.Close()
		}
		return FoundUp, nil, fmt.Errorf("taking over %s: %w", f.Name, err)
	}
	if cfg.Stopped != nil {
		cfg.Stopped()
	}
	if same {
		// the name is free only now; a found wireguard-go's UAPI socket may linger a moment
		if i, err = prepareRetrying(ctx, cfg); err != nil {
			return Dark, nil, fmt.Errorf("taking over %s: %s is stopped and %w", f.Name, f.Name, err)
		}
	}
	if err := i.up(ctx); err != nil {
		i.Close()
		return Dark, nil, fmt.Errorf("taking over %s: %s is stopped and %w", f.Name, f.Name, err)
	}
	return MeshUp, i, nil
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

func prepareRetrying(ctx context.Context, cfg Config) (*Interface, error) {
	for {
		i, err := prepare(cfg)
		if err == nil {
			return i, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("the mesh's %s cannot be prepared: %w", cfg.Name, err)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// Observe says which State a hub is in, from the machine alone: the mesh's interface mesh up
// and answering wgctrl, else the found interface found up, else Dark. When the mesh's interface
// took the found one's name, a link of that name that is up reads as MeshUp; whoever raised it
// knows better, so give the mesh's interface its own name where the difference matters.
func Observe(found, mesh string) State {
	if linkUp(mesh) && answers(mesh) {
		return MeshUp
	}
	if linkUp(found) {
		return FoundUp
	}
	return Dark
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
