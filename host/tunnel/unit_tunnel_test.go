package tunnel

// Unit tests of the tunnel driver over an in-memory WireGuard machine (fakeWG): the takeover in
// place of ADR 0105 and the three states, without root, in milliseconds. The real interfaces are
// wg/'s lab tests and the e2e tunnel test.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"meshd/fsm"
	"meshd/host"
	"meshd/host/hosttest"
	"meshd/pki"
	"meshd/report"
	"meshd/wg"
)

// testBed is a predecessor hub's tunnel: wg0 on 51820 at 10.44.0.1/24 with two peers, its
// wg-quick file and enabled unit under the root, and the declaration the record composes for it.
type testBed struct {
	t        *testing.T
	wg       *fakeWG
	found    map[string]*fakeLink
	key      wgtypes.Key
	p1, p2   wgtypes.Key
	root     string
	data     string
	conf     []byte
	seal     *pki.SealKey
	decl     *fsm.Declaration
	confPath string
	clock    func() time.Time // the driver's clock; nil: the real one
}

func newTestBed(t *testing.T) *testBed {
	b := &testBed{t: t, wg: newFakeWG(), root: t.TempDir(), data: t.TempDir()}
	mk := func() wgtypes.Key {
		k, err := wgtypes.GeneratePrivateKey()
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	b.key, b.p1, b.p2 = mk(), mk(), mk()
	peers := []wg.Peer{
		{PublicKey: b.p1.PublicKey(), AllowedIPs: []netip.Prefix{netip.MustParsePrefix("10.44.0.2/32")}, Endpoint: netip.MustParseAddrPort("198.51.100.11:51820")},
		{PublicKey: b.p2.PublicKey(), AllowedIPs: []netip.Prefix{netip.MustParsePrefix("10.44.0.3/32")}, Endpoint: netip.MustParseAddrPort("198.51.100.12:51820")},
	}
	wg0 := &fakeLink{up: true, found: true, key: b.key, port: 51820, addr: netip.MustParsePrefix("10.44.0.1/24"), peers: peers}
	b.found = map[string]*fakeLink{"wg0": wg0}
	b.wg.links["wg0"] = wg0
	b.conf = []byte(fmt.Sprintf("[Interface]\nAddress = 10.44.0.1/24\nListenPort = 51820\nPrivateKey = %s\n", b.key))
	b.confPath = filepath.Join(b.root, "etc/wireguard/wg0.conf")
	wants := filepath.Join(b.root, "etc/systemd/system/multi-user.target.wants")
	for _, d := range []string{filepath.Dir(b.confPath), wants} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(b.confPath, b.conf, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/lib/systemd/system/wg-quick@.service", filepath.Join(wants, "wg-quick@wg0.service")); err != nil {
		t.Fatal(err)
	}
	b.seal = pki.NewSealKey(filepath.Join(b.data, "seal.key"))
	// What fsm.Compose says for the hub after the take: the carried peers without endpoints for
	// peer2 (the record did not know it), a keepalive each.
	b.decl = &fsm.Declaration{Node: "hub", Mode: fsm.Adopted, Settings: map[string]string{}, Tunnel: fsm.TunnelView{
		Range: "10.44.0.0/24", Hub: "hub", HubAddress: "10.44.0.1", Port: 51820,
		Interface: fsm.MeshInterface, PublicKey: b.key.PublicKey().String(), Address: "10.44.0.1/24", ListenPort: 51820, Takeover: "wg0",
		Peers: []fsm.TunnelPeer{
			{PublicKey: b.p1.PublicKey().String(), AllowedIPs: []string{"10.44.0.2/32"}, Endpoint: "198.51.100.11:51820", Keepalive: 25, Carried: true},
			{PublicKey: b.p2.PublicKey().String(), AllowedIPs: []string{"10.44.0.3/32"}, Keepalive: 25, Carried: true},
		}}}
	return b
}

// host opens a host (a fresh agent) with a tunnel driver over the bed's machine.
func (b *testBed) host() *host.Host {
	b.t.Helper()
	drv := newDriver(Config{Root: b.root, Logger: hosttest.Log()}, b.wg,
		SealedKey{Path: KeyPath(b.data), Seal: b.seal})
	if b.clock != nil {
		drv.now = b.clock
	}
	h, err := host.Open(host.Config{DataDir: b.data, Seal: hosttest.Seal, Root: b.root, Logger: hosttest.Log(), Drivers: []host.Driver{drv}})
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { h.Close() })
	return h
}

