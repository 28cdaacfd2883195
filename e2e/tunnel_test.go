package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"meshd/api"
	"meshd/fsm"
	"meshd/internal/labtest"
	"meshd/internal/testenv"
	"meshd/lab"
	"meshd/report"
	"meshd/wg"
)

// tunnelShow reads `meshd tunnel show --json` on m; the error is the command's (non-zero in the
// found-down-mesh-not-up state).
func tunnelShow(ctx context.Context, m *lab.Machine) (api.TunnelView, error) {
	var v api.TunnelView
	out, err := meshd(ctx, m, "tunnel", "show", "--json")
	if jerr := json.Unmarshal([]byte(out), &v); jerr != nil && err == nil {
		err = fmt.Errorf("tunnel show --json: %v: %s", jerr, out)
	}
	return v, err
}

// peerState is everything a predecessor peer knows of its tunnel: its wg-quick file and the
// device's configuration (keys, port, the hub's endpoint and allowed IPs), and its address.
func peerState(ctx context.Context, m *lab.Machine) (string, error) {
	conf, err := m.ReadFile(ctx, "/etc/wireguard/"+lab.TunnelIface+".conf")
	if err != nil {
		return "", err
	}
	dev, err := m.Exec(ctx, "wg", "showconf", lab.TunnelIface)
	if err != nil {
		return "", fmt.Errorf("wg showconf on %s: %v %s", m.Name, err, dev)
	}
	addr, err := m.Exec(ctx, "ip", "-4", "-o", "addr", "show", "dev", lab.TunnelIface)
	if err != nil {
		return "", err
	}
	f := strings.Fields(addr)
	return string(conf) + "\n--\n" + dev + "\n--\n" + strings.Join(f[1:4], " "), nil
}

// probesSince checks each peer's probe through the tunnel since t: it kept answering (its longest
// gap is logged, loosely bounded), and its last call succeeded.
func probesSince(t *testing.T, l *lab.Lab, since time.Time, what string, bound time.Duration) {
	t.Helper()
	for _, name := range []string{"peer1-tunnel", "peer2-tunnel"} {
		// the probe's latest calls must have succeeded: wait for the record to show it
		var s lab.ProbeSummary
		if err := testenv.Poll(t, 30*time.Second, func() error {
			// the record covers at least 3 s from since, so a gap would show
			if time.Since(since) < 3*time.Second {
				return fmt.Errorf("%s since %s", time.Since(since), what)
			}
			recent, err := l.Probe(name, time.Now().Add(-time.Second))
			if err != nil {
				return err
			}
			if recent.Calls == 0 || recent.Failures > 0 {
				return fmt.Errorf("%s not answering now: %s", name, recent)
			}
			s, err = l.Probe(name, since)
			return err
		}); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		t.Logf("%s: %s: %d calls, %d failed, longest gap %s", what, name, s.Calls, s.Failures, s.LongestOutage.Round(time.Millisecond))
		if s.LongestOutage > bound {
			t.Errorf("%s: %s was down for %s (want under %s): %s", what, name, s.LongestOutage, bound, s)
		}
	}
}

