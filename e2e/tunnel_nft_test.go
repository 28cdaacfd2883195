package e2e

import (
	"context"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"meshd/api"
	"meshd/internal/labtest"
	"meshd/internal/testenv"
	"meshd/lab"
	"meshd/pki"
	"meshd/report"
	"meshd/setup"
)

// routedMark is the mark of the hub's one forwarding rule (netfilter.RoutedOpening("mesh")).
const routedMark = "meshd:mesh:routed:all/0:private"

// ADR 0105 on the lab's nftables hub, one lab for all of it: the tunnel changes hands in place
// (the peers' longest gap logged); a spoke that enrolled and still rides its found tunnel is
// reached from a node of the mesh through the hub, and nothing else is forwarded; a forged key
// announcement posted over the bus with an enrolled machine's certificate moves no key; and
// converging the spoke takes its found tunnel over.
func TestTunnelOnAnNftablesHub(t *testing.T) {
	t.Parallel()
	bin := labtest.Meshd(t)
	l := labtest.Up(t, lab.Predecessor(lab.FirewallNftables))
	ctx := testenv.Context(t, 9*time.Minute)
	hub, peer1, nn := l.Machine("hub"), l.Machine("peer1"), l.Machine("newnode")
	agentLogsOnFailure(t, 6000, hub, peer1, nn)
	installMeshd(ctx, t, bin, hub)
	stopPredecessorControl(ctx, t, hub)
	confBefore, err := hub.ReadFile(ctx, "/etc/wireguard/"+lab.TunnelIface+".conf")
	if err != nil {
		t.Fatal(err)
	}
	foundKey, err := hub.Exec(ctx, "wg", "show", lab.TunnelIface, "public-key")
	if err != nil {
		t.Fatalf("the predecessor's tunnel: %v %s", err, foundKey)
	}
	foundKey = strings.TrimSpace(foundKey)
	if out, err := meshd(ctx, hub, hubGenesis("--adopted", "--port", "registry=5001", "--take-tunnel", lab.TunnelIface)...); err != nil {
		t.Fatalf("adopted genesis taking the tunnel on the nftables hub: %v\n%s", err, out)
	}
	took := time.Now()
	installAgent(ctx, t, hub, bin)
	waitMeshUp(ctx, t, hub, 60*time.Second, "the tunnel never changed hands")

	t.Run("the tunnel changes hands in place: the peers' probes hold (longest gap reported), the found interface down with its file byte for byte, meshd0 up with its key, port and address", func(t *testing.T) {
		// The figure ADR 0105 asks under 1 s is logged; the bound is the ufw test's: one call
		// lost in the switch already reads as the probe's 1 s timeout on a loaded machine.
		probesSince(t, l, took.Add(-10*time.Second), "takeover on the nftables hub", 5*time.Second)
		checkTakenOver(ctx, t, hub, foundKey, confBefore)
	})

	var p1Key string
	t.Run("a spoke on its found tunnel is reached from a node of the mesh through the hub, and nothing else is forwarded", func(t *testing.T) {
		p1Key = enrolOnFoundTunnel(ctx, t, hub, peer1, bin)
		nnKey := joinNewMachine(ctx, t, hub, nn, bin)
		// peer1's agent serves gossip on every address, its found tunnel's 10.44.0.2 included.
		reachPoll(ctx, t, nn, "tcp://10.44.0.2:7946", 60*time.Second)
		if _, _, peers, err := wgDump(ctx, nn, "meshd0"); err != nil {
			t.Fatal(err)
		} else if _, direct := peers[p1Key]; direct {
			t.Fatalf("newnode peers peer1 directly (%+v): the path under test is the hub's", peers[p1Key])
		}
		if _, _, peers, err := wgDump(ctx, peer1, lab.TunnelIface); err != nil || len(peers) != 1 {
			t.Fatalf("peer1's found tunnel changed: %v %+v", err, peers)
		} else if _, ok := peers[nnKey]; ok {
			t.Fatal("peer1's found tunnel peers newnode")
		}
		chain, err := hub.Exec(ctx, "nft", "list", "chain", "inet", "filter", "forward")
		if err != nil {
			t.Fatalf("nft list chain inet filter forward: %v %s", err, chain)
		}
		rule := fmt.Sprintf(`iifname "wg0" oifname "wg0" ip saddr %s ip daddr %s accept comment "%s"`, lab.TunnelRange, lab.TunnelRange, routedMark)
		if strings.Count(chain, routedMark) != 1 || !strings.Contains(chain, rule) || !strings.Contains(chain, "policy drop") {
			t.Errorf("the hub's found forward chain, want its drop policy and one routed rule, %s:\n%s", rule, chain)
		}
		// Nothing else turns at the hub: the outside machine, routed to the range through the
		// hub's underlay address, does not reach peer1 (the rule is meshd0 in, meshd0 out).
		outside := l.Machine("outside")
		if out, err := outside.Exec(ctx, "ip", "route", "replace", lab.TunnelRange, "via", lab.HubAddr); err != nil {
			t.Fatalf("outside: ip route: %v %s", err, out)
		}
		if out, err := outside.Reach(ctx, "tcp://10.44.0.2:7946"); err == nil {
			t.Errorf("the outside machine reaches peer1's tunnel address through the hub: %s", out)
		}
		_, _ = outside.Exec(ctx, "ip", "route", "del", lab.TunnelRange)
	})

	t.Run("a forged key announcement posted over the bus with an enrolled machine's certificate moves no key", func(t *testing.T) {
		forgedAnnouncements(ctx, t, l, hub, nn)
	})

	t.Run("converging the spoke takes its found tunnel over as tunnel take does", func(t *testing.T) {
		if p1Key == "" {
			t.Skip("peer1 did not enrol")
		}
		p1Conf, err := peer1.ReadFile(ctx, "/etc/wireguard/"+lab.TunnelIface+".conf")
		if err != nil {
			t.Fatal(err)
		}
		pv, _, err := convergePreviewOf(ctx, hub, "peer1")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(pv.Tunnel, lab.TunnelIface+" taken over by the mesh's interface of the same name") || !strings.Contains(pv.Tunnel, p1Key) {
			t.Errorf("the preview of converging peer1 does not say its found tunnel is taken over: %q", pv.Tunnel)
		}
		converged := time.Now()
		if out, err := meshd(ctx, hub, "converge", "peer1", "--plan", pv.Token, "--wait", "2m"); err != nil {
			t.Fatalf("converge peer1: %v\n%s", err, out)
		}
		if err := testenv.Poll(t, 60*time.Second, func() error {
			pub, _, _, err := wgDump(ctx, peer1, lab.TunnelIface)
			if err == nil && pub != p1Key {
				err = fmt.Errorf("peer1's meshd0 has key %s, want its found %s", pub, p1Key)
			}
			if err == nil {
				if out, found := foundLink(ctx, peer1); found {
					err = fmt.Errorf("peer1's found interface is still there: %s", out)
				}
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if addr, err := peer1.Exec(ctx, "ip", "-4", "-o", "addr", "show", "dev", lab.TunnelIface); err != nil || !strings.Contains(addr, "10.44.0.2/24") {
			t.Errorf("peer1's meshd0 address: %v %s", err, addr)
		}
		if now, err := peer1.ReadFile(ctx, "/etc/wireguard/"+lab.TunnelIface+".conf"); err != nil || string(now) != string(p1Conf) {
			t.Errorf("peer1's wg-quick file changed: %v", err)
		}
		var nv api.NodeView
		out, err := meshd(ctx, hub, "node", "show", "peer1", "--json")
		if err != nil || json.Unmarshal([]byte(out), &nv) != nil || nv.Node == nil || !nv.Node.TookTunnel {
			t.Errorf("node show peer1 after converge: want took_tunnel: %v\n%s", err, out)
		}
		probesSince(t, l, converged, "peer1 converged", 5*time.Second)
		nnKey, _, _, err := wgDump(ctx, nn, "meshd0")
		if err != nil {
			t.Fatal(err)
		}
		directPeers(ctx, t, peer1, nn, nnKey, fmt.Sprintf("%s:%d", lab.NewnodeAddr, 51820))
		reachPoll(ctx, t, nn, "tcp://10.44.0.2:7946", 60*time.Second)
	})
}

// enrolOnFoundTunnel joins m presenting its found tunnel (it keeps its address and its tunnel
// keeps carrying its traffic) and starts its agent; it returns m's found key.
func enrolOnFoundTunnel(ctx context.Context, t *testing.T, hub, m *lab.Machine, bin string) string {
	t.Helper()
	installMeshd(ctx, t, bin, m)
	out, err := meshdJoin(ctx, m, adoptedToken(ctx, t, hub), "--name", m.Name, "--data-dir", "/var/lib/meshd",
		"--tunnel", lab.TunnelIface, "--advertise", m.Addr.String(), "--json")
	var jr setup.JoinResult
	if err != nil || json.Unmarshal([]byte(out), &jr) != nil || jr.Node == nil {
		t.Fatalf("%s join --tunnel %s: %v\n%s", m.Name, lab.TunnelIface, err, out)
	}
	if jr.Node.Address != m.TunnelAddr.String() {
		t.Fatalf("%s enrolled at %s, want its tunnel's %s", m.Name, jr.Node.Address, m.TunnelAddr)
	}
	installAgent(ctx, t, m, bin)
	return jr.Node.WireGuardKey
}

// convergePreviewOf reads `meshd converge NODE --preview --json` on m.
func convergePreviewOf(ctx context.Context, m *lab.Machine, node string) (report.ConvergePreview, string, error) {
	var pv report.ConvergePreview
	out, err := meshd(ctx, m, "converge", node, "--preview", "--json")
	if jerr := json.Unmarshal([]byte(out), &pv); jerr != nil {
		return pv, out, fmt.Errorf("converge %s --preview --json: %v %v: %s", node, err, jerr, out)
	}
	return pv, out, nil
}

// forgedAnnouncements is an attacker holding an enrolled machine (attacker, its certificate and
// identity key unsealed from its own disk) posting, over the hub's bus, what would move a key
// if anything took it: a tunnel take for the hub carrying an announcement of a key of the
// attacker's, signed by the attacker's identity; the same unsigned, for the attacker's own
// node; and a host report in the hub's name. Each is refused, and no key moved: the record's
// overlay keys, the hub's meshd0 and `tunnel show` are as before, and the peers still reach
// the hub.
func forgedAnnouncements(ctx context.Context, t *testing.T, l *lab.Lab, hub, attacker *lab.Machine) {
	t.Helper()
	keysOf := func() map[string]string {
		t.Helper()
		var s api.TunnelView
		s, err := tunnelShow(ctx, hub)
		if err != nil {
			t.Fatal(err)
		}
		keys := map[string]string{"state": s.State}
		for _, p := range s.Peers {
			keys[p.Address] = p.PublicKey
		}
		for _, n := range []string{"hub", attacker.Name} {
			var nv api.NodeView
			out, err := meshd(ctx, hub, "node", "show", n, "--json")
			if err != nil || json.Unmarshal([]byte(out), &nv) != nil || nv.Node == nil {
				t.Fatalf("node show %s: %v\n%s", n, err, out)
			}
			keys["node "+n] = nv.Node.WireGuardKey
		}
		pub, _, _, err := wgDump(ctx, hub, lab.TunnelIface)
		if err != nil {
			t.Fatal(err)
		}
		keys["hub meshd0"] = pub
		return keys
	}
	before := keysOf()

	// The attacker's credentials, as root on its machine has them.
	sec := machineSecrets(ctx, t, attacker)
	der, err := x509.MarshalPKCS8PrivateKey(sec.NodeKey)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	if err := attacker.WriteFile(ctx, "/tmp/forger.key", keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := attacker.WriteFile(ctx, "/tmp/forger.crt", sec.NodeCertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	mine, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	forged := mine.PublicKey().String()
	post := func(path string, body any) (int, string) {
		t.Helper()
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		out, err := attacker.Exec(ctx, "curl", "-sS", "-k", "--max-time", "5", "--noproxy", "*",
			"--cert", "/tmp/forger.crt", "--key", "/tmp/forger.key", "-H", "Content-Type: application/json",
			"-o", "/dev/stderr", "-w", "%{http_code}", "--data-binary", string(b),
			fmt.Sprintf("https://%s:7070%s", lab.HubAddr, path))
		code := 0
		if i := strings.LastIndex(out, "\n"); i >= 0 {
			fmt.Sscan(out[i+1:], &code)
		} else {
			fmt.Sscan(out, &code)
		}
		if err != nil && code == 0 {
			t.Fatalf("curl %s from %s: %v\n%s", path, attacker.Name, err, out)
		}
		return code, out
	}
	type take struct {
		Node         string               `json:"node"`
		Interface    string               `json:"interface"`
		PublicKey    string               `json:"public_key"`
		Announcement *pki.KeyAnnouncement `json:"announcement"`
	}
	signedByAttacker := pki.AnnounceKey(ed25519.PrivateKey(sec.NodeKey), "hub", before["node hub"], forged)
	unsigned := &pki.KeyAnnouncement{Node: attacker.Name, Previous: before["node "+attacker.Name], Key: forged}
	for _, c := range []struct {
		what, path string
		body       any
	}{
		{"a take of the hub's tunnel announcing a key of the attacker's, signed by the attacker's identity", "/v1/op/v1/tunnel/take",
			take{Node: "hub", Interface: lab.TunnelIface, PublicKey: forged, Announcement: signedByAttacker}},
		{"the same through the hub's interface", "/v1/op/v1/tunnel/take",
			take{Node: "hub", Interface: "meshd0", PublicKey: forged, Announcement: signedByAttacker}},
		{"an unsigned announcement moving the attacker's own key", "/v1/op/v1/tunnel/take",
			take{Node: attacker.Name, Interface: "meshd0", PublicKey: forged, Announcement: unsigned}},
		{"a host report in the hub's name", "/v1/report",
			map[string]any{"node": "hub", "kinds": map[string]any{"tunnel": map[string]any{"state": report.TunnelMeshUp, "public_key": forged}}}},
	} {
		code, out := post(c.path, c.body)
		t.Logf("%s: HTTP %d %s", c.what, code, strings.TrimSpace(tail(out, 300)))
		if code < 400 {
			t.Errorf("%s: accepted (HTTP %d)", c.what, code)
		}
	}
	// Give a wrongly accepted change time to show, then compare.
	if err := testenv.Poll(t, 10*time.Second, func() error {
		after := keysOf()
		for k, v := range before {
			if after[k] != v {
				return fmt.Errorf("%s moved: %s -> %s", k, v, after[k])
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	probesSince(t, l, time.Now(), "after the forged announcements", 5*time.Second)
}

// joinNewMachine joins nn with no found tunnel: it makes its own WireGuard key (only the public
// key is sent; the private one is sealed), gets a fresh address of the taken range, raises
// meshd0 with them and reaches the hub's service over it, peered directly with the hub. It
// returns nn's recorded overlay key.
func joinNewMachine(ctx context.Context, t *testing.T, hub, nn *lab.Machine, bin string) string {
	t.Helper()
	installMeshd(ctx, t, bin, nn)
	out, err := meshdJoin(ctx, nn, adoptedToken(ctx, t, hub), "--name", "newnode", "--data-dir", "/var/lib/meshd",
		"--advertise", lab.NewnodeAddr, "--json")
	var jr setup.JoinResult
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
