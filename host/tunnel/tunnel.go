// Tunnel: the host's driver for the private network's interface (fsm.KindTunnel, the
// declaration's Tunnel section), over wg/ (ADR 0105).

package tunnel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"meshd/container"
	"meshd/fsm"
	"meshd/host/pass"
	"meshd/report"
	"meshd/wg"
)

// machine is what the tunnel driver needs of the machine's WireGuard, in the driver's
// terms: wgMachine is the real one (wg/ on the machine); the unit tests put a fake in its place.
type machine interface {
	// Discover reads a found interface; one that is not there satisfies errors.Is(err,
	// fs.ErrNotExist).
	Discover(iface string) (*wg.Found, error)
	// LinkUp says whether a link of that name is there and up.
	LinkUp(name string) bool
	// FoundUp says whether the found interface is up: where the mesh's interface took its name,
	// a link of that name meshd did not configure (raised again by hand).
	FoundUp(found, mesh string) bool
	// Running says whether the mesh's interface is there and answers wgctrl.
	Running(name string) bool
	// Raise raises the mesh's interface, or attaches to it when it already runs.
	Raise(ctx context.Context, cfg wg.Config) (meshLink, error)
	// Takeover replaces the found interface by the mesh's (wg.Takeover), calling stopped once the
	// found link is gone and before the mesh's is up (the tunnel.after-stop-found crash point).
	Takeover(ctx context.Context, f *wg.Found, cfg wg.Config, stopped func()) (wg.State, meshLink, error)
	// Remove takes the mesh's own interface of that name down and away (wg.Remove).
	Remove(name string) error
	// Hook runs one line of a found wg-quick file's hooks, as wg-quick runs it (bash).
	Hook(ctx context.Context, line string) error
	// QuickTables reads wg-quick's own nftables tables for iface; LoadQuickTables puts back those
	// the machine lacks.
	QuickTables(ctx context.Context, iface string) ([]wg.QuickTable, error)
	LoadQuickTables(ctx context.Context, ts []wg.QuickTable) error
}

// meshLink is the mesh's interface once raised.
type meshLink interface {
	SetPeers(want []wg.Peer) error
	Peers() ([]wg.PeerStatus, error)
	// Release lets it go without taking it down (the agent stops; the peers keep their tunnel).
	Release()
}

// wgMachine is the machine's WireGuard through wg/.
type wgMachine struct {
	spawn func(ctx context.Context, name string, mtu int) error
	// program is the file spawn runs; "" hands nothing over.
	program string
	log     *slog.Logger
}

func (wgMachine) Discover(iface string) (*wg.Found, error) { return wg.Discover(iface, "") }
func (wgMachine) LinkUp(name string) bool                  { return wg.Observe(name, "") == wg.FoundUp }
func (wgMachine) Running(name string) bool                 { return wg.Running(name) }
func (wgMachine) Remove(name string) error                 { return wg.Remove(name) }
func (wgMachine) FoundUp(found, mesh string) bool          { return wg.FoundIsUp(found, mesh) }

func (m wgMachine) Raise(ctx context.Context, cfg wg.Config) (meshLink, error) {
	cfg.Spawn = m.spawn
	if link, err := m.handOver(ctx, cfg); link != nil || err != nil {
		return link, err
	}
	if wg.Running(cfg.Name) {
		return wg.Attach(ctx, cfg)
	}
	return wg.Raise(ctx, cfg)
}

func (m wgMachine) Takeover(ctx context.Context, f *wg.Found, cfg wg.Config, stopped func()) (wg.State, meshLink, error) {
	cfg.Spawn = m.spawn
	cfg.Stopped = stopped
	s, i, err := wg.Takeover(ctx, f, cfg)
	if i == nil {
		return s, nil, err
	}
	return s, i, err
}

// Config is how the agent builds the tunnel driver.
type Config struct {
	// Root prefixes the paths of the wg-quick units it disables ("" means "/").
	Root string
	Keys SealedKey
	// Device starts a userspace device in a process of its own (wg.DeviceCommand.Spawn); nil
	// embeds wireguard-go in the agent, where it dies with the agent.
	Device func(ctx context.Context, name string, mtu int) error
	// DeviceProgram is the file Device runs. A device process of another program (the old
	// binary, which an upgrade's agent restart leaves running) is replaced by one of this
	// program's when the interface is raised (wg.Supersede); "" replaces none.
	DeviceProgram string
	Logger        *slog.Logger
	// DockerHost is the Docker engine a takeover looks for a WireGuard container on (Managers).
	DockerHost string
}