func detailOf(t *testing.T, rep report.Report) report.TunnelDetail {
	t.Helper()
	d, ok := rep.Kinds[fsm.KindTunnel].(report.TunnelDetail)
	if !ok {
		t.Fatalf("no tunnel detail in %+v", rep.Kinds)
	}
	return d
}

// The host raises the mesh's interface with the found key, port, address and peers, and stops the
// found one without flushing it: its file stays byte for byte, its unit is disabled, and its key
// is sealed like the mesh's own secrets.
func TestUnitTunnelTakeoverInPlace(t *testing.T) {
	b := newTestBed(t)
	h := b.host()
	rep := h.Reconcile(hosttest.Ctx(t), b.decl)
	hosttest.NoErrors(t, rep)
	if det := detailOf(t, rep); det.State != report.TunnelMeshUp || det.Found != "wg0" || len(det.Peers) != 2 {
		t.Fatalf("detail %+v: want mesh-up in wg0's place with its two peers", det)
	}
	if want := []string{"prepare meshd0", "stop wg0", "up meshd0"}; !slices.Equal(b.wg.ops, want) {
		t.Fatalf("ops %v, want %v (everything prepared before the found one stops)", b.wg.ops, want)
	}
	m := b.wg.links[fsm.MeshInterface]
	if m == nil || m.key != b.key || m.port != 51820 || m.addr != netip.MustParsePrefix("10.44.0.1/24") || len(m.peers) != 2 {
		t.Fatalf("mesh's interface %+v: want the found key, port 51820, 10.44.0.1/24 and both peers", m)
	}
	for _, p := range m.peers {
		if !p.Endpoint.IsValid() || p.Keepalive != 25*time.Second {
			t.Errorf("peer %s carried as %+v: want its endpoint (from the found interface) and a keepalive", p.PublicKey, p)
		}
	}
	if b.wg.links["wg0"] != nil {
		t.Error("the found interface is still there")
	}
	if got, err := os.ReadFile(b.confPath); err != nil || !bytes.Equal(got, b.conf) {
		t.Errorf("the found wg-quick file changed: %v\n%s", err, got)
	}
	if _, err := os.Lstat(filepath.Join(b.root, "etc/systemd/system/multi-user.target.wants/wg-quick@wg0.service")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("wg-quick@wg0 is still enabled: %v", err)
	}
	fi, err := os.Stat(KeyPath(b.data))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("sealed key: %v %v", fi, err)
	}
	raw, _ := os.ReadFile(KeyPath(b.data))
	if bytes.Contains(raw, []byte(b.key.String())) || bytes.Contains(raw, b.key[:]) {
		t.Error("the tunnel key is stored in the clear")
	}
	if k, ok, err := (SealedKey{Path: KeyPath(b.data), Seal: b.seal}).Load(); err != nil || !ok || k != b.key {
		t.Errorf("sealed key opens to %v %v %v", k, ok, err)
	}
	// Nothing else under the root holds the key: the found file is copied nowhere.
	_ = filepath.WalkDir(b.root, func(p string, e fs.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() && p != b.confPath {
			if c, _ := os.ReadFile(p); bytes.Contains(c, []byte(b.key.String())) {
				t.Errorf("%s holds the found key", p)
			}
		}
		return nil
	})

	// The next pass changes nothing; a peer change is a difference, not a replacement.
	b.wg.ops = nil
	if rep := h.Reconcile(hosttest.Ctx(t), b.decl); rep.Changes != 0 || len(b.wg.ops) != 0 {
		t.Fatalf("a pass with nothing to do: changes %d, ops %v", rep.Changes, b.wg.ops)
	}
	d2 := *b.decl
	d2.Tunnel.Peers = d2.Tunnel.Peers[:1]
	hosttest.NoErrors(t, h.Reconcile(hosttest.Ctx(t), &d2))
	if want := []string{"peers meshd0 -" + b.p2.PublicKey().String()[:4]}; !slices.Equal(b.wg.ops, want) {
		t.Fatalf("ops %v, want only peer2 removed %v", b.wg.ops, want)
	}
}

