package wg

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

const (
	tunnelPort = 51820
	svcPort    = 7070
	hubAddr    = "10.77.0.1"
)

// predecessor is a lab where the hub and its peers run the found tunnel wg0, raised from
// wg-quick files by wg-quick over wireguard-go, and each peer reaches a service on the hub
// through it.
type predecessor struct {
	lab   *lab
	hub   *machine
	peers []*machine
	keys  map[string]wgtypes.Key // by machine name
	conf  string                 // the hub's wg0.conf
}

// newPredecessor raises the hub with one peer per name given, peer i at 10.77.0.(i+2).
func newPredecessor(t *testing.T, peerNames ...string) *predecessor {
	l := newLab(t)
	p := &predecessor{lab: l, hub: l.machine("hub"), keys: map[string]wgtypes.Key{}}
	p.keys["hub"] = mustKey(t)
	var hubConf strings.Builder
	fmt.Fprintf(&hubConf, "# the predecessor's tunnel\n[Interface]\nAddress = %s/24\nListenPort = %d\nPrivateKey = %s\n", hubAddr, tunnelPort, p.keys["hub"])
	for i, name := range peerNames {
		m := l.machine(name)
		p.peers = append(p.peers, m)
		p.keys[name] = mustKey(t)
		fmt.Fprintf(&hubConf, "\n[Peer]\n# %s\nPublicKey = %s\nAllowedIPs = 10.77.0.%d/32\n", name, p.keys[name].PublicKey(), i+2)
		m.writeFile("/etc/wireguard/wg0.conf", fmt.Sprintf("[Interface]\nAddress = 10.77.0.%d/24\nPrivateKey = %s\n\n[Peer]\nPublicKey = %s\nAllowedIPs = 10.77.0.0/24\nEndpoint = %s:%d\nPersistentKeepalive = 25\n",
			i+2, p.keys[name], p.keys["hub"].PublicKey(), p.hub.ip, tunnelPort))
	}
	p.conf = hubConf.String()
	p.hub.writeFile("/etc/wireguard/wg0.conf", p.conf)
	p.hub.wgQuickUp("wg0")
	for _, m := range p.peers {
		m.wgQuickUp("wg0")
	}
	p.hub.serve(svcPort)
	return p
}

func (p *predecessor) svc() string { return fmt.Sprintf("%s:%d", hubAddr, svcPort) }

// reachAll waits until every peer reaches the hub's service through the tunnel.
func (p *predecessor) reachAll(t *testing.T) {
	t.Helper()
	for _, m := range p.peers {
		waitFor(t, 10*time.Second, m.name+" reaches the hub's service through the tunnel", func() bool {
			return m.dial(p.svc(), 200*time.Millisecond)
		})
	}
}

func TestDiscoverReadsAFoundTunnel(t *testing.T) {
	p := newPredecessor(t, "p1", "p2")
	p.reachAll(t)
	f := p.hub.helper().must(helperReq{Op: "discover", Iface: "wg0"}).Found

	if f.Kernel || !f.Up {
		t.Errorf("kernel %v up %v, want a userspace interface that is up", f.Kernel, f.Up)
	}
	if f.PrivateKey != p.keys["hub"] {
		t.Errorf("private key is not the hub's")
	}
	if f.ListenPort != tunnelPort {
		t.Errorf("listen port = %d, want %d", f.ListenPort, tunnelPort)
	}
	if f.Address() != netip.MustParsePrefix(hubAddr+"/24") || f.Range() != netip.MustParsePrefix("10.77.0.0/24") {
		t.Errorf("address %v range %v", f.Address(), f.Range())
	}
	if len(f.Peers) != 2 {
		t.Fatalf("peers = %d, want 2", len(f.Peers))
	}
	for i, m := range p.peers {
		var got *PeerStatus
		for j := range f.Peers {
			if f.Peers[j].PublicKey == p.keys[m.name].PublicKey() {
				got = &f.Peers[j]
			}
		}
		if got == nil {
			t.Errorf("peer %s not found", m.name)
			continue
		}
		if want := []netip.Prefix{netip.MustParsePrefix(fmt.Sprintf("10.77.0.%d/32", i+2))}; !samePrefixes(got.AllowedIPs, want) {
			t.Errorf("%s allowed IPs = %v, want %v", m.name, got.AllowedIPs, want)
		}
		if got.Endpoint.Addr() != netip.MustParseAddr(m.ip) {
			t.Errorf("%s endpoint = %v, want its underlay address %s", m.name, got.Endpoint, m.ip)
		}
		if got.LastHandshake.IsZero() || got.ReceiveBytes == 0 {
			t.Errorf("%s: last handshake %v, %d bytes received; it has called the hub", m.name, got.LastHandshake, got.ReceiveBytes)
		}
	}
	if f.File == nil {
		t.Fatalf("the wg-quick file %s was not read", f.FilePath)
	}
	if f.FilePath != "/etc/wireguard/wg0.conf" || f.File.ListenPort != tunnelPort || f.File.PrivateKey == nil || *f.File.PrivateKey != p.keys["hub"] ||
		len(f.File.Addresses) != 1 || f.File.Addresses[0] != f.Address() || len(f.File.Peers) != 2 {
		t.Errorf("wg-quick file read as %+v", f.File)
	}
}

