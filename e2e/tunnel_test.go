package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"meshd/agent"
	"meshd/host"
	"meshd/internal/labtest"
	"meshd/internal/testenv"
	"meshd/lab"
)

// tunnelShow reads `meshd tunnel show --json` on m; the error is the command's (non-zero in the
// found-down-mesh-not-up state).
func tunnelShow(ctx context.Context, m *lab.Machine) (agent.TunnelView, error) {
	var v agent.TunnelView
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

// ADR 0105, "How it is checked", on the lab's predecessor hub: adopted with --take-tunnel, the
// tunnel changes hands and the peers notice nothing.
func TestTunnelTakeoverInPlace(t *testing.T) {
	bin := labtest.Meshd(t)
	l := labtest.Up(t, lab.Predecessor(lab.FirewallUFW))
	ctx := testenv.Context(t, 8*time.Minute)
	hub, peer1, peer2 := l.Machine("hub"), l.Machine("peer1"), l.Machine("peer2")
	installMeshd(ctx, t, bin, hub)
	stopPredecessorControl(ctx, t, hub)
	confPath := "/etc/wireguard/" + lab.TunnelIface + ".conf"
	confBefore, err := hub.ReadFile(ctx, confPath)
	if err != nil {
		t.Fatal(err)
	}
	foundKey, err := hub.Exec(ctx, "wg", "show", lab.TunnelIface, "public-key")
	if err != nil {
		t.Fatalf("the predecessor's tunnel: %v %s", err, foundKey)
	}
	foundKey = strings.TrimSpace(foundKey)
	peersBefore := map[string]string{}
	for _, p := range []*lab.Machine{peer1, peer2} {
		if peersBefore[p.Name], err = peerState(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	genesis := hubGenesis("--adopted", "--port", "registry=5001")

	t.Run("a placement that disagrees with the tunnel is refused with nothing changed", func(t *testing.T) {
		out, err := meshd(ctx, hub, append(genesis, "--take-tunnel", lab.TunnelIface, "--port", "tunnel=51821")...)
		if err == nil || !strings.Contains(out, "51821") || !strings.Contains(out, "51820") {
			t.Fatalf("genesis with --port tunnel=51821 and the tunnel on 51820: %v\n%s", err, out)
		}
		if _, err := hub.Exec(ctx, "test", "-e", "/var/lib/meshd/node.json"); err == nil {
			t.Fatal("a refused genesis left a node behind")
		}
		if _, err := hub.Exec(ctx, "ip", "link", "show", lab.TunnelIface); err != nil {
			t.Fatal("a refused genesis touched the found tunnel")
		}
	})

	out, err := meshd(ctx, hub, append(genesis, "--take-tunnel", lab.TunnelIface)...)
	if err != nil {
		t.Fatalf("adopted genesis taking the tunnel (no --port tunnel=N): %v\n%s", err, out)
	}
	if !strings.Contains(out, lab.HubTunnelAddr) {
		t.Errorf("genesis does not give the hub the tunnel's address %s:\n%s", lab.HubTunnelAddr, out)
	}
	took := time.Now()
	installAgent(ctx, t, hub, bin)
	var v agent.TunnelView
	if err := testenv.Poll(t, 60*time.Second, func() error {
		v, err = tunnelShow(ctx, hub)
		if err == nil && v.State != host.TunnelMeshUp {
			err = fmt.Errorf("state %q (%s)", v.State, v.Reason)
		}
		return err
	}); err != nil {
		t.Fatalf("the tunnel never changed hands: %v", err)
	}

	t.Run("the peers notice nothing: their probes through the tunnel held before, during and after", func(t *testing.T) {
		probesSince(t, l, took.Add(-10*time.Second), "takeover", 5*time.Second)
		for _, p := range []*lab.Machine{peer1, peer2} {
			now, err := peerState(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if now != peersBefore[p.Name] {
				t.Errorf("%s's tunnel changed:\n%s\n---\n%s", p.Name, peersBefore[p.Name], now)
			}
		}
	})
	t.Run("the found interface is down, its file byte for byte; the mesh's is up with the found key, port and address", func(t *testing.T) {
		checkTakenOver(ctx, t, hub, foundKey, confBefore)
		if v.Range != lab.TunnelRange || v.HubAddress != lab.HubTunnelAddr || v.Port != lab.TunnelPort || v.Taken != lab.TunnelIface {
			t.Errorf("tunnel show: %+v", v)
		}
		if len(v.Peers) != 2 {
			t.Fatalf("tunnel show lists %d peers, want the two carried: %+v", len(v.Peers), v.Peers)
		}
	})
	t.Run("tunnel show names both peers carried and heard within the last 30s after a probe through the tunnel", func(t *testing.T) {
		probesSince(t, l, time.Now(), "probe before tunnel show", 5*time.Second)
		heardCarried(ctx, t, hub, 30*time.Second)
	})
	t.Run("a peer enrols and keeps the address the tunnel had for its key", func(t *testing.T) {
		installMeshd(ctx, t, bin, peer2)
		tok := adoptedToken(ctx, t, hub)
		enrolled := time.Now()
		out, err := meshd(ctx, peer2, "join", tok, "--name", "peer2", "--data-dir", "/var/lib/meshd", "--tunnel", lab.TunnelIface, "--json")
		var jr agent.JoinResult
		if err != nil || json.Unmarshal([]byte(out), &jr) != nil || jr.Node == nil {
			t.Fatalf("peer2 join --tunnel wg0: %v\n%s", err, out)
		}
		if jr.Node.Address != "10.44.0.3" {
			t.Fatalf("peer2 enrolled at %s, want the address its tunnel had, 10.44.0.3", jr.Node.Address)
		}
		v, err := tunnelShow(ctx, hub)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range v.Peers {
			if p.Address == "10.44.0.3" && (!p.Enrolled || p.Node != "peer2") {
				t.Errorf("tunnel show after peer2 enrolled: %+v", p)
			}
		}
		now, err := peerState(ctx, peer2)
		if err != nil || now != peersBefore["peer2"] {
			t.Errorf("peer2's tunnel changed by enrolling: %v\n%s\n---\n%s", err, peersBefore["peer2"], now)
		}
		probesSince(t, l, enrolled, "enrolment", 5*time.Second)
	})
	t.Run("tunnel show on the enrolled peer, a client asking a server, says what the hub says", func(t *testing.T) {
		installAgent(ctx, t, peer2, bin)
		var v agent.TunnelView
		if err := testenv.Poll(t, 60*time.Second, func() error {
			var err error
			if v, err = tunnelShow(ctx, peer2); err != nil {
				return err
			}
			for _, p := range v.Peers {
				switch {
				case p.Address == "10.44.0.2" && (p.Enrolled || time.Since(p.LastHeard) > 30*time.Second || p.ReceiveBytes == 0):
					return fmt.Errorf("peer1 (carried) as peer2 is told: %+v", p)
				case p.Address == "10.44.0.3" && (!p.Enrolled || p.Node != "peer2" || time.Since(p.LastHeard) > 30*time.Second):
					return fmt.Errorf("peer2 (enrolled) as peer2 is told: %+v", p)
				}
			}
			if len(v.Peers) != 2 || v.State != host.TunnelMeshUp || v.ReportAt.IsZero() {
				return fmt.Errorf("tunnel show on peer2: state %q, report at %v, peers %+v", v.State, v.ReportAt, v.Peers)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		t.Logf("tunnel show on peer2: hub's report from %s, %s old", v.ReportFrom, time.Since(v.ReportAt).Round(time.Millisecond))
	})
	t.Run("a new machine gets a fresh address from the same range and reaches the hub and the enrolled peer directly", func(t *testing.T) {
		newMachineOnTheMesh(ctx, t, l, bin)
	})
	t.Run("restarting the agent does not interrupt the peers", func(t *testing.T) {
		// The userspace device runs in a process of its own, not in the agent: the same link
		// (same index) serves before and after the agent restarts.
		if out, err := hub.Run(ctx, `pgrep -f "meshd tunnel-device meshd0"`); err != nil {
			t.Fatalf("no device process for meshd0 on the hub: %v %s", err, out)
		}
		linkBefore, err := linkIndex(ctx, hub, "meshd0")
		if err != nil {
			t.Fatal(err)
		}
		restart := time.Now()
		if err := hub.StopService(ctx, "meshd"); err != nil {
			t.Fatal(err)
		}
		if err := hub.StartService(ctx, "meshd"); err != nil {
			t.Fatal(err)
		}
		if err := testenv.Poll(t, 60*time.Second, func() error {
			v, err := tunnelShow(ctx, hub)
			if err == nil && v.State != host.TunnelMeshUp {
				err = fmt.Errorf("state %q", v.State)
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		probesSince(t, l, restart, "agent restart", 5*time.Second)
		if linkAfter, err := linkIndex(ctx, hub, "meshd0"); err != nil || linkAfter != linkBefore {
			t.Errorf("meshd0 was raised again by the restart (ifindex %q -> %q, %v): the peers' tunnel lived in the agent", linkBefore, linkAfter, err)
		}
	})
	t.Run("after a reboot of the hub the mesh's interface is back and the found one is not", func(t *testing.T) {
		if err := hub.Reboot(ctx); err != nil {
			t.Fatal(err)
		}
		booted := time.Now()
		if err := testenv.Poll(t, 90*time.Second, func() error {
			v, err := tunnelShow(ctx, hub)
			if err == nil && v.State != host.TunnelMeshUp {
				err = fmt.Errorf("state %q (%s)", v.State, v.Reason)
			}
			return err
		}); err != nil {
			t.Fatalf("after the reboot: %v", err)
		}
		checkTakenOver(ctx, t, hub, foundKey, confBefore)
		probesSince(t, l, booted, "after the reboot", 90*time.Second)
	})
}

// heardCarried polls `meshd tunnel show --json` on m until it lists the two lab peers, carried,
// each heard within the last within (and bytes received from it); it fails naming the peer that
// was not.
func heardCarried(ctx context.Context, t *testing.T, m *lab.Machine, within time.Duration) {
	t.Helper()
	var v agent.TunnelView
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
	if out, err := hub.Exec(ctx, "ip", "link", "show", lab.TunnelIface); err == nil {
		t.Errorf("the found interface is still there: %s", out)
	}
	if now, err := hub.ReadFile(ctx, "/etc/wireguard/"+lab.TunnelIface+".conf"); err != nil || string(now) != string(confBefore) {
		t.Errorf("the found wg-quick file changed: %v\n%s\n---\n%s", err, confBefore, now)
	}
	if _, err := hub.Exec(ctx, "test", "-L", "/etc/systemd/system/multi-user.target.wants/wg-quick@"+lab.TunnelIface+".service"); err == nil {
		t.Error("wg-quick@wg0 is still enabled")
	}
	key, err := hub.Exec(ctx, "wg", "show", "meshd0", "public-key")
	if err != nil || strings.TrimSpace(key) != foundKey {
		t.Errorf("meshd0's key %q (%v), want the found %s", strings.TrimSpace(key), err, foundKey)
	}
	port, err := hub.Exec(ctx, "wg", "show", "meshd0", "listen-port")
	if err != nil || strings.TrimSpace(port) != fmt.Sprint(lab.TunnelPort) {
		t.Errorf("meshd0's port %q (%v), want %d", strings.TrimSpace(port), err, lab.TunnelPort)
	}
	addr, err := hub.Exec(ctx, "ip", "-4", "-o", "addr", "show", "dev", "meshd0")
	if err != nil || !strings.Contains(addr, lab.HubTunnelAddr+"/24") {
		t.Errorf("meshd0's address %q (%v), want %s/24", addr, err, lab.HubTunnelAddr)
	}
	if out, err := hub.Exec(ctx, "ip", "-o", "link", "show", "meshd0"); err != nil || !strings.Contains(out, "UP") {
		t.Errorf("meshd0 is not up: %v %s", err, out)
	}
}

// ADR 0105's hub that enrolled before: genesis without --take-tunnel (the mesh's tunnel port moved
// aside), then `meshd tunnel take hub wg0` on the running mesh. The hub keeps its identity and
// takes the found tunnel's key as its overlay key, announced in a message signed with that
// identity, which the record checks before the key moves; the peers notice nothing.
func TestTunnelTakeOnARunningMesh(t *testing.T) {
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
	node := func() agent.NodeView {
		t.Helper()
		var v agent.NodeView
		out, err := meshd(ctx, hub, "node", "show", "hub", "--json")
		if err != nil || json.Unmarshal([]byte(out), &v) != nil || v.Node == nil {
			t.Fatalf("node show hub: %v\n%s", err, out)
		}
		return v
	}
	var before agent.NodeView
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
	out, err := meshd(ctx, hub, "tunnel", "take", "hub", lab.TunnelIface, "--json")
	if err != nil {
		t.Fatalf("tunnel take hub wg0 on the running mesh: %v\n%s", err, out)
	}
	after := node()
	if after.Node.WireGuardKey != foundKey {
		t.Errorf("the hub's overlay key is %q, want the found tunnel's %s", after.Node.WireGuardKey, foundKey)
	}
	if after.Node.PublicKey != before.Node.PublicKey || after.Node.ID != before.Node.ID || after.Node.PublicKey == "" {
		t.Errorf("the hub's identity changed: %s/%s -> %s/%s", before.Node.ID, before.Node.PublicKey, after.Node.ID, after.Node.PublicKey)
	}
	if err := testenv.Poll(t, 60*time.Second, func() error {
		v, err := tunnelShow(ctx, hub)
		if err == nil && v.State != host.TunnelMeshUp {
			err = fmt.Errorf("state %q (%s)", v.State, v.Reason)
		}
		return err
	}); err != nil {
		t.Fatalf("the tunnel never changed hands: %v", err)
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

// directPeers waits until a's meshd0 has b's key at b's underlay endpoint with a handshake and
// traffic both ways: their WireGuard session is their own, not the hub's (a relay cannot hold a
// session for two keys that are not its own).
func directPeers(ctx context.Context, t *testing.T, a, b *lab.Machine, bKey, bEndpoint string) {
	t.Helper()
	var last wgPeer
	if err := testenv.Poll(t, 60*time.Second, func() error {
		_, _, peers, err := wgDump(ctx, a, "meshd0")
		if err != nil {
			return err
		}
		p, ok := peers[bKey]
		if !ok {
			return fmt.Errorf("%s's meshd0 has no peer %s (%s): %+v", a.Name, b.Name, bKey, peers)
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

// newMachineOnTheMesh: after the hub took the tunnel over and peer2 enrolled over it keeping its
// address, newnode (no found tunnel) joins with its own key and a fresh address and reaches the
// hub over the mesh; peer2's found tunnel is then taken over, and peer2 and newnode reach each
// other directly, not through the hub. A push that moves newnode's tunnel port reaches every
// endpoint (nothing keeps the old one), and a restart of newnode's agent keeps its key.
func newMachineOnTheMesh(ctx context.Context, t *testing.T, l *lab.Lab, bin string) {
	hub, peer2, nn := l.Machine("hub"), l.Machine("peer2"), l.Machine("newnode")
	agentLogsOnFailure(t, 6000, hub, peer2, nn)
	nnKey := joinNewMachine(ctx, t, hub, nn, bin)
	reachCarriedThroughHub(ctx, t, l, hub, nn)
	p2Key := takeSpokeTunnel(ctx, t, l, hub, peer2, bin)

	// peer2 and newnode reach each other over the mesh, directly.
	reachPoll(ctx, t, nn, "tcp://10.44.0.3:7946", 60*time.Second)
	reachPoll(ctx, t, peer2, "tcp://10.44.0.4:7946", 60*time.Second)
	directPeers(ctx, t, peer2, nn, nnKey, fmt.Sprintf("%s:%d", lab.NewnodeAddr, 51820))
	directPeers(ctx, t, nn, peer2, p2Key, fmt.Sprintf("%s:%d", lab.Peer2Addr, lab.TunnelPort))

	// Nothing derived from the address is stale after a push: newnode's tunnel port moves, and
	// its device, the hub's and peer2's endpoints for it all follow; it still reaches both.
	if out, err := meshd(ctx, hub, "node", "set", "newnode", "mesh.tunnel=51830"); err != nil {
		t.Fatalf("node set newnode mesh.tunnel=51830: %v\n%s", err, out)
	}
	if err := testenv.Poll(t, 60*time.Second, func() error {
		if _, port, _, err := wgDump(ctx, nn, "meshd0"); err != nil || port != "51830" {
			return fmt.Errorf("newnode's meshd0 listens on %s (%v), want 51830", port, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	directPeers(ctx, t, hub, nn, nnKey, fmt.Sprintf("%s:%d", lab.NewnodeAddr, 51830))
	directPeers(ctx, t, peer2, nn, nnKey, fmt.Sprintf("%s:%d", lab.NewnodeAddr, 51830))
	reachPoll(ctx, t, nn, fmt.Sprintf("http://%s:%d/", lab.HubTunnelAddr, lab.WebappPort), 60*time.Second)
	reachPoll(ctx, t, nn, "tcp://10.44.0.3:7946", 60*time.Second)

	// A restart reuses the sealed key: the same public key, no new enrolment.
	if err := nn.StopService(ctx, "meshd"); err != nil {
		t.Fatal(err)
	}
	if err := nn.StartService(ctx, "meshd"); err != nil {
		t.Fatal(err)
	}
	reachPoll(ctx, t, nn, fmt.Sprintf("http://%s:%d/", lab.HubTunnelAddr, lab.WebappPort), 60*time.Second)
	if pub, _, _, err := wgDump(ctx, nn, "meshd0"); err != nil || pub != nnKey {
		t.Fatalf("after newnode's agent restarted its meshd0 has key %s (%v), want the same %s", pub, err, nnKey)
	}
}

// reachCarriedThroughHub: newnode, on the mesh, reaches a service on peer1, which has not
// enrolled and rides the predecessor's tunnel (a carried peer), through the hub: in on meshd0 and
// out on it again, which ufw's "deny routed" dropped until the hub's one routed rule, at the head
// of FORWARD, let the range's addresses through; the forward policy stays drop.
func reachCarriedThroughHub(ctx context.Context, t *testing.T, l *lab.Lab, hub, nn *lab.Machine) {
	t.Helper()
	peer1 := l.Machine("peer1")
	if out, err := peer1.Docker(ctx, "run", "-d", "--name", "spoke-svc", "-p", "8081:8080", "lab/echo:1"); err != nil {
		t.Fatalf("a service on peer1: %v %s", err, out)
	}
	reachPoll(ctx, t, nn, "http://10.44.0.2:8081/", 60*time.Second)
	fwd, err := hub.Exec(ctx, "iptables", "-S", "FORWARD")
	if err != nil {
		t.Fatalf("iptables -S FORWARD on the hub: %v %s", err, fwd)
	}
	rule := fmt.Sprintf(`-A FORWARD -s %s -d %s -i meshd0 -o meshd0 -m comment --comment "%s" -j ACCEPT`, lab.TunnelRange, lab.TunnelRange, routedMark)
	if strings.Count(fwd, routedMark) != 1 || !strings.Contains(fwd, rule) || !strings.Contains(fwd, "-P FORWARD DROP") {
		t.Errorf("the hub's FORWARD, want its DROP policy and one routed rule, %s:\n%s", rule, fwd)
	}
}

// joinNewMachine joins nn with no found tunnel: it makes its own WireGuard key (only the public
// key is sent; the private one is sealed), gets a fresh address of the taken range, raises
// meshd0 with them and reaches the hub's service over it, peered directly with the hub. It
// returns nn's recorded overlay key.
func joinNewMachine(ctx context.Context, t *testing.T, hub, nn *lab.Machine, bin string) string {
	t.Helper()
	installMeshd(ctx, t, bin, nn)
	out, err := meshd(ctx, nn, "join", adoptedToken(ctx, t, hub), "--name", "newnode", "--data-dir", "/var/lib/meshd",
		"--advertise", lab.NewnodeAddr, "--json")
	var jr agent.JoinResult
	if err != nil || json.Unmarshal([]byte(out), &jr) != nil || jr.Node == nil {
		t.Fatalf("newnode join: %v\n%s", err, out)
	}
	if jr.Node.Address != "10.44.0.4" || jr.Node.WireGuardKey == "" || jr.Node.FoundTunnel != "" {
		t.Fatalf("newnode enrolled at %s with overlay key %q: want a fresh 10.44.0.4 (.1 hub, .2 .3 the tunnel's) and its own key",
			jr.Node.Address, jr.Node.WireGuardKey)
	}
	nnKey := jr.Node.WireGuardKey
	if sealed, err := nn.ReadFile(ctx, "/var/lib/meshd/pki/tunnel.key.sealed"); err != nil || len(sealed) == 0 {
		t.Fatalf("newnode's WireGuard key is not sealed in its data dir: %v", err)
	}
	installAgent(ctx, t, nn, bin)
	reachPoll(ctx, t, nn, fmt.Sprintf("http://%s:%d/", lab.HubTunnelAddr, lab.WebappPort), 60*time.Second)
	pub, port, _, err := wgDump(ctx, nn, "meshd0")
	if err != nil || pub != nnKey || port != "51820" {
		t.Fatalf("newnode's meshd0: key %s port %s (%v), want its recorded key %s on 51820", pub, port, err, nnKey)
	}
	if addr, err := nn.Exec(ctx, "ip", "-4", "-o", "addr", "show", "dev", "meshd0"); err != nil || !strings.Contains(addr, "10.44.0.4/24") {
		t.Fatalf("newnode's meshd0 address: %v %s", err, addr)
	}
	directPeers(ctx, t, hub, nn, nnKey, fmt.Sprintf("%s:%d", lab.NewnodeAddr, 51820))
	return nnKey
}

// takeSpokeTunnel starts peer2's agent and takes its found tunnel over from the hub (the record
// holds its key and address already): meshd0 comes up in wg0's place with the found key and
// address, and the peers' probes through the tunnel hold. It returns peer2's key.
func takeSpokeTunnel(ctx context.Context, t *testing.T, l *lab.Lab, hub, peer2 *lab.Machine, bin string) string {
	t.Helper()
	installAgent(ctx, t, peer2, bin)
	p2Key, err := peer2.Exec(ctx, "wg", "show", lab.TunnelIface, "public-key")
	if err != nil {
		t.Fatalf("peer2's found tunnel: %v %s", err, p2Key)
	}
	p2Key = strings.TrimSpace(p2Key)
	taken := time.Now()
	if out, err := meshd(ctx, hub, "tunnel", "take", "peer2", lab.TunnelIface); err != nil {
		t.Fatalf("tunnel take peer2 wg0: %v\n%s", err, out)
	}
	if err := testenv.Poll(t, 60*time.Second, func() error {
		pub, _, _, err := wgDump(ctx, peer2, "meshd0")
		if err == nil && pub != p2Key {
			err = fmt.Errorf("peer2's meshd0 has key %s, want its found %s", pub, p2Key)
		}
		if err == nil {
			if out, lerr := peer2.Exec(ctx, "ip", "link", "show", lab.TunnelIface); lerr == nil {
				err = fmt.Errorf("peer2's found interface is still there: %s", out)
			}
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	probesSince(t, l, taken, "peer2's takeover", 5*time.Second)
	if addr, err := peer2.Exec(ctx, "ip", "-4", "-o", "addr", "show", "dev", "meshd0"); err != nil || !strings.Contains(addr, "10.44.0.3/24") {
		t.Fatalf("peer2's meshd0 address: %v %s", err, addr)
	}
	return p2Key
}