// A restarted agent attaches to the mesh's interface that outlived it; a rebooted hub raises the
// mesh's interface from the sealed key and the found one stays down.
func TestUnitTunnelAfterRestartAndReboot(t *testing.T) {
	b := newTestBed(t)
	h := b.host()
	hosttest.NoErrors(t, h.Reconcile(hosttest.Ctx(t), b.decl))
	h.Close()

	b.wg.ops = nil
	h = b.host()
	rep := h.Reconcile(hosttest.Ctx(t), b.decl)
	hosttest.NoErrors(t, rep)
	if want := []string{"attach meshd0"}; !slices.Equal(b.wg.ops, want) || detailOf(t, rep).State != report.TunnelMeshUp {
		t.Fatalf("restart: ops %v state %s, want only an attach", b.wg.ops, detailOf(t, rep).State)
	}
	h.Close()

	b.wg.reboot(b.root, b.found)
	if b.wg.links["wg0"] != nil {
		t.Fatal("the reboot raised wg0 again: its unit was not disabled")
	}
	h = b.host()
	rep = h.Reconcile(hosttest.Ctx(t), b.decl)
	hosttest.NoErrors(t, rep)
	if m := b.wg.links[fsm.MeshInterface]; m == nil || !m.up || m.key != b.key || detailOf(t, rep).State != report.TunnelMeshUp {
		t.Fatalf("after the reboot: mesh %+v, state %s", m, detailOf(t, rep).State)
	}
}

// The found file's hooks: nothing runs them at the takeover (what its PostUp did is in force)
// nor at an agent restart (the interface runs on); the reboot's fresh raise runs PreUp before
// the interface, hands its DNS to resolvconf and runs PostUp after it, %i as the interface, a
// failing line named in the report while the tunnel stays up.
func TestUnitTunnelHooksRunWhenTheInterfaceIsRaisedAnew(t *testing.T) {
	b := newTestBed(t)
	conf := string(b.conf) + "DNS = 10.44.0.1\nPreUp = sysctl -w net.ipv4.ip_forward=1\n" +
		"PostUp = iptables -A FORWARD -i %i -j ACCEPT\nPostUp = fail-me on %i\nPostDown = iptables -D FORWARD -i %i -j ACCEPT\n"
	q, err := wg.ParseQuick(strings.NewReader(conf))
	if err != nil {
		t.Fatal(err)
	}
	b.found["wg0"].file = q
	hooks := func() []string {
		var out []string
		for _, op := range b.wg.ops {
			if strings.HasPrefix(op, "hook ") || strings.HasPrefix(op, "up ") {
				out = append(out, op)
			}
		}
		return out
	}
	h := b.host()
	hosttest.NoErrors(t, h.Reconcile(hosttest.Ctx(t), b.decl))
	if got := hooks(); !slices.Equal(got, []string{"up " + fsm.MeshInterface}) {
		t.Fatalf("the takeover ran %v; want the interface up and no hook", got)
	}
	h.Close()
	b.wg.ops = nil
	h = b.host()
	hosttest.NoErrors(t, h.Reconcile(hosttest.Ctx(t), b.decl))
	if got := hooks(); len(got) != 0 {
		t.Fatalf("an agent restart ran %v; want nothing (the interface runs on)", got)
	}
	h.Close()

	b.wg.reboot(b.root, b.found)
	h = b.host()
	rep := h.Reconcile(hosttest.Ctx(t), b.decl)
	hosttest.NoErrors(t, rep)
	m := fsm.MeshInterface
	want := []string{"hook sysctl -w net.ipv4.ip_forward=1", "up " + m, "hook " + wg.DNSLine([]string{"10.44.0.1"}, m),
		"hook iptables -A FORWARD -i " + m + " -j ACCEPT", "hook fail-me on " + m}
	if got := hooks(); !slices.Equal(got, want) {
		t.Fatalf("after the reboot: %v\nwant %v", got, want)
	}
	det := detailOf(t, rep)
	if det.State != report.TunnelMeshUp || !strings.Contains(det.Hooks, "PreUp") || !strings.Contains(det.Hooks, "1 of 2 lines failed") || !strings.Contains(det.Hooks, "fail-me on "+m) {
		t.Fatalf("after the reboot: state %s, hooks %q; want mesh-up and the failing PostUp line named", det.State, det.Hooks)
	}
	b.wg.ops = nil
	if rep = h.Reconcile(hosttest.Ctx(t), b.decl); len(hooks()) != 0 || detailOf(t, rep).Hooks != det.Hooks {
		t.Fatalf("the next pass ran %v and says %q; want nothing run, the same words", hooks(), detailOf(t, rep).Hooks)
	}
}

