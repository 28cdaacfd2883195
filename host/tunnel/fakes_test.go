package tunnel

// The in-memory WireGuard machine the unit tests run the tunnel driver over: links, their peers
// and what each peer was last heard, as wg/ would report them.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"meshd/wg"
)

// fakeWG is a machine's WireGuard in memory: links by name, each with its device's key, port,
// address and peers.
type fakeWG struct {
	mu    sync.Mutex
	links map[string]*fakeLink
	// ops are the calls that changed something, in order: "prepare NAME", "stop NAME", "up NAME",
	// "peers NAME +a ~b -c", "attach NAME".
	ops       []string
	failStart bool // preparing the mesh's interface fails (nothing stopped)
	// seen is what each peer's device counters say, whichever interface carries it.
	seen   map[wgtypes.Key]fakeSeen
	failUp bool // the mesh's interface cannot come up after the found one stopped
}

type fakeSeen struct {
	handshake time.Time
	rx, tx    int64
}

func (f *fakeWG) status(p wg.Peer) wg.PeerStatus {
	s := f.seen[p.PublicKey]
	return wg.PeerStatus{Peer: p, LastHandshake: s.handshake, ReceiveBytes: s.rx, TransmitBytes: s.tx}
}

type fakeLink struct {
	up    bool
	key   wgtypes.Key
	port  int
	addr  netip.Prefix
	peers []wg.Peer
	found bool // the predecessor's, not raised by meshd
	file  *wg.QuickFile
}

func newFakeWG() *fakeWG {
	return &fakeWG{links: map[string]*fakeLink{}, seen: map[wgtypes.Key]fakeSeen{}}
}

func (f *fakeWG) Discover(iface string) (*wg.Found, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.links[iface]
	if l == nil {
		return nil, fmt.Errorf("discovering %s: %w", iface, fs.ErrNotExist)
	}
	out := &wg.Found{Name: iface, Up: l.up, PrivateKey: l.key, ListenPort: l.port, Addresses: []netip.Prefix{l.addr}, File: l.file}
	for _, p := range l.peers {
		out.Peers = append(out.Peers, f.status(p))
	}
	return out, nil
}

func (f *fakeWG) LinkUp(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.links[name] != nil && f.links[name].up
}

func (f *fakeWG) FoundUp(found, _ string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.links[found]
	return l != nil && l.up && l.found
}

func (f *fakeWG) Running(name string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.links[name] != nil && !f.links[name].found
}

func (f *fakeWG) Raise(_ context.Context, cfg wg.Config) (meshLink, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l := f.links[cfg.Name]; l != nil {
		f.ops = append(f.ops, "attach "+cfg.Name)
		l.key, l.port, l.addr, l.up = cfg.PrivateKey, cfg.ListenPort, cfg.Address, true // wg.Attach brings it up
		return &fakeMesh{f: f, name: cfg.Name}, (&fakeMesh{f: f, name: cfg.Name}).setPeersLocked(cfg.Peers)
	}
	if l := f.portHolder(cfg.ListenPort); l != "" {
		return nil, fmt.Errorf("port %d is held by %s", cfg.ListenPort, l)
	}
	f.ops = append(f.ops, "prepare "+cfg.Name, "up "+cfg.Name)
	f.links[cfg.Name] = &fakeLink{up: true, key: cfg.PrivateKey, port: cfg.ListenPort, addr: cfg.Address, peers: slices.Clone(cfg.Peers)}
	return &fakeMesh{f: f, name: cfg.Name}, nil
}

func (f *fakeWG) portHolder(port int) string {
	for n, l := range f.links {
		if l.up && l.port == port {
			return n
		}
	}
	return ""
}