// Driver raises the mesh's WireGuard interface from the declaration's Tunnel section, or on
// a hub that takes a found tunnel over (Tunnel.Takeover), does the takeover in place:
//
//   - it reads the found interface and checks it is the one the record took (its key, port and
//     address), refusing with nothing stopped when it is not;
//   - it seals the found private key (the one credential the mesh takes rather than mints) and
//     records the takeover in the record store, before anything stops;
//   - wg.Takeover prepares the mesh's interface beside the found one, deletes the found link
//     (never flushed: its wg-quick file stays on disk byte for byte, held like any found file),
//     and brings the mesh's up under the found name with the found key, port, addresses, peers
//     and what wg.Keep keeps (sealed beside the key, laid over the record on every pass);
//   - it disables and masks the found interface's wg-quick@ unit (disableUnits), so neither a
//     reboot nor a `systemctl start` raises it again.
//
// On a node with no found tunnel to take over, the sealed key is the one `meshd join` made there
// (only its public key is in the record).
//
// Every later pass (and every start of the agent) raises or attaches to the mesh's interface with
// the sealed key and applies the declared peers as a difference; a declared port or address that
// moved (a setting changed) attaches again, which brings the device to them. It reports one of
// three states (report.TunnelDetail.State); the third — the found interface down and the mesh's not
// up, where the peers reach nothing — is also a resource error.
type Driver struct {
	m    machine
	keys keyStore
	root string
	log  *slog.Logger

	mu   sync.Mutex
	link meshLink
	name string
	// port and addr are what link was raised (or attached) with: a declaration that moves either
	// attaches again, which brings the device to them (the binding follows the setting).
	port int
	addr netip.Prefix
	// heard is, by peer, the received bytes the last pass saw and when they last grew: how a peer
	// that sends without a new handshake (WireGuard renews one only every two minutes) still
	// counts as heard.
	heard map[wgtypes.Key]heardMark
	now   func() time.Time
	// unitsOff says the found interface's wg-quick unit was seen disabled by this driver: a
	// takeover cut short before it disabled the unit (a crash) has it disabled on the next pass.
	unitsOff bool
	crasher  *pass.Crasher // pass.CrashEnv's point (the tunnel.* crash points); reaches nothing in production
	// keptCache is the kept found interface once read (it changes only at a takeover).
	keptCache *wg.Kept
	// hooksRan says what the found file's hooks did when this driver last raised the interface.
	hooksRan string
	// containers lists the machine's containers for refuseManaged; nil (the unit tests) looks at none.
	containers func(context.Context) ([]container.Running, error)
}

// kept is the kept found interface, read once.
func (d *Driver) kept() (wg.Kept, bool, error) {
	if d.keptCache != nil {
		return *d.keptCache, true, nil
	}
	k, ok, err := d.keys.LoadKept()
	if err != nil || !ok {
		return k, ok, err
	}
	d.keptCache = &k
	return k, true, nil
}

// match puts the found interface beside the mesh's as it runs, field by field, in the report
// (`meshd tunnel show`); a mesh interface not there yet is compared as it is about to be raised.
func (d *Driver) match(k wg.Kept, cfg wg.Config, det *report.TunnelDetail) {
	mesh, err := d.m.Discover(cfg.Name)
	if err != nil {
		mesh = wg.ConfigView(cfg)
	}
	det.Fields = Fields(k.Match(mesh))
}

// Fields are wg's field-by-field comparison in the report's words.
func Fields(fs []wg.Field) []report.TunnelField {
	out := make([]report.TunnelField, 0, len(fs))
	for _, f := range fs {
		out = append(out, report.TunnelField{Field: f.Field, Found: f.Found, Mesh: f.Mesh, Same: f.Same, Added: f.Added})
	}
	return out
}