// The kept interface's hooks are commands run as root: a kept file changed on disk (one byte)
// fails to open, so after a reboot no hook runs and the pass names the file; an edit of the
// found wg-quick file after the takeover is not what runs either.
func TestUnitTunnelATamperedKeptFileRunsNoHook(t *testing.T) {
	b := newTestBed(t)
	q, err := wg.ParseQuick(strings.NewReader(string(b.conf) + "PostUp = echo kept\n"))
	if err != nil {
		t.Fatal(err)
	}
	b.found["wg0"].file = q
	h := b.host()
	hosttest.NoErrors(t, h.Reconcile(hosttest.Ctx(t), b.decl))
	h.Close()
	kept := SealedKey{Path: KeyPath(b.data), Seal: b.seal}.keptPath()
	raw, err := os.ReadFile(kept)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)-1] ^= 1
	if err := os.WriteFile(kept, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	b.wg.reboot(b.root, b.found)
	h = b.host()
	rep := h.Reconcile(hosttest.Ctx(t), b.decl)
	for _, op := range b.wg.ops {
		if strings.HasPrefix(op, "hook ") {
			t.Errorf("a hook ran from a tampered kept file: %s", op)
		}
	}
	if len(rep.Errors) == 0 || !strings.Contains(rep.Errors[0].Reason, filepath.Base(kept)) {
		t.Errorf("the pass over a tampered kept file: errors %+v; want one naming %s", rep.Errors, kept)
	}
}

// A found interface that is not the one the record took is not stopped: nothing changes and the
// refusal names both values; a takeover that cannot prepare stops nothing (found up); one whose
// mesh's interface cannot come up is the third state, an error.
func TestUnitTunnelThreeStates(t *testing.T) {
	b := newTestBed(t)
	b.wg.links["wg0"].port = 51999
	rep := b.host().Reconcile(hosttest.Ctx(t), b.decl)
	if e := errorOf(rep); e == nil || !strings.Contains(e.Reason, "51999") || !strings.Contains(e.Reason, "51820") {
		t.Fatalf("errors %+v: want a refusal naming 51999 and 51820", rep.Errors)
	}
	if len(b.wg.ops) != 0 || detailOf(t, rep).State != report.TunnelFoundUp {
		t.Fatalf("a refused takeover did %v, state %s", b.wg.ops, detailOf(t, rep).State)
	}
	if _, err := os.Stat(KeyPath(b.data)); err == nil {
		t.Error("a refused takeover sealed the key")
	}

	b = newTestBed(t)
	b.wg.failStart = true
	rep = b.host().Reconcile(hosttest.Ctx(t), b.decl)
	if len(rep.Errors) == 0 || detailOf(t, rep).State != report.TunnelFoundUp || b.wg.links["wg0"] == nil {
		t.Fatalf("a takeover that cannot prepare: %+v, state %s", rep.Errors, detailOf(t, rep).State)
	}
	if _, err := os.Lstat(filepath.Join(b.root, "etc/systemd/system/multi-user.target.wants/wg-quick@wg0.service")); err != nil {
		t.Errorf("a takeover that stopped nothing disabled the unit: %v", err)
	}

	b = newTestBed(t)
	b.wg.failUp = true
	rep = b.host().Reconcile(hosttest.Ctx(t), b.decl)
	det := detailOf(t, rep)
	if det.State != report.TunnelDark || len(rep.Errors) == 0 || !strings.Contains(det.Says, "not up") {
		t.Fatalf("found down and mesh not up: state %s says %q, errors %+v", det.State, det.Says, rep.Errors)
	}
}

// errorOf is the report's error for the tunnel resource.
func errorOf(rep report.Report) *report.ResourceError {
	for i := range rep.Errors {
		if rep.Errors[i].Resource == fsm.KindTunnel+":"+fsm.MeshInterface {
			return &rep.Errors[i]
		}
	}
	return nil
}