func TestDiscoverNamesAMissingInterface(t *testing.T) {
	l := newLab(t)
	resp := l.machine("hub").helper().call(helperReq{Op: "discover", Iface: "wg9"})
	if !strings.Contains(resp.Err, "wg9") {
		t.Errorf("error %q does not name the interface", resp.Err)
	}
}

func TestTakeoverInPlace(t *testing.T) { takeover(t, "mesh0") }

// Under the found interface's own name nothing can be prepared before the found one is gone
// (the name is taken), so the gap is a little longer; it must work all the same.
func TestTakeoverUnderTheFoundName(t *testing.T) { takeover(t, "wg0") }

func takeover(t *testing.T, meshName string) {
	p := newPredecessor(t, "p1", "p2")
	p.reachAll(t)
	hub := p.hub.helper()
	if meshName != "wg0" { // under one name the machine alone cannot tell them apart (see Observe)
		if s := hub.must(helperReq{Op: "observe", Iface: "wg0", Mesh: meshName}).State; s != FoundUp {
			t.Errorf("before: state %v, want %v", s, FoundUp)
		}
	}
	peerConf := map[string]string{}
	for _, m := range p.peers {
		peerConf[m.name] = m.sh("wg showconf wg0; ip -4 addr show dev wg0; ip route")
	}
	fileBefore, err := os.ReadFile(p.hub.path("/etc/wireguard/wg0.conf"))
	if err != nil {
		t.Fatal(err)
	}

	var probes []*probe
	for _, m := range p.peers {
		probes = append(probes, startProbe(t, m, p.svc()))
	}
	start := time.Now()
	for _, pr := range probes {
		waitFor(t, 5*time.Second, pr.from+" probes before the takeover", func() bool { return pr.succeededAfter(start) })
	}

	before := time.Now()
	resp := hub.call(helperReq{Op: "takeover", Iface: "wg0", Mesh: meshName})
	took := time.Since(before)
	if resp.Err != "" || resp.State != MeshUp {
		t.Fatalf("takeover: state %v, error %q", resp.State, resp.Err)
	}
	done := time.Now()
	for _, pr := range probes {
		waitFor(t, 10*time.Second, pr.from+" reaches the hub's service after the takeover", func() bool { return pr.succeededAfter(done) })
	}
	settled := time.Now()
	// a little more probing after the first success, so a flapping session would show as a gap
	waitFor(t, 5*time.Second, "probing goes on", func() bool { return time.Since(settled) > 500*time.Millisecond })
	for _, pr := range probes {
		pr.close()
		gap := pr.gap(before.Add(-200 * time.Millisecond))
		t.Logf("takeover gap seen by %s: %v (takeover call %v, %d failed probes)", pr.from, gap.Round(time.Millisecond), took.Round(time.Millisecond), pr.failed())
		if gap > 5*time.Second {
			t.Errorf("%s went %v without reaching the hub", pr.from, gap)
		}
	}

	fileAfter, err := os.ReadFile(p.hub.path("/etc/wireguard/wg0.conf"))
	if err != nil {
		t.Fatalf("the found wg-quick file is gone: %v", err)
	}
	if !bytes.Equal(fileBefore, fileAfter) {
		t.Errorf("the found wg-quick file changed:\n%s\n---\n%s", fileBefore, fileAfter)
	}
	if meshName != "wg0" {
		if out, err := runErr(p.hub.nsenter("ip", "link", "show", "wg0")...); err == nil {
			t.Errorf("the found link is still there:\n%s", out)
		}
		waitFor(t, 5*time.Second, "the found wireguard-go exits (its UAPI socket goes)", func() bool {
			_, err := os.Stat(p.hub.path("/run/wireguard/wg0.sock"))
			return os.IsNotExist(err)
		})
	}
	waitFor(t, 5*time.Second, "no wireguard-go process is left on the hub", func() bool {
		return !slices.Contains(p.hub.commands(), "wireguard-go")
	})
	mesh := hub.must(helperReq{Op: "discover", Iface: meshName}).Found
	if mesh.PrivateKey.PublicKey() != p.keys["hub"].PublicKey() || mesh.ListenPort != tunnelPort || mesh.Address() != netip.MustParsePrefix(hubAddr+"/24") {
		t.Errorf("the mesh's interface has key %v port %d address %v; want the found key %v, port %d, %s/24",
			mesh.PrivateKey.PublicKey(), mesh.ListenPort, mesh.Address(), p.keys["hub"].PublicKey(), tunnelPort, hubAddr)
	}
	if len(mesh.Peers) != 2 {
		t.Errorf("the mesh's interface has %d peers, want the 2 found", len(mesh.Peers))
	}
	for _, pe := range mesh.Peers {
		if pe.Keepalive != DefaultKeepalive || !pe.Endpoint.IsValid() {
			t.Errorf("carried peer %v: keepalive %v endpoint %v", pe.PublicKey, pe.Keepalive, pe.Endpoint)
		}
	}
	if s := hub.must(helperReq{Op: "observe", Iface: "wg0", Mesh: meshName}).State; s != MeshUp {
		t.Errorf("after: state %v, want %v", s, MeshUp)
	}
	for _, m := range p.peers {
		if now := m.sh("wg showconf wg0; ip -4 addr show dev wg0; ip route"); now != peerConf[m.name] {
			t.Errorf("%s changed:\n%s\n---\n%s", m.name, peerConf[m.name], now)
		}
	}

	// the mesh's interface gone too: the state where the peers reach nothing is named as such
	hub.must(helperReq{Op: "close"})
	if s := hub.must(helperReq{Op: "observe", Iface: "wg0", Mesh: meshName}).State; s != Dark {
		t.Errorf("with neither interface: state %v, want %v", s, Dark)
	}
	waitFor(t, 5*time.Second, "p1 no longer reaches the hub", func() bool { return !p.peers[0].dial(p.svc(), 200*time.Millisecond) })
}