type heardMark struct {
	rx int64
	at time.Time
}

// New returns the tunnel driver; nothing happens until the first Reconcile.
func New(cfg Config) *Driver {
	d := newDriver(cfg, wgMachine{spawn: cfg.Device, program: cfg.DeviceProgram, log: cfg.Logger}, cfg.Keys)
	d.containers = containersAt(cfg.DockerHost)
	return d
}

func newDriver(cfg Config, m machine, keys keyStore) *Driver {
	d := &Driver{m: m, keys: keys, root: cfg.Root, log: cfg.Logger, heard: map[wgtypes.Key]heardMark{}, now: time.Now}
	if d.root == "" {
		d.root = "/"
	}
	if d.log == nil {
		d.log = slog.Default()
	}
	d.crasher = pass.NewCrasher(d.log)
	return d
}

// Kind implements Driver.
func (d *Driver) Kind() string { return fsm.KindTunnel }

// retryWait bounds how long a pass waits for the tunnel's port to be free and bound.
const retryWait = 30 * time.Second

type takeoverRecord struct {
	PublicKey string    `json:"public_key"`
	At        time.Time `json:"at"`
}

// Reconcile implements Driver.
func (d *Driver) Reconcile(ctx context.Context, ps pass.Pass) pass.Outcome {
	d.mu.Lock()
	defer d.mu.Unlock()
	t := ps.Declaration.Tunnel
	if t.Interface == "" {
		return d.foundOnly(t)
	}
	det := report.TunnelDetail{Interface: t.Interface, Found: t.Takeover, Address: t.Address, Port: t.ListenPort, PublicKey: t.PublicKey}
	out := pass.Outcome{}
	fail := func(err error) {
		det.Reason = err.Error()
		out.Errors = append(out.Errors, report.ResourceError{Resource: fsm.KindTunnel + ":" + t.Interface, Module: "mesh", Reason: err.Error()})
	}
	cfg, err := wgConfig(t)
	if err != nil {
		fail(err)
	} else if err := d.converge(ctx, ps, cfg, t.Takeover, &det, &out); err != nil {
		fail(err)
	}
	d.state(t, &det)
	det.FoundUnit = d.foundUnit(t.Takeover)
	if det.State == report.TunnelDark && len(out.Errors) == 0 {
		fail(fmt.Errorf("%s", det.Says))
	}
	out.Detail = det
	return out
}

// foundOnly is the report of a node that raises no interface of its own: a spoke whose traffic
// still goes through the found tunnel it enrolled with (Tunnel.Rides) until that is taken over.
// meshd never touches that interface; it says whether it is up, and down is a resource error
// (the node reaches the mesh through nothing), seen at once through the link watch.
func (d *Driver) foundOnly(t fsm.TunnelView) pass.Outcome {
	if t.Rides == "" {
		return pass.Outcome{}
	}
	det := report.TunnelDetail{Found: t.Rides, Address: t.Address, PublicKey: t.PublicKey}
	if d.m.LinkUp(t.Rides) {
		det.State, det.Says = report.TunnelFoundUp, wg.FoundUp.String()
		det.Peers = d.peers(fsm.TunnelView{Takeover: t.Rides, Peers: t.Peers})
		// What `tunnel take` would raise in its place, field by field (its --dry-run shows it).
		if f, err := d.m.Discover(t.Rides); err == nil {
			det.Fields = Fields(wg.Preview(f))
			det.Interface, det.Port = t.Rides, uint16(f.ListenPort)
		}
		return pass.Outcome{Detail: det}
	}
	det.State = report.TunnelDark
	det.Says = "the found interface " + t.Rides + " this node still uses is down (meshd leaves it to its owner until it is taken over)"
	det.Reason = det.Says
	return pass.Outcome{Detail: det, Errors: []report.ResourceError{{Resource: fsm.KindTunnel + ":" + t.Rides, Module: "mesh", Reason: det.Says}}}
}