// The hub's report lists each peer of its tunnel with its latest handshake, bytes moved and when
// it was last heard, from the device carrying them: the found interface while it is still up,
// the mesh's once it took over. A peer whose received bytes grow counts as heard at that pass
// even without a new handshake (WireGuard renews one only every two minutes).
func TestUnitTunnelReportsPeersLiveness(t *testing.T) {
	b := newTestBed(t)
	now := time.Date(2026, 12, 1, 5, 0, 0, 0, time.UTC)
	b.clock = func() time.Time { return now }
	hs := now.Add(-3 * time.Minute)
	b.wg.seen[b.p1.PublicKey()] = fakeSeen{handshake: hs, rx: 1000, tx: 2000}

	// Found up (the mesh's cannot be prepared): the found interface's peers are reported.
	b.wg.failStart = true
	h := b.host()
	det := detailOf(t, h.Reconcile(hosttest.Ctx(t), b.decl))
	if det.State != report.TunnelFoundUp || len(det.Peers) != 2 {
		t.Fatalf("found up: state %s, peers %+v", det.State, det.Peers)
	}
	p1, p2 := peerIn(t, det, b.p1), peerIn(t, det, b.p2)
	if !p1.Carried || !p1.LastHandshake.Equal(hs) || !p1.LastHeard.Equal(hs) || p1.ReceiveBytes != 1000 || p1.TransmitBytes != 2000 {
		t.Errorf("peer1 before the takeover: %+v", p1)
	}
	if !p2.Carried || !p2.LastHeard.IsZero() || p2.ReceiveBytes != 0 {
		t.Errorf("peer2, never heard: %+v", p2)
	}

	// The mesh's interface takes over; peer1 sends more without a new handshake.
	b.wg.failStart = false
	now = now.Add(10 * time.Second)
	det = detailOf(t, h.Reconcile(hosttest.Ctx(t), b.decl))
	if det.State != report.TunnelMeshUp || len(det.Peers) != 2 {
		t.Fatalf("mesh up: state %s, peers %+v", det.State, det.Peers)
	}
	if p1 := peerIn(t, det, b.p1); !p1.LastHeard.Equal(hs) {
		t.Errorf("peer1, nothing new received: last heard %s, want its handshake %s", p1.LastHeard, hs)
	}
	b.wg.seen[b.p1.PublicKey()] = fakeSeen{handshake: hs, rx: 1500, tx: 2600}
	now = now.Add(10 * time.Second)
	det = detailOf(t, h.Reconcile(hosttest.Ctx(t), b.decl))
	p1 = peerIn(t, det, b.p1)
	if !p1.LastHeard.Equal(now) || !p1.LastHandshake.Equal(hs) || p1.ReceiveBytes != 1500 || p1.TransmitBytes != 2600 {
		t.Errorf("peer1 after receiving: %+v, want last heard %s", p1, now)
	}
	if p2 := peerIn(t, det, b.p2); !p2.LastHeard.IsZero() {
		t.Errorf("peer2 still never heard: %+v", p2)
	}
}

func peerIn(t *testing.T, det report.TunnelDetail, k wgtypes.Key) report.TunnelPeer {
	t.Helper()
	for _, p := range det.Peers {
		if p.PublicKey == k.PublicKey().String() {
			return p
		}
	}
	t.Fatalf("peer %s not in the report: %+v", k.PublicKey(), det.Peers)
	return report.TunnelPeer{}
}

// A hub that enrolled before already runs the mesh's interface with the key it made itself, on
// the port moved aside; once the record took the found tunnel's key as its overlay key, the host
// removes that interface and raises it again under the same name with the found key, port,
// address and peers, the found one stopped only after everything else is prepared.
func TestUnitTunnelTakeoverOnAHubThatEnrolledBefore(t *testing.T) {
	b := newTestBed(t)
	own, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	b.wg.links[fsm.MeshInterface] = &fakeLink{up: true, key: own, port: 51821, addr: netip.MustParsePrefix("10.99.0.1/24")}
	rep := b.host().Reconcile(hosttest.Ctx(t), b.decl)
	if len(rep.Errors) != 0 || detailOf(t, rep).State != report.TunnelMeshUp {
		t.Fatalf("errors %+v, state %s", rep.Errors, detailOf(t, rep).State)
	}
	want := []string{"remove meshd0", "prepare meshd0", "stop wg0", "up meshd0"}
	if !slices.Equal(b.wg.ops, want) {
		t.Errorf("ops %v, want %v", b.wg.ops, want)
	}
	m := b.wg.links[fsm.MeshInterface]
	if m == nil || m.key != b.key || m.port != 51820 || m.addr != netip.MustParsePrefix("10.44.0.1/24") || len(m.peers) != 2 {
		t.Fatalf("meshd0 after the takeover: %+v", m)
	}
}