// heardCarried polls `meshd tunnel show --json` on m until it lists the two lab peers, carried,
// each heard within the last within (and bytes received from it); it fails naming the peer that
// was not.
func heardCarried(ctx context.Context, t *testing.T, m *lab.Machine, within time.Duration) {
	t.Helper()
	var v api.TunnelView
	if err := testenv.Poll(t, 45*time.Second, func() error {
		var err error
		if v, err = tunnelShow(ctx, m); err != nil {
			return err
		}
		if len(v.Peers) != 2 {
			return fmt.Errorf("%d peers, want the two lab peers: %+v", len(v.Peers), v.Peers)
		}
		for _, p := range v.Peers {
			if p.Enrolled || p.LastHeard.IsZero() || time.Since(p.LastHeard) > within || p.ReceiveBytes == 0 {
				return fmt.Errorf("peer %s %s: enrolled %v, last heard %v (%s ago), rx %d bytes", p.Address, p.PublicKey, p.Enrolled, p.LastHeard, time.Since(p.LastHeard).Round(time.Second), p.ReceiveBytes)
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("tunnel show on %s: %v", m.Name, err)
	}
	for _, p := range v.Peers {
		t.Logf("tunnel show on %s: peer %s heard %s ago, rx %d tx %d bytes (report %s)", m.Name, p.Address, time.Since(p.LastHeard).Round(time.Millisecond), p.ReceiveBytes, p.TransmitBytes, v.ReportFrom)
	}
}

// linkIndex is a link's index on m (the same index: the same link, not one raised again).
func linkIndex(ctx context.Context, m *lab.Machine, name string) (string, error) {
	out, err := m.Exec(ctx, "ip", "-o", "link", "show", name)
	if err != nil {
		return "", fmt.Errorf("%s: ip link show %s: %v %s", m.Name, name, err, out)
	}
	idx, _, _ := strings.Cut(out, ":")
	return idx, nil
}

// checkTakenOver: the found interface is gone and its file unchanged, its unit disabled; the
// mesh's interface is up with the found key, port and address.
func checkTakenOver(ctx context.Context, t *testing.T, hub *lab.Machine, foundKey string, confBefore []byte) {
	t.Helper()
	if out, found := foundLink(ctx, hub); found {
		t.Errorf("the found interface is still there: %s", out)
	}
	if now, err := hub.ReadFile(ctx, "/etc/wireguard/"+lab.TunnelIface+".conf"); err != nil || string(now) != string(confBefore) {
		t.Errorf("the found wg-quick file changed: %v\n%s\n---\n%s", err, confBefore, now)
	}
	if _, err := hub.Exec(ctx, "test", "-L", "/etc/systemd/system/multi-user.target.wants/wg-quick@"+lab.TunnelIface+".service"); err == nil {
		t.Error("wg-quick@wg0 is still enabled")
	}
	key, err := hub.Exec(ctx, "wg", "show", lab.TunnelIface, "public-key")
	if err != nil || strings.TrimSpace(key) != foundKey {
		t.Errorf("the mesh's wg0's key %q (%v), want the found %s", strings.TrimSpace(key), err, foundKey)
	}
	port, err := hub.Exec(ctx, "wg", "show", lab.TunnelIface, "listen-port")
	if err != nil || strings.TrimSpace(port) != fmt.Sprint(lab.TunnelPort) {
		t.Errorf("the mesh's wg0's port %q (%v), want %d", strings.TrimSpace(port), err, lab.TunnelPort)
	}
	addr, err := hub.Exec(ctx, "ip", "-4", "-o", "addr", "show", "dev", lab.TunnelIface)
	if err != nil || !strings.Contains(addr, lab.HubTunnelAddr+"/24") {
		t.Errorf("the mesh's wg0's address %q (%v), want %s/24", addr, err, lab.HubTunnelAddr)
	}
	if out, err := hub.Exec(ctx, "ip", "-o", "link", "show", lab.TunnelIface); err != nil || !strings.Contains(out, "UP") {
		t.Errorf("the mesh's wg0 is not up: %v %s", err, out)
	}
}

// ADR 0105's hub that enrolled before: genesis without --take-tunnel (the mesh's tunnel port moved
// aside), then `meshd tunnel take hub wg0` on the running mesh. The hub keeps its identity and
// takes the found tunnel's key as its overlay key, announced in a message signed with that
// identity, which the record checks before the key moves; the peers notice nothing.
func TestTunnelTakeOnARunningMesh(t *testing.T) {
	t.Parallel()
	bin := labtest.Meshd(t)
	l := labtest.Up(t, lab.Predecessor(lab.FirewallUFW))
	ctx := testenv.Context(t, 6*time.Minute)
	hub := l.Machine("hub")
	installMeshd(ctx, t, bin, hub)
	stopPredecessorControl(ctx, t, hub)
	foundKey, err := hub.Exec(ctx, "wg", "show", lab.TunnelIface, "public-key")
	if err != nil {
		t.Fatalf("the predecessor's tunnel: %v %s", err, foundKey)
	}
	foundKey = strings.TrimSpace(foundKey)
	if out, err := meshd(ctx, hub, hubGenesis("--adopted", "--port", "registry=5001", "--port", "tunnel=51821")...); err != nil {
		t.Fatalf("adopted genesis without --take-tunnel: %v\n%s", err, out)
	}
	installAgent(ctx, t, hub, bin)
	node := func() api.NodeView {
		t.Helper()
		var v api.NodeView
		out, err := meshd(ctx, hub, "node", "show", "hub", "--json")
		if err != nil || json.Unmarshal([]byte(out), &v) != nil || v.Node == nil {
			t.Fatalf("node show hub: %v\n%s", err, out)
		}
		return v
	}
	var before api.NodeView
	if err := testenv.Poll(t, 60*time.Second, func() error {
		out, err := meshd(ctx, hub, "node", "show", "hub", "--json")
		if err == nil {
			err = json.Unmarshal([]byte(out), &before)
		}
		return err
	}); err != nil {
		t.Fatalf("the hub's agent never answered: %v", err)
	}

	took := time.Now()
	var taken fsm.TunnelTaken
	if err := meshdJSON(ctx, hub, &taken, "tunnel", "take", "hub", lab.TunnelIface); err != nil {
		t.Fatalf("tunnel take hub wg0 on the running mesh: %v", err)
	}
	if taken.Node == nil || taken.Node.Name != "hub" || taken.Tunnel.Taken != lab.TunnelIface {
		t.Errorf("tunnel take --json: node %v, taken %q; want hub taking %s", taken.Node, taken.Tunnel.Taken, lab.TunnelIface)
	}
	after := node()
	if after.Node.WireGuardKey != foundKey {
		t.Errorf("the hub's overlay key is %q, want the found tunnel's %s", after.Node.WireGuardKey, foundKey)
	}
	if after.Node.PublicKey != before.Node.PublicKey || after.Node.ID != before.Node.ID || after.Node.PublicKey == "" {
		t.Errorf("the hub's identity changed: %s/%s -> %s/%s", before.Node.ID, before.Node.PublicKey, after.Node.ID, after.Node.PublicKey)
	}
	// The take returns once the hub's report says the mesh's interface is up in wg0's place: at
	// once, with no wait, the machine and the report say so.
	if v, err := tunnelShow(ctx, hub); err != nil || v.State != report.TunnelMeshUp {
		t.Fatalf("tunnel take returned before the hub reported %s up in %s's place: %+v %v", lab.TunnelIface, lab.TunnelIface, v, err)
	}
	if key, err := hub.Exec(ctx, "wg", "show", lab.TunnelIface, "public-key"); err != nil || strings.TrimSpace(key) != foundKey {
		t.Fatalf("tunnel take returned; %s's key is %q (%v), want the found tunnel's %s", lab.TunnelIface, key, err, foundKey)
	}
	probesSince(t, l, took.Add(-5*time.Second), "take on a running mesh", 5*time.Second)
	heardCarried(ctx, t, hub, 30*time.Second)
	if out, err := meshd(ctx, hub, "tunnel", "take", "hub", lab.TunnelIface); err == nil {
		t.Errorf("a second take succeeded:\n%s", out)
	}
	if n := node(); n.Node.WireGuardKey != foundKey {
		t.Errorf("a refused second take moved the hub's overlay key to %s", n.Node.WireGuardKey)
	}
}

// wgPeer is one peer of a WireGuard interface as `wg show IFACE dump` has it.
type wgPeer struct {
	Endpoint   string
	AllowedIPs string
	Handshake  int64 // unix seconds, 0: never
	RX, TX     int64
}

// wgDump reads iface's listen port, public key and peers by key on m.
func wgDump(ctx context.Context, m *lab.Machine, iface string) (pub string, port string, peers map[string]wgPeer, err error) {
	out, err := m.Exec(ctx, "wg", "show", iface, "dump")
	if err != nil {
		return "", "", nil, fmt.Errorf("%s: wg show %s dump: %v %s", m.Name, iface, err, out)
	}
	peers = map[string]wgPeer{}
	for i, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Split(line, "\t")
		if i == 0 {
			if len(f) < 3 {
				return "", "", nil, fmt.Errorf("%s: wg show %s dump: %q", m.Name, iface, line)
			}
			pub, port = f[1], f[2]
			continue
		}
		if len(f) < 7 {
			continue
		}
		var p wgPeer
		p.Endpoint, p.AllowedIPs = f[2], f[3]
		fmt.Sscan(f[4], &p.Handshake)
		fmt.Sscan(f[5], &p.RX)
		fmt.Sscan(f[6], &p.TX)
		peers[f[0]] = p
	}
	return pub, port, peers, nil
}

// reachPoll waits until from reaches target (a service through the mesh).
func reachPoll(ctx context.Context, t *testing.T, from *lab.Machine, target string, within time.Duration) {
	t.Helper()
	if err := testenv.Poll(t, within, func() error {
		out, err := from.Reach(ctx, target)
		if err != nil {
			return fmt.Errorf("%s -> %s: %v %s", from.Name, target, err, out)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// meshIface is the name of machine m's mesh interface: meshd0 where meshd raised its own, the
// found wg0 where it took that over (fsm.NodeInterface).
func meshIface(ctx context.Context, m *lab.Machine) string {
	if _, err := m.Exec(ctx, "ip", "link", "show", fsm.MeshInterface); err == nil {
		return fsm.MeshInterface
	}
	return lab.TunnelIface
}

// directPeers waits until a's mesh interface has b's key at b's underlay endpoint with a handshake and
// traffic both ways: their WireGuard session is their own, not the hub's (a relay cannot hold a
// session for two keys that are not its own).
func directPeers(ctx context.Context, t *testing.T, a, b *lab.Machine, bKey, bEndpoint string) {
	t.Helper()
	var last wgPeer
	if err := testenv.Poll(t, 60*time.Second, func() error {
		_, _, peers, err := wgDump(ctx, a, meshIface(ctx, a))
		if err != nil {
			return err
		}
		p, ok := peers[bKey]
		if !ok {
			return fmt.Errorf("%s's mesh interface has no peer %s (%s): %+v", a.Name, b.Name, bKey, peers)
		}
		last = p
		if p.Endpoint != bEndpoint || p.Handshake == 0 || p.RX == 0 || p.TX == 0 {
			return fmt.Errorf("%s's peer %s: %+v, want endpoint %s, a handshake and traffic", a.Name, b.Name, p, bEndpoint)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s -> %s directly: endpoint %s, rx %d tx %d bytes", a.Name, b.Name, last.Endpoint, last.RX, last.TX)
}

// waitMeshUp polls m's `meshd tunnel show` until its state is mesh-up (the mesh's interface up in
// the found one's place), failing with what, the state and its reason when within runs out.
func waitMeshUp(ctx context.Context, t *testing.T, m *lab.Machine, within time.Duration, what string) {
	t.Helper()
	if err := testenv.Poll(t, within, func() error {
		v, err := tunnelShow(ctx, m)
		if err == nil && v.State != report.TunnelMeshUp {
			err = fmt.Errorf("state %q (%s)", v.State, v.Reason)
		}
		return err
	}); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// foundLink says whether m has a wg0 that is not meshd's: the found interface, still there or
// raised again. The mesh's interface took the name (fsm.NodeInterface); meshd's link carries its
// alias (wg.SetAlias).
func foundLink(ctx context.Context, m *lab.Machine) (string, bool) {
	out, err := m.Exec(ctx, "ip", "-d", "link", "show", lab.TunnelIface)
	return out, err == nil && !strings.Contains(out, "alias "+wg.SetAlias)
}