// converge brings the mesh's interface to cfg: peers by difference on a live interface, else a
// takeover (not yet recorded) or a raise (or attach) with the sealed key.
func (d *Driver) converge(ctx context.Context, ps pass.Pass, cfg wg.Config, found string, det *report.TunnelDetail, out *pass.Outcome) error {
	// Removed by hand (the device is gone) or taken down by hand (`ip link set meshd0 down`: the
	// device answers but unbinds its port): raised or attached again, which brings it up.
	if d.link != nil && (d.name != cfg.Name || !d.m.Running(cfg.Name) || !d.m.LinkUp(cfg.Name) || d.port != cfg.ListenPort || d.addr != cfg.Address) {
		d.link.Release()
		d.link = nil
	}
	var rec takeoverRecord
	took := false
	if found != "" {
		b, ok, err := ps.Records.Get("takeover/" + found)
		if err != nil {
			return err
		}
		if ok {
			took = json.Unmarshal(b, &rec) == nil
			det.TakenAt = rec.At
		}
	}
	// Not taken yet, or the found interface is up again (raised by hand) and holds the port: take
	// it over (again).
	if found != "" && (!took || d.m.FoundUp(found, cfg.Name)) {
		if d.link != nil {
			d.link.Release()
			d.link = nil
		}
		return d.takeover(ctx, ps, cfg, found, det, out)
	}
	if found != "" && !d.unitsOff {
		// Taken over before: a takeover cut short after the found link went (a crash at
		// tunnel.after-takeover) left its unit enabled, and a reboot would raise it again.
		if err := d.disableUnits(found); err != nil {
			return err
		}
		d.unitsOff = true
	}
	var kept wg.Kept // what a fresh raise does of wg-quick's part (anewHooks)
	if found != "" {
		k, ok, err := d.kept()
		if err != nil {
			return err
		}
		if ok {
			cfg = k.Apply(cfg)
			d.match(k, cfg, det)
			kept = k
		}
	}
	defer func() { det.Hooks = d.hooksRan }()
	if d.link != nil {
		return d.link.SetPeers(cfg.Peers)
	}
	key, ok, err := d.keys.Load()
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("no sealed key for %s at this node: the record holds its public key %s", cfg.Name, cfg.PrivateKey)
	}
	if want := cfg.PrivateKey; key.PublicKey() != want {
		return fmt.Errorf("the sealed key for %s is %s's, not the recorded %s", cfg.Name, key.PublicKey(), want)
	}
	cfg.PrivateKey = key
	// A link meshd raises anew (a boot: the device went with the machine) gets the found file's
	// hooks as wg-quick would have run them; one it attaches to (an agent restart) ran them.
	fresh := !d.m.Running(cfg.Name)
	var pre string
	if fresh {
		pre = d.runHooks(ctx, "PreUp", wg.For(kept.Hooks.PreUp, cfg.Name))
	}
	rctx, cancel := context.WithTimeout(ctx, retryWait)
	defer cancel()
	link, err := d.m.Raise(rctx, cfg)
	if err != nil {
		return err
	}
	d.link, d.name, d.port, d.addr = link, cfg.Name, cfg.ListenPort, cfg.Address
	out.Changes++
	if fresh {
		if ran := d.anewHooks(ctx, cfg.Name, kept, pre); ran != "" {
			d.hooksRan = ran
		}
	}
	return nil
}