func TestTakeoverThatCannotPrepareStopsNothing(t *testing.T) {
	p := newPredecessor(t, "p1")
	p.reachAll(t)
	hub := p.hub.helper()
	// the mesh's interface cannot be made under the name of the underlay's link
	resp := hub.call(helperReq{Op: "takeover", Iface: "wg0", Mesh: "eth0"})
	if resp.State != FoundUp || !strings.Contains(resp.Err, "wg0") || !strings.Contains(resp.Err, "eth0") {
		t.Fatalf("takeover: state %v, error %q; want %v and an error naming both interfaces", resp.State, resp.Err, FoundUp)
	}
	if s := hub.must(helperReq{Op: "observe", Iface: "wg0", Mesh: "eth0"}).State; s != FoundUp {
		t.Errorf("state %v, want %v", s, FoundUp)
	}
	p.reachAll(t)
	if f := hub.must(helperReq{Op: "discover", Iface: "wg0"}).Found; f.PrivateKey != p.keys["hub"] || len(f.Peers) != 1 {
		t.Errorf("the found interface was changed: %d peers", len(f.Peers))
	}
}

func TestPeersChangeByDiff(t *testing.T) {
	l := newLab(t)
	hubM := l.machine("hub")
	hubM.serve(svcPort)
	hubKey := mustKey(t)
	names := []string{"p1", "p2", "p3"}
	machines := map[string]*machine{}
	keys := map[string]wgtypes.Key{}
	peers := map[string]Peer{}
	for i, name := range names {
		m := l.machine(name)
		machines[name], keys[name] = m, mustKey(t)
		port := 51900 + i
		m.writeFile("/etc/wireguard/wg0.conf", fmt.Sprintf("[Interface]\nAddress = 10.77.0.%d/24\nListenPort = %d\nPrivateKey = %s\n\n[Peer]\nPublicKey = %s\nAllowedIPs = 10.77.0.0/24\nEndpoint = %s:%d\nPersistentKeepalive = 25\n",
			i+2, port, keys[name], hubKey.PublicKey(), hubM.ip, tunnelPort))
		m.wgQuickUp("wg0")
		peers[name] = Peer{PublicKey: keys[name].PublicKey(), AllowedIPs: []netip.Prefix{netip.MustParsePrefix(fmt.Sprintf("10.77.0.%d/32", i+2))},
			Endpoint: netip.AddrPortFrom(netip.MustParseAddr(m.ip), uint16(port))}
	}
	svc := fmt.Sprintf("%s:%d", hubAddr, svcPort)
	hub := hubM.helper()
	hub.must(helperReq{Op: "raise", Mesh: "mesh0", Key: hubKey, Port: tunnelPort, Addr: hubAddr + "/24", Peers: []Peer{peers["p1"], peers["p2"]}})
	for _, n := range []string{"p1", "p2"} {
		waitFor(t, 10*time.Second, n+" reaches the hub through the mesh's interface", func() bool { return machines[n].dial(svc, 200*time.Millisecond) })
	}
	handshake := func(name string) time.Time {
		for _, s := range hub.must(helperReq{Op: "peers"}).Peers {
			if s.PublicKey == keys[name].PublicKey() {
				return s.LastHandshake
			}
		}
		t.Fatalf("the hub has no peer %s", name)
		return time.Time{}
	}
	p1Handshake := handshake("p1")
	if p1Handshake.IsZero() {
		t.Fatal("p1 has no handshake with the hub")
	}
	pr := startProbe(t, machines["p1"], svc)
	start := time.Now()
	waitFor(t, 5*time.Second, "p1 probes", func() bool { return pr.succeededAfter(start) })

	// add p3
	hub.must(helperReq{Op: "setpeers", Peers: []Peer{peers["p1"], peers["p2"], peers["p3"]}})
	waitFor(t, 10*time.Second, "p3 reaches the hub once added", func() bool { return machines["p3"].dial(svc, 200*time.Millisecond) })
	// remove p2
	hub.must(helperReq{Op: "setpeers", Peers: []Peer{peers["p1"], peers["p3"]}})
	waitFor(t, 10*time.Second, "p2 no longer reaches the hub once removed", func() bool { return !machines["p2"].dial(svc, 200*time.Millisecond) })
	mark := time.Now()
	waitFor(t, 5*time.Second, "p1 probes after the changes", func() bool { return pr.succeededAfter(mark) })
	pr.close()

	if got := handshake("p1"); !got.Equal(p1Handshake) {
		t.Errorf("p1's session was reset by changes to other peers: handshake %v, then %v", p1Handshake, got)
	}
	if n := pr.failed(); n > 0 {
		t.Errorf("p1's probe failed %d times while other peers changed", n)
	}
	t.Logf("p1's longest gap while p3 was added and p2 removed: %v", pr.gap(start).Round(time.Millisecond))
	if n := len(hub.must(helperReq{Op: "peers"}).Peers); n != 2 {
		t.Errorf("the hub has %d peers, want 2", n)
	}
}

func runErr(args ...string) (string, error) {
	out, err := execCommand(args...).CombinedOutput()
	return string(out), err
}