// ownKeyBed is a node that joined without a found tunnel: `meshd join` sealed the key it made in
// the data dir, and the record composes its interface with that key's public half, an address
// of the range, and its peers (the hub routing the range, another node directly).
func ownKeyBed(t *testing.T) (*testBed, wgtypes.Key) {
	b := &testBed{t: t, wg: newFakeWG(), root: t.TempDir(), data: t.TempDir()}
	b.seal = pki.NewSealKey(filepath.Join(b.data, "seal.key"))
	own, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := (SealedKey{Path: KeyPath(b.data), Seal: b.seal}).Save(own); err != nil {
		t.Fatal(err)
	}
	hub, _ := wgtypes.GeneratePrivateKey()
	peer, _ := wgtypes.GeneratePrivateKey()
	b.decl = &fsm.Declaration{Node: "newnode", Mode: fsm.Adopted, Settings: map[string]string{}, Tunnel: fsm.TunnelView{
		Range: "10.44.0.0/24", Hub: "hub", HubAddress: "10.44.0.1", Port: 51820,
		Interface: fsm.MeshInterface, PublicKey: own.PublicKey().String(), Address: "10.44.0.4/24", ListenPort: 51820,
		Peers: []fsm.TunnelPeer{
			{Name: "hub", PublicKey: hub.PublicKey().String(), AllowedIPs: []string{"10.44.0.0/24"}, Endpoint: "198.51.100.10:51820", Keepalive: 25},
			{Name: "peer2", PublicKey: peer.PublicKey().String(), AllowedIPs: []string{"10.44.0.3/32"}, Endpoint: "198.51.100.12:51820", Keepalive: 25},
		}}}
	return b, own
}

// A node with its own key raises the mesh's interface with the key join sealed, its address and
// its peers; a restarted agent attaches to it with the same key (no new key, no re-enrolment);
// a moved tunnel port is applied to the running device.
func TestUnitTunnelOwnKey(t *testing.T) {
	b, own := ownKeyBed(t)
	h := b.host()
	rep := h.Reconcile(hosttest.Ctx(t), b.decl)
	hosttest.NoErrors(t, rep)
	if want := []string{"prepare meshd0", "up meshd0"}; !slices.Equal(b.wg.ops, want) {
		t.Fatalf("ops %v, want %v", b.wg.ops, want)
	}
	m := b.wg.links[fsm.MeshInterface]
	if m == nil || m.key != own || m.port != 51820 || m.addr != netip.MustParsePrefix("10.44.0.4/24") || len(m.peers) != 2 {
		t.Fatalf("mesh's interface %+v: want the sealed key, 51820, 10.44.0.4/24 and two peers", m)
	}
	for _, p := range m.peers {
		if !p.Endpoint.IsValid() || p.Keepalive != 25*time.Second {
			t.Errorf("peer %+v: want its endpoint and a keepalive", p)
		}
	}
	if det := detailOf(t, rep); det.State != report.TunnelMeshUp || det.Found != "" {
		t.Fatalf("detail %+v: want mesh-up, nothing taken over", det)
	}
	h.Close()

	b.wg.ops = nil
	h = b.host()
	hosttest.NoErrors(t, h.Reconcile(hosttest.Ctx(t), b.decl))
	if want := []string{"attach meshd0"}; !slices.Equal(b.wg.ops, want) || b.wg.links[fsm.MeshInterface].key != own {
		t.Fatalf("restart: ops %v key %v, want an attach with the same key", b.wg.ops, b.wg.links[fsm.MeshInterface].key.PublicKey())
	}

	b.wg.ops = nil
	d2 := *b.decl
	d2.Tunnel.ListenPort = 51830
	hosttest.NoErrors(t, h.Reconcile(hosttest.Ctx(t), &d2))
	if m := b.wg.links[fsm.MeshInterface]; m.port != 51830 {
		t.Fatalf("after mesh.tunnel moved to 51830 the device listens on %d (ops %v)", m.port, b.wg.ops)
	}
}

// A node whose sealed key is missing, or is not the recorded one, raises nothing and says which
// key the record holds.
func TestUnitTunnelOwnKeyMissingOrWrong(t *testing.T) {
	b, own := ownKeyBed(t)
	if err := os.Remove(KeyPath(b.data)); err != nil {
		t.Fatal(err)
	}
	h := b.host()
	rep := h.Reconcile(hosttest.Ctx(t), b.decl)
	h.Close()
	if e := errorOf(rep); e == nil || !strings.Contains(e.Reason, own.PublicKey().String()) || len(b.wg.ops) != 0 {
		t.Fatalf("no sealed key: errors %+v ops %v, want a refusal naming %s", rep.Errors, b.wg.ops, own.PublicKey())
	}
	other, _ := wgtypes.GeneratePrivateKey()
	if err := (SealedKey{Path: KeyPath(b.data), Seal: b.seal}).Save(other); err != nil {
		t.Fatal(err)
	}
	rep = b.host().Reconcile(hosttest.Ctx(t), b.decl)
	if e := errorOf(rep); e == nil || !strings.Contains(e.Reason, other.PublicKey().String()) || len(b.wg.ops) != 0 {
		t.Fatalf("a sealed key that is not the recorded one: errors %+v ops %v", rep.Errors, b.wg.ops)
	}
}