func (f *fakeWG) Takeover(_ context.Context, found *wg.Found, cfg wg.Config, stopped func()) (wg.State, meshLink, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failStart {
		return wg.FoundUp, nil, errors.New("cannot create the TUN")
	}
	if f.links[cfg.Name] != nil {
		return wg.FoundUp, nil, fmt.Errorf("preparing %s: a link of that name exists", cfg.Name)
	}
	f.ops = append(f.ops, "prepare "+cfg.Name)
	f.links[cfg.Name] = &fakeLink{key: cfg.PrivateKey, port: cfg.ListenPort, addr: cfg.Address, peers: slices.Clone(cfg.Peers)}
	// stopped by deleting its link: no peer or key is removed from it first
	delete(f.links, found.Name)
	f.ops = append(f.ops, "stop "+found.Name)
	if stopped != nil {
		f.mu.Unlock()
		func() {
			defer f.mu.Lock() // a crash point panics in the unit tests: the lock is taken again for the deferred unlock
			stopped()
		}()
	}
	if f.failUp {
		delete(f.links, cfg.Name)
		return wg.Dark, nil, errors.New("binding the port: address in use")
	}
	f.links[cfg.Name].up = true
	f.ops = append(f.ops, "up "+cfg.Name)
	return wg.MeshUp, &fakeMesh{f: f, name: cfg.Name}, nil
}

func (f *fakeWG) QuickTables(context.Context, string) ([]wg.QuickTable, error) { return nil, nil }

func (f *fakeWG) LoadQuickTables(context.Context, []wg.QuickTable) error { return nil }

func (f *fakeWG) Hook(_ context.Context, line string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ops = append(f.ops, "hook "+line)
	if strings.Contains(line, "fail") {
		return errors.New("exit status 1")
	}
	return nil
}

func (f *fakeWG) Remove(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.links[name] != nil {
		delete(f.links, name)
		f.ops = append(f.ops, "remove "+name)
	}
	return nil
}

// reboot takes every link down and away, then raises the found ones whose wg-quick unit is
// still enabled under root.
func (f *fakeWG) reboot(root string, found map[string]*fakeLink) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.links = map[string]*fakeLink{}
	for name, l := range found {
		if _, err := os.Lstat(filepath.Join(root, "etc/systemd/system/multi-user.target.wants/wg-quick@"+name+".service")); err == nil {
			c := *l
			f.links[name] = &c
		}
	}
	f.ops = nil
}

type fakeMesh struct {
	f    *fakeWG
	name string
}

func (m *fakeMesh) SetPeers(want []wg.Peer) error {
	m.f.mu.Lock()
	defer m.f.mu.Unlock()
	return m.setPeersLocked(want)
}

func (m *fakeMesh) setPeersLocked(want []wg.Peer) error {
	l := m.f.links[m.name]
	if l == nil {
		return fmt.Errorf("%s is gone", m.name)
	}
	have := map[wgtypes.Key]string{}
	for _, p := range l.peers {
		have[p.PublicKey] = fmt.Sprint(p.AllowedIPs, p.Keepalive)
	}
	var diff []string
	for _, p := range want {
		h, ok := have[p.PublicKey]
		switch {
		case !ok:
			diff = append(diff, "+"+p.PublicKey.String()[:4])
		case h != fmt.Sprint(p.AllowedIPs, p.Keepalive):
			diff = append(diff, "~"+p.PublicKey.String()[:4])
		}
		delete(have, p.PublicKey)
	}
	for k := range have {
		diff = append(diff, "-"+k.String()[:4])
	}
	if len(diff) > 0 {
		slices.Sort(diff)
		m.f.ops = append(m.f.ops, "peers "+m.name+" "+strings.Join(diff, " "))
	}
	l.peers = slices.Clone(want)
	return nil
}

func (m *fakeMesh) Peers() ([]wg.PeerStatus, error) {
	m.f.mu.Lock()
	defer m.f.mu.Unlock()
	l := m.f.links[m.name]
	if l == nil {
		return nil, fmt.Errorf("%s is gone", m.name)
	}
	var out []wg.PeerStatus
	for _, p := range l.peers {
		out = append(out, m.f.status(p))
	}
	return out, nil
}

func (m *fakeMesh) Release() {}

// linkEventsWG is the fake machine with a link watch: names sent on events are what rtnetlink
// would announce.
type linkEventsWG struct {
	*fakeWG
	events chan string
}

func (f linkEventsWG) WatchLinks(ctx context.Context, changed func(names ...string)) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case n := <-f.events:
			changed(n)
		}
	}
}