// takeover takes the found interface over in place (see Driver).
func (d *Driver) takeover(ctx context.Context, ps pass.Pass, cfg wg.Config, found string, det *report.TunnelDetail, out *pass.Outcome) error {
	f, err := d.m.Discover(found)
	if err != nil {
		return fmt.Errorf("taking %s over: %w", found, err)
	}
	want := cfg.PrivateKey // wgConfig put the recorded public key here
	switch {
	case f.PrivateKey.PublicKey() != want:
		return fmt.Errorf("not taking %s over: its key is %s, the record took %s", found, f.PrivateKey.PublicKey(), want)
	case f.ListenPort != cfg.ListenPort:
		return fmt.Errorf("not taking %s over: it listens on %d, the record says %d", found, f.ListenPort, cfg.ListenPort)
	case f.Address() != cfg.Address:
		return fmt.Errorf("not taking %s over: its address is %s, the record says %s", found, f.Address(), cfg.Address)
	}
	if err := d.maskable(found); err != nil {
		return fmt.Errorf("not taking %s over: %w", found, err)
	}
	if err := d.refuseManaged(ctx, f); err != nil {
		return fmt.Errorf("not taking %s over: %w", found, err)
	}
	cfg.PrivateKey = f.PrivateKey
	kept := wg.Keep(f)
	if kept.Tables, err = d.m.QuickTables(ctx, found); err != nil {
		return fmt.Errorf("not taking %s over: %w", found, err)
	}
	seen := map[wgtypes.Key]netip.AddrPort{}
	for _, p := range f.Peers {
		seen[p.PublicKey] = p.Endpoint
	}
	for i, p := range cfg.Peers {
		if e := seen[p.PublicKey]; e.IsValid() {
			cfg.Peers[i].Endpoint = e
		}
	}
	cfg = kept.Apply(cfg)
	if err := d.keys.Save(f.PrivateKey); err != nil {
		return fmt.Errorf("not taking %s over: %w", found, err)
	}
	if err := d.keys.SaveKept(kept); err != nil {
		return fmt.Errorf("not taking %s over: %w", found, err)
	}
	d.keptCache = &kept
	d.crash("tunnel.after-seal-key")
	rec, _ := json.Marshal(takeoverRecord{PublicKey: want.String(), At: time.Now().UTC()})
	if err := ps.Records.Put("takeover/"+found, rec); err != nil {
		return fmt.Errorf("not taking %s over: %w", found, err)
	}
	d.crash("tunnel.after-record-takeover")
	out.Changes++
	// A mesh interface of the same name already running (a hub that enrolled before, with the key
	// it made itself) goes first: the found key, port and address are raised under that name.
	// The carried peers' gap is unchanged: the found interface still carries them until it stops.
	for _, old := range []string{cfg.Name, fsm.MeshInterface} {
		if old != found && d.m.Running(old) {
			if err := d.m.Remove(old); err != nil {
				return fmt.Errorf("taking %s over: %w", found, err)
			}
			d.log.Info("removed the mesh's interface raised with the node's own key, to raise it with the found tunnel's", "mesh", old, "found", found)
		}
	}
	tctx, cancel := context.WithTimeout(ctx, retryWait)
	defer cancel()
	state, link, err := d.m.Takeover(tctx, f, cfg, func() { d.crash("tunnel.after-stop-found") })
	if state == wg.FoundUp {
		_ = ps.Records.Delete("takeover/" + found)
		return err
	}
	if state == wg.MeshUp {
		d.crash("tunnel.after-takeover")
	}
	det.TakenAt = time.Now().UTC()
	if derr := d.disableUnits(found); derr != nil {
		d.log.Warn("disabling the found tunnel's unit", "iface", found, "err", derr)
		if err == nil {
			err = derr
		}
	} else {
		d.unitsOff = true
	}
	if link != nil {
		d.link, d.name, d.port, d.addr = link, cfg.Name, cfg.ListenPort, cfg.Address
	}
	d.log.Info("took the found tunnel over", "found", found, "mesh", cfg.Name, "state", state.String())
	return err
}

// crash SIGKILLs the process when point is the armed crash point (pass.CrashEnv).
func (d *Driver) crash(point string) {
	if d.crasher != nil {
		d.crasher.Reach(point)
	}
}