// The mesh's interface taken down by hand is brought up again by the next pass (an attach, which
// sets it up), and removed by hand it is raised again; until then the report does not say it is
// up. The watch that runs that pass at once is TestUnitTunnelLinkEventRunsAPass.
func TestUnitTunnelDownOrRemovedByHandRaisedAgain(t *testing.T) {
	b, own := ownKeyBed(t)
	h := b.host()
	hosttest.NoErrors(t, h.Reconcile(hosttest.Ctx(t), b.decl))

	b.wg.mu.Lock()
	b.wg.links[fsm.MeshInterface].up = false // ip link set meshd0 down
	b.wg.ops = nil
	b.wg.mu.Unlock()
	rep := h.Reconcile(hosttest.Ctx(t), b.decl)
	hosttest.NoErrors(t, rep)
	if want := []string{"attach meshd0"}; !slices.Equal(b.wg.ops, want) || !b.wg.links[fsm.MeshInterface].up {
		t.Fatalf("after meshd0 was taken down: ops %v, up %v; want %v and up", b.wg.ops, b.wg.links[fsm.MeshInterface].up, want)
	}
	if det := detailOf(t, rep); det.State != report.TunnelMeshUp {
		t.Fatalf("after meshd0 was brought up again: state %s", det.State)
	}

	b.wg.mu.Lock()
	delete(b.wg.links, fsm.MeshInterface) // ip link del meshd0
	b.wg.ops = nil
	b.wg.mu.Unlock()
	hosttest.NoErrors(t, h.Reconcile(hosttest.Ctx(t), b.decl))
	if want := []string{"prepare meshd0", "up meshd0"}; !slices.Equal(b.wg.ops, want) || b.wg.links[fsm.MeshInterface].key != own {
		t.Fatalf("after meshd0 was removed: ops %v; want %v with the sealed key", b.wg.ops, want)
	}
}

// A spoke whose traffic still goes through its found tunnel raises nothing: its report says
// whether that tunnel is up, and down is the node's tunnel error; meshd never touches it.
func TestUnitTunnelSpokeOnItsFoundTunnel(t *testing.T) {
	b := newTestBed(t)
	b.decl.Tunnel.Interface, b.decl.Tunnel.Takeover, b.decl.Tunnel.Rides = "", "", "wg0"
	h := b.host()
	rep := h.Reconcile(hosttest.Ctx(t), b.decl)
	hosttest.NoErrors(t, rep)
	if det := detailOf(t, rep); det.State != report.TunnelFoundUp || det.Found != "wg0" || len(det.Peers) != 2 {
		t.Fatalf("a spoke on its found tunnel: %+v, want found-up with its two peers", det)
	}
	// node show's tunnel line and `tunnel take --dry-run` read the found interface from here: its
	// name, its live port, and the take's preview field by field.
	if det := detailOf(t, rep); det.Interface != "wg0" || det.Port != 51820 || len(det.Fields) == 0 {
		t.Errorf("a spoke on its found tunnel reports interface %q port %d and %d preview fields; want wg0, 51820 and the preview", det.Interface, det.Port, len(det.Fields))
	}

	b.wg.mu.Lock()
	b.wg.links["wg0"].up = false // wg-quick down wg0, or the predecessor's tunnel failing
	b.wg.mu.Unlock()
	rep = h.Reconcile(hosttest.Ctx(t), b.decl)
	det := detailOf(t, rep)
	if det.State != report.TunnelDark || !strings.Contains(det.Says, "wg0") {
		t.Fatalf("the spoke's found tunnel down: %+v, want dark, naming wg0", det)
	}
	if len(rep.Errors) != 1 || rep.Errors[0].Resource != "tunnel:wg0" {
		t.Fatalf("the spoke's found tunnel down: errors %+v, want tunnel:wg0", rep.Errors)
	}
	if len(b.wg.ops) != 0 || b.wg.links[fsm.MeshInterface] != nil {
		t.Fatalf("meshd acted on a spoke's found tunnel: ops %v", b.wg.ops)
	}
}