// disableUnits disables and masks the wg-quick@FOUND unit: its target.wants links under
// /etc/systemd/system go (what `systemctl disable` removes), and /etc/systemd/system/
// wg-quick@FOUND.service becomes a link to /dev/null (what `systemctl mask` writes), so neither a
// reboot nor a `systemctl start wg-quick@FOUND` (an installer's reload, a path unit, a cron job)
// raises the found interface again. On a machine booted by systemd the manager is told
// (daemon-reload), so the mask holds at once. The unit file and the found wg-quick file are
// never touched; `systemctl unmask wg-quick@FOUND` undoes it. A real unit file at the mask's path
// (copied there and edited) is not replaced: an error naming it.
func (d *Driver) disableUnits(found string) error {
	unit := "wg-quick@" + found + ".service"
	links, err := filepath.Glob(filepath.Join(d.root, "etc/systemd/system/*.wants", unit))
	if err != nil {
		return err
	}
	for _, l := range links {
		if err := os.Remove(l); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("disabling %s: %w", unit, err)
		}
		d.log.Info("disabled the found tunnel's unit", "link", l)
	}
	mask := filepath.Join(d.root, "etc/systemd/system", unit)
	if target, err := os.Readlink(mask); err == nil && target == "/dev/null" {
		return nil // masked already
	}
	if err := d.maskable(found); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(mask), 0o755); err != nil {
		return fmt.Errorf("masking %s: %w", unit, err)
	}
	if err := os.Symlink("/dev/null", mask); err != nil {
		return fmt.Errorf("masking %s: %w", unit, err)
	}
	d.log.Info("masked the found tunnel's unit (undo: systemctl unmask "+unit+")", "link", mask)
	if _, err := os.Stat(filepath.Join(d.root, "run/systemd/system")); err == nil && d.root == "/" {
		if out, err := exec.Command("systemctl", "daemon-reload").CombinedOutput(); err != nil {
			d.log.Warn("telling systemd of the mask", "unit", unit, "err", err, "out", string(out))
		}
	}
	return nil
}

// maskable refuses a found unit meshd cannot mask in place: something of its own at
// /etc/systemd/system/wg-quick@FOUND.service (a unit file copied there and edited, or a link
// elsewhere). A takeover checks it before anything stops.
func (d *Driver) maskable(found string) error {
	unit := "wg-quick@" + found + ".service"
	mask := filepath.Join(d.root, "etc/systemd/system", unit)
	target, err := os.Readlink(mask)
	switch {
	case err == nil && target == "/dev/null":
		return nil
	case err == nil:
		return fmt.Errorf("masking %s: %s is a link to %s, not a unit meshd can mask in place; remove it, then take the tunnel over", unit, mask, target)
	case errors.Is(err, fs.ErrNotExist):
		return nil
	}
	if _, serr := os.Lstat(mask); serr == nil {
		return fmt.Errorf("masking %s: %s is a unit file of its own (copied and edited?); move it aside, then take the tunnel over", unit, mask)
	}
	return fmt.Errorf("masking %s: %w", unit, err)
}

// state reads which of the three states the node is in, and the peers as the device has them.
func (d *Driver) state(t fsm.TunnelView, det *report.TunnelDetail) {
	switch {
	case d.link != nil && d.m.Running(t.Interface) && d.m.LinkUp(t.Interface):
		det.State, det.Says = report.TunnelMeshUp, wg.MeshUp.String()
	case t.Takeover != "" && d.m.FoundUp(t.Takeover, t.Interface):
		det.State, det.Says = report.TunnelFoundUp, wg.FoundUp.String()
	default:
		det.State, det.Says = report.TunnelDark, wg.Dark.String()
		if t.Takeover == "" {
			det.Says = "the mesh's interface " + t.Interface + " is not up"
		}
	}
	det.Peers = d.peers(t)
}

// peers are the tunnel's peers as the device carrying them has them: the mesh's interface, or
// the found one while it still carries them (before the takeover, or raised again by hand).
func (d *Driver) peers(t fsm.TunnelView) []report.TunnelPeer {
	var ps []wg.PeerStatus
	var err error
	switch {
	case d.link != nil:
		ps, err = d.link.Peers()
	case t.Takeover != "" && d.m.FoundUp(t.Takeover, t.Interface):
		var f *wg.Found
		if f, err = d.m.Discover(t.Takeover); err == nil {
			ps = f.Peers
		}
	default:
		return nil
	}
	if err != nil {
		d.log.Debug("reading the tunnel's peers", "err", err)
		return nil
	}
	names := map[string]fsm.TunnelPeer{}
	for _, p := range t.Peers {
		names[p.PublicKey] = p
	}
	now := d.now()
	var out []report.TunnelPeer
	for _, p := range ps {
		k := p.PublicKey.String()
		v := report.TunnelPeer{PublicKey: k, Name: names[k].Name, Carried: names[k].Carried,
			LastHandshake: p.LastHandshake, ReceiveBytes: p.ReceiveBytes, TransmitBytes: p.TransmitBytes}
		v.LastHeard = d.lastHeard(p, now)
		for _, a := range p.AllowedIPs {
			v.AllowedIPs = append(v.AllowedIPs, a.String())
		}
		if p.Endpoint.IsValid() {
			v.Endpoint = p.Endpoint.String()
		}
		out = append(out, v)
	}
	for k := range d.heard {
		if !slices.ContainsFunc(ps, func(p wg.PeerStatus) bool { return p.PublicKey == k }) {
			delete(d.heard, k) // a peer removed: its counters start again if it comes back
		}
	}
	return out
}

// lastHeard is when peer p was last heard: its last handshake, or this pass when its received
// bytes grew since the last one. Bytes seen for the first time (or after the counters restarted
// with a new device) say nothing about when they came, so only the handshake counts then.
func (d *Driver) lastHeard(p wg.PeerStatus, now time.Time) time.Time {
	m, seen := d.heard[p.PublicKey]
	if seen && p.ReceiveBytes > m.rx {
		m.at = now
	}
	m.rx = p.ReceiveBytes
	d.heard[p.PublicKey] = m
	if m.at.After(p.LastHandshake) {
		return m.at
	}
	return p.LastHandshake
}

// wgConfig is the wg.Config the declaration asks for. Its PrivateKey holds the recorded
// public key until the driver puts the sealed (or found) private key in its place.
func wgConfig(t fsm.TunnelView) (wg.Config, error) {
	addr, err := netip.ParsePrefix(t.Address)
	if err != nil {
		return wg.Config{}, fmt.Errorf("the declared tunnel address %q: %w", t.Address, err)
	}
	pub, err := wgtypes.ParseKey(t.PublicKey)
	if err != nil {
		return wg.Config{}, fmt.Errorf("the declared tunnel key %q: %w", t.PublicKey, err)
	}
	cfg := wg.Config{Name: t.Interface, PrivateKey: pub, ListenPort: int(t.ListenPort), Address: addr}
	for _, p := range t.Peers {
		k, err := wgtypes.ParseKey(p.PublicKey)
		if err != nil {
			return wg.Config{}, fmt.Errorf("the declared peer key %q: %w", p.PublicKey, err)
		}
		peer := wg.Peer{PublicKey: k, Keepalive: time.Duration(p.Keepalive) * time.Second}
		for _, a := range p.AllowedIPs {
			pr, err := netip.ParsePrefix(a)
			if err != nil {
				return wg.Config{}, fmt.Errorf("peer %s: allowed IP %q: %w", p.PublicKey, a, err)
			}
			peer.AllowedIPs = append(peer.AllowedIPs, pr)
		}
		if p.Endpoint != "" {
			if e, err := netip.ParseAddrPort(p.Endpoint); err == nil {
				peer.Endpoint = e
			}
		}
		cfg.Peers = append(cfg.Peers, peer)
	}
	return cfg, nil
}

// Close lets the interface go without taking it down: the peers keep their tunnel while the agent
// restarts (a kernel link or a device process outlives it; an embedded device cannot).
func (d *Driver) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.link != nil {
		d.link.Release()
		d.link = nil
	}
	return nil
}

// linkEvents is what the tunnel driver's drift watch needs of the machine: wgMachine has it; the
// unit tests' fake does not unless a test gives it, and is then watched by the timer only.
type linkEvents interface {
	WatchLinks(ctx context.Context, changed func(names ...string)) error
}

// WatchLinks follows the machine's link and address messages (wg.WatchLinks).
func (m wgMachine) WatchLinks(ctx context.Context, changed func(names ...string)) error {
	return wg.WatchLinks(ctx, changed, m.log)
}

// WatchDrift follows the links of the machine (host.driftSource): the mesh's interface removed,
// taken down or readdressed by hand, or a found tunnel going down, wakes a pass for the tunnel at
// once. A peer removed by hand (`wg set IFACE peer KEY remove`) is a link message too on meshd's
// own device, which sets its link's alias after every UAPI set (wg.SetAlias); on any other device
// the timer's pass finds it.
func (d *Driver) WatchDrift(ctx context.Context, touched func(names ...string)) {
	if ev, ok := d.m.(linkEvents); ok {
		_ = ev.WatchLinks(ctx, touched)
	}
}