// A link message about the tunnel's interface runs a pass for the tunnel at once (the loop's
// timer is an hour); one about another link (a container's veth) runs none.
func TestUnitTunnelLinkEventRunsAPass(t *testing.T) {
	b, _ := ownKeyBed(t)
	m := linkEventsWG{fakeWG: b.wg, events: make(chan string)}
	drv := newDriver(Config{Root: b.root, Logger: hosttest.Log()}, m, SealedKey{Path: KeyPath(b.data), Seal: b.seal})
	h, err := host.Open(host.Config{DataDir: b.data, Seal: hosttest.Seal, Root: b.root, Logger: hosttest.Log(), Interval: time.Hour, Drivers: []host.Driver{drv}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	decls := make(chan *fsm.Declaration, 1)
	done := make(chan struct{})
	go func() { defer close(done); _ = h.Run(ctx, decls) }()
	t.Cleanup(func() { cancel(); <-done; h.Close() })
	passed := h.Passed()
	decls <- b.decl
	<-passed

	up := func() bool {
		b.wg.mu.Lock()
		defer b.wg.mu.Unlock()
		return b.wg.links[fsm.MeshInterface] != nil && b.wg.links[fsm.MeshInterface].up
	}
	b.wg.mu.Lock()
	b.wg.links[fsm.MeshInterface].up = false
	b.wg.mu.Unlock()
	m.events <- "veth1234"
	select {
	case <-passed:
		t.Fatal("a message about another link ran a pass")
	case <-time.After(300 * time.Millisecond):
	}
	m.events <- fsm.MeshInterface
	select {
	case <-passed:
	case <-time.After(5 * time.Second):
		t.Fatal("no pass within 5s of a message about meshd0")
	}
	if !up() {
		t.Fatal("the pass after meshd0 went down did not bring it up")
	}
}

// The pass is cut short at each named crash point of a takeover (what a SIGKILL leaves: the sealed
// key, the record store, the links as they were); a new agent on the same data finishes it: the
// mesh's interface is up with the found key in the found one's place, the found file is byte for
// byte what it was, its unit is disabled (also when the crash came after the mesh's was up and
// before the unit went), and the pass after that changes nothing.
func TestUnitTunnelTakeoverCrashSafety(t *testing.T) {
	for _, point := range []string{"tunnel.after-seal-key", "tunnel.after-record-takeover", "tunnel.after-stop-found", "tunnel.after-takeover"} {
		t.Run(point, func(t *testing.T) {
			b := newTestBed(t)
			drv := newDriver(Config{Root: b.root, Logger: hosttest.Log()}, b.wg,
				SealedKey{Path: KeyPath(b.data), Seal: b.seal})
			drv.crasher = hosttest.Armed(point)
			h, err := host.Open(host.Config{DataDir: b.data, Seal: hosttest.Seal, Root: b.root, Logger: hosttest.Log(), Drivers: []host.Driver{drv}})
			if err != nil {
				t.Fatal(err)
			}
			func() {
				defer func() {
					if r := recover(); r != (hosttest.Crashed{Point: point}) {
						t.Fatalf("crash point %s not reached (%v)", point, r)
					}
				}()
				h.Reconcile(hosttest.Ctx(t), b.decl)
			}()
			h.Close()

			h = b.host()
			rep := h.Reconcile(hosttest.Ctx(t), b.decl)
			hosttest.NoErrors(t, rep)
			if det := detailOf(t, rep); det.State != report.TunnelMeshUp {
				t.Fatalf("after the restart: state %s (%s)", det.State, det.Reason)
			}
			if m := b.wg.links[fsm.MeshInterface]; m == nil || !m.up || m.key != b.key || m.port != 51820 || len(m.peers) != 2 {
				t.Fatalf("after the restart the mesh's interface is %+v: want it up with the found key on 51820 and both peers", m)
			}
			if b.wg.links["wg0"] != nil {
				t.Error("the found interface is still there")
			}
			if got, err := os.ReadFile(b.confPath); err != nil || !bytes.Equal(got, b.conf) {
				t.Errorf("the found wg-quick file changed: %v\n%s", err, got)
			}
			if _, err := os.Lstat(filepath.Join(b.root, "etc/systemd/system/multi-user.target.wants/wg-quick@wg0.service")); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("wg-quick@wg0 is still enabled after the restart: a reboot would raise it again (%v)", err)
			}
			b.wg.ops = nil
			if rep := h.Reconcile(hosttest.Ctx(t), b.decl); rep.Changes != 0 || len(b.wg.ops) != 0 {
				t.Fatalf("the pass after the finished takeover: changes %d, ops %v", rep.Changes, b.wg.ops)
			}
		})
	}
}
