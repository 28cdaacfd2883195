package e2e

// The whole migration as an operator runs it, in order, on a lab predecessor hub with each found
// firewall (ufw, an nftables ruleset, plain iptables rules): the predecessor's control stopped
// (its stand-in started again later, for the "still writing" check); genesis adopted on the hub
// with the registry's port moved and the tunnel taken; peer1 and peer2 enrolled adopted, keeping
// their addresses, their tunnels taken too; newnode enrolled converged with a fresh address;
// modules assigned and taken one at a time; each node previewed and converged; `meshd status`
// shows every node converged; on the ufw hub, the hub returned to adopted. ADR 0100's "How it is checked" is walked on the way (the refusals
// of genesis, nothing that serves changed, the store unreachable from outside, the openings
// surviving a reload of the found firewall and a reboot, a predecessor still writing caught,
// assigning prepares and taking cuts over, converging previews then changes), and ADR 0105's
// (the tunnel changes hands and the peers notice nothing, a peer keeps its address, a new machine
// gets a fresh one, directly peered with the others; the tunnel's device outlives an agent
// restart; a pushed port reaches every endpoint). Every step is said to the lab (Lab.Step), so the probes' records read back
// per step: failed calls, the longest outage and the step it began in, and whether outside ever
// reached the store or the containers no rule allows (metrics, dashboard: published on ports of
// their own, listening inside on the port of meshd's registry, whose forwarded opening is in force
// from genesis on) — at any probe, in any step, it must not have.

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"meshd/api"
	"meshd/internal/labtest"
	"meshd/internal/testenv"
	"meshd/lab"
	"meshd/report"
	"meshd/setup"
)

func TestMigrationUFW(t *testing.T)      { t.Parallel(); testMigration(t, lab.FirewallUFW) }
func TestMigrationNftables(t *testing.T) { t.Parallel(); testMigration(t, lab.FirewallNftables) }
func TestMigrationIptables(t *testing.T) { t.Parallel(); testMigration(t, lab.FirewallIptables) }

// testMigration walks the migration on one lab; kept in one body because it is one operator's
// sequence, each step starting from the machines the step before left (one lab, raised once).
func testMigration(t *testing.T, fw lab.FirewallKind) {
	bin := labtest.Meshd(t)
	l := labtest.Up(t, lab.Predecessor(fw))
	ctx := testenv.Context(t, 14*time.Minute)
	hub, peer1, peer2, nn, outside := l.Machine("hub"), l.Machine("peer1"), l.Machine("peer2"), l.Machine("newnode"), l.Machine("outside")
	agentLogsOnFailure(t, 6000, hub, peer1, peer2, nn)
	step := func(name string) {
		t.Helper()
		if err := l.Step(name); err != nil {
			t.Fatal(err)
		}
		t.Logf("step: %s", name)
	}
	// The probes per step, logged as a table whatever the outcome; then judged.
	t.Cleanup(func() {
		rows, err := l.StepReport()
		if err != nil {
			t.Errorf("probe figures per step: %v", err)
			return
		}
		var b strings.Builder
		_ = lab.WriteStepTable(&b, rows)
		t.Logf("the probes per step (%s hub):\n%s", fw, b.String())
	})
	installMeshd(ctx, t, bin, hub)
	genesis := hubGenesis()

	step("genesis refused (converged; adopted with the registry's port held)")
	t.Run("genesis converged refuses and names the firewall and the listener", func(t *testing.T) {
		out, err := meshd(ctx, hub, genesis...)
		if err == nil {
			t.Fatalf("converged genesis on a machine in use went ahead:\n%s", out)
		}
		for _, want := range []string{"machine.firewall", string(fw), "machine.listeners", ":8080", "container webapp", "--adopted"} {
			if !strings.Contains(out, want) {
				t.Errorf("refusal does not name %q:\n%s", want, out)
			}
		}
	})
	t.Run("genesis adopted with the registry's port held refuses and names the holder", func(t *testing.T) {
		out, err := meshd(ctx, hub, append(genesis, "--adopted", "--take-tunnel", lab.TunnelIface)...)
		if err == nil {
			t.Fatalf("adopted genesis with port 5000 held went ahead:\n%s", out)
		}
		if !strings.Contains(out, "port.registry.port") || !strings.Contains(out, "container predecessor-registry") {
			t.Fatalf("refusal does not name the registry's holder:\n%s", out)
		}
		if _, err := hub.Exec(ctx, "test", "-e", "/var/lib/meshd/node.json"); err == nil {
			t.Fatal("a refused genesis left a node behind")
		}
		if _, err := hub.Exec(ctx, "ip", "link", "show", lab.TunnelIface); err != nil {
			t.Fatal("a refused genesis touched the found tunnel")
		}
	})

	t.Run("a placement that disagrees with the tunnel is refused with nothing changed", func(t *testing.T) {
		out, err := meshd(ctx, hub, append(genesis, "--adopted", "--port", "registry=5001", "--take-tunnel", lab.TunnelIface, "--port", "tunnel=51821")...)
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

	step("the predecessor's control stopped")
	stopPredecessorControl(ctx, t, hub)
	fileBefore, err := hub.ReadFile(ctx, lab.WebappFile)
	if err != nil {
		t.Fatal(err)
	}
	dumpBefore, err := hub.FirewallDump(ctx)
	if err != nil {
		t.Fatal(err)
	}
	webappBefore, err := hub.Docker(ctx, "inspect", "-f", "{{.Id}}", "webapp")
	if err != nil {
		t.Fatal(err)
	}
	confBefore, err := hub.ReadFile(ctx, "/etc/wireguard/"+lab.TunnelIface+".conf")
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

	step("genesis adopted on hub: the registry on 5001, the tunnel taken")
	took := time.Now()
	out, err := meshd(ctx, hub, append(genesis, "--adopted", "--port", "registry=5001", "--take-tunnel", lab.TunnelIface)...)
	if err != nil {
		t.Fatalf("adopted genesis taking the tunnel: %v\n%s", err, out)
	}
	if !strings.Contains(out, lab.HubTunnelAddr) {
		t.Errorf("genesis does not give the hub the tunnel's address %s:\n%s", lab.HubTunnelAddr, out)
	}
	// The hub serves its status page on loopback: the board's steps are read there too.
	if err := hub.InstallAgent(ctx, bin, append(agentArgs(), "--metrics", pageAddr)...); err != nil {
		t.Fatal(err)
	}
	waitMeshUp(ctx, t, hub, 60*time.Second, "the tunnel never changed hands")
	t.Run("the tunnel changed hands and the peers noticed nothing", func(t *testing.T) {
		probesSince(t, l, took.Add(-5*time.Second), "takeover", 5*time.Second)
		checkTakenOver(ctx, t, hub, foundKey, confBefore)
		for _, p := range []*lab.Machine{peer1, peer2} {
			if now, err := peerState(ctx, p); err != nil || now != peersBefore[p.Name] {
				t.Errorf("%s's tunnel changed: %v\n%s\n---\n%s", p.Name, err, peersBefore[p.Name], now)
			}
		}
	})
	t.Run("tunnel show: the found key, port, address and range, both peers carried and heard", func(t *testing.T) {
		v, err := tunnelShow(ctx, hub)
		if err != nil {
			t.Fatal(err)
		}
		if v.Range != lab.TunnelRange || v.HubAddress != lab.HubTunnelAddr || v.Port != lab.TunnelPort || v.Taken != lab.TunnelIface || len(v.Peers) != 2 {
			t.Errorf("tunnel show: %+v", v)
		}
		heardCarried(ctx, t, hub, 30*time.Second)
	})
	if fw == lab.FirewallUFW {
		// Once, not per firewall: the tunnel's device lives in its own process, not the agent's.
		t.Run("restarting the hub's agent does not interrupt the peers", func(t *testing.T) {
			restartKeepsTunnel(ctx, t, l, hub)
		})
	}
	t.Run("the foundation comes up on the port genesis gave", func(t *testing.T) {
		if err := testenv.Poll(t, 60*time.Second, func() error {
			out, err := nn.Reach(ctx, fmt.Sprintf("http://%s:5001/", lab.HubAddr))
			if err != nil || !strings.Contains(out, "from registry\n") {
				return fmt.Errorf("registry on 5001 from newnode: %v %s", err, out)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		ports, _ := hub.Docker(ctx, "port", "meshd-registry")
		if !strings.Contains(ports, ":5001") || strings.Contains(ports, ":5000") {
			t.Fatalf("meshd-registry publishes %q, want 5001 only", ports)
		}
		if out, err := nn.Reach(ctx, fmt.Sprintf("http://%s:%d/", lab.HubAddr, lab.RegistryPort)); err != nil || !strings.Contains(out, "from predecessor-registry") {
			t.Fatalf("the predecessor's registry on 5000 changed: %v %q", err, out)
		}
	})
	t.Run("the store is unreachable from outside and reachable from the machine", func(t *testing.T) {
		foundationUp(ctx, t, hub, fmt.Sprintf("tcp://127.0.0.1:%d", lab.StorePort))
		outsideRefused(ctx, t, outside, "["+hub.Addr6.String()+"]", lab.StorePort)
	})

	step("assign webapp on hub (prepares: the found container and file held)")
	assignWebapp(ctx, t, hub)
	t.Run("assigning prepares: the found file is held byte for byte, nothing that serves changed", func(t *testing.T) {
		if err := testenv.Poll(t, 20*time.Second, webappHeldUnchanged(ctx, hub)); err != nil {
			t.Fatal(err)
		}
		if after, _ := hub.ReadFile(ctx, lab.WebappFile); string(after) != string(fileBefore) {
			t.Fatalf("a held file changed:\n%s\n---\n%s", fileBefore, after)
		}
		if id, _ := hub.Docker(ctx, "inspect", "-f", "{{.Id}}", "webapp"); id != webappBefore {
			t.Fatalf("the found webapp container was replaced on assign: %s -> %s", webappBefore, id)
		}
		firewallMarkedOnly(ctx, t, hub, dumpBefore)
	})
	t.Run("the board: webapp prepared on the hub, not taken; the hub adopted and its tunnel taken", func(t *testing.T) {
		boardSays(ctx, t, hub, "hub", "", func(_ string, row api.BoardRow) error {
			if !stepDone(row, "tunnel taken") || !stepDone(row, "prepared webapp") || stepDone(row, "taken webapp") || row.AdoptedFor <= 0 {
				return fmt.Errorf("want tunnel taken, webapp prepared and not taken, adopted for a while")
			}
			return nil
		})
	})

	step("the predecessor's control started again (still writing)")
	t.Run("a predecessor still writing is caught, not reverted", func(t *testing.T) {
		// Issue 20: the write is in node show within a second (the file watch), not on the
		// next tick of the 10 s timer. The control writes as soon as it starts, so the second
		// counts from asking it to start; the poll goes on to 20 s only to say how late.
		at := time.Now()
		if err := hub.StartService(ctx, lab.PredecessorControl); err != nil {
			t.Fatal(err)
		}
		changed := func() error {
			rep, err := nodeReport(ctx, hub, "hub")
			if err != nil {
				return err
			}
			if h := heldFile(rep, lab.WebappFile); h == nil || h["changed"] != true || h["reason"] != "changed by something else" {
				return fmt.Errorf("held file not reported changed: %v", h)
			}
			return nil
		}
		for err := changed(); err != nil; err = changed() {
			if time.Since(at) > 20*time.Second {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if took := time.Since(at); took > time.Second {
			t.Fatalf("the predecessor's write was in node show after %v, want within 1s", took.Round(time.Millisecond))
		} else {
			t.Logf("the predecessor's write was in node show after %v", took.Round(time.Millisecond))
		}
		if err := hub.StopService(ctx, lab.PredecessorControl); err != nil {
			t.Fatal(err)
		}
		now, _ := hub.ReadFile(ctx, lab.WebappFile)
		if string(now) == string(fileBefore) || !strings.Contains(string(now), "predecessor") {
			t.Fatalf("the predecessor's write was reverted or lost: %q", now)
		}
		if got, err := meshd(ctx, hub, "node", "original", "hub", lab.WebappFile); err != nil || got != string(fileBefore) {
			t.Fatalf("the recorded original is not what was found: %v\n%q\n%q", err, got, fileBefore)
		}
	})
	t.Run("the board says the held file is in the way; the history has the host event once", func(t *testing.T) {
		boardSays(ctx, t, hub, "hub", "held file "+lab.WebappFile+" (webapp) changed by something else", func(_ string, row api.BoardRow) error {
			if stepDone(row, "taken webapp") {
				return fmt.Errorf("webapp taken already")
			}
			return nil
		})
		historyHas(ctx, t, hub, [2]string{"webapp assigned to hub", "root on hub's socket"},
			[2]string{"held file " + lab.WebappFile + " changed by something else", "(host)"})
		out, _ := meshd(ctx, hub, "history", "hub")
		if n := strings.Count(out, "held file "+lab.WebappFile+" changed by something else"); n != 1 {
			t.Errorf("the standing change is %d events, want 1:\n%s", n, out)
		}
	})

	step("enrol peer1 adopted over its tunnel, its tunnel taken")
	t.Run("peer1 enrols over the tunnel it has and keeps its address", func(t *testing.T) {
		enrolPeer(ctx, t, l, hub, peer1, bin, "10.44.0.2")
	})
	t.Run("tunnel show on the enrolled peer1, with its operator credential, says what the hub says", func(t *testing.T) {
		var v api.TunnelView
		if err := testenv.Poll(t, 60*time.Second, func() error {
			var err error
			if v, err = tunnelShow(ctx, peer1); err != nil {
				return err
			}
			for _, p := range v.Peers {
				switch {
				case p.Address == "10.44.0.3" && (p.Enrolled || time.Since(p.LastHeard) > 30*time.Second || p.ReceiveBytes == 0):
					return fmt.Errorf("peer2 (carried) as peer1 is told: %+v", p)
				case p.Address == "10.44.0.2" && (!p.Enrolled || p.Node != "peer1" || time.Since(p.LastHeard) > 30*time.Second):
					return fmt.Errorf("peer1 (enrolled) as peer1 is told: %+v", p)
				}
			}
			if len(v.Peers) != 2 || v.State != report.TunnelMeshUp || v.ReportAt.IsZero() {
				return fmt.Errorf("tunnel show on peer1: state %q, report at %v, peers %+v", v.State, v.ReportAt, v.Peers)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		t.Logf("tunnel show on peer1: hub's report from %s, %s old", v.ReportFrom, time.Since(v.ReportAt).Round(time.Millisecond))
	})
	t.Run("peer1, on the mesh, reaches peer2, still on the found tunnel, through the hub", func(t *testing.T) {
		reachRiderThroughHub(ctx, t, hub, peer1, peer2, fw)
	})
	step("enrol peer2 adopted over its tunnel, its tunnel taken")
	t.Run("peer2 enrols over the tunnel it has and keeps its address", func(t *testing.T) {
		enrolPeer(ctx, t, l, hub, peer2, bin, "10.44.0.3")
	})

	step("enrol newnode converged (a fresh address)")
	t.Run("newnode enrols converged with a fresh address from the range and reaches the hub over the mesh", func(t *testing.T) {
		installMeshd(ctx, t, bin, nn)
		out, err := meshd(ctx, hub, "token", "create", "--converged", "--json")
		var tv struct{ Token string }
		if err != nil || json.Unmarshal([]byte(out), &tv) != nil || tv.Token == "" {
			t.Fatalf("token create --converged: %v\n%s", err, out)
		}
		out, err = meshdJoin(ctx, nn, tv.Token, "--name", "newnode", "--data-dir", "/var/lib/meshd", "--advertise", lab.NewnodeAddr, "--json")
		var jr setup.JoinResult
		if err != nil || json.Unmarshal([]byte(out), &jr) != nil || jr.Node == nil {
			t.Fatalf("newnode join --converged: %v\n%s", err, out)
		}
		if jr.Node.Address != "10.44.0.4" || jr.Node.Mode != "converged" || jr.Node.WireGuardKey == "" || jr.Node.FoundTunnel != "" {
			t.Fatalf("newnode enrolled %s at %s with overlay key %q (found tunnel %q): want converged at a fresh 10.44.0.4 (.1 hub, .2 .3 the peers') with its own key",
				jr.Node.Mode, jr.Node.Address, jr.Node.WireGuardKey, jr.Node.FoundTunnel)
		}
		if sealed, err := nn.ReadFile(ctx, "/var/lib/meshd/pki/tunnel.key.sealed"); err != nil || len(sealed) == 0 {
			t.Fatalf("newnode's WireGuard key is not sealed in its data dir: %v", err)
		}
		installAgent(ctx, t, nn, bin)
		reachPoll(ctx, t, nn, fmt.Sprintf("http://%s:%d/", lab.HubTunnelAddr, lab.WebappPort), 60*time.Second)
		reachPoll(ctx, t, nn, "tcp://10.44.0.3:7946", 60*time.Second)
		reachPoll(ctx, t, peer2, "tcp://10.44.0.4:7946", 60*time.Second)
		nnKey := jr.Node.WireGuardKey
		if pub, port, _, err := wgDump(ctx, nn, "meshd0"); err != nil || pub != nnKey || port != "51820" {
			t.Fatalf("newnode's meshd0: key %s port %s (%v), want its recorded key %s on 51820", pub, port, err, nnKey)
		}
		directPeers(ctx, t, hub, nn, nnKey, fmt.Sprintf("%s:%d", lab.NewnodeAddr, 51820))
		directPeers(ctx, t, peer2, nn, nnKey, fmt.Sprintf("%s:%d", lab.NewnodeAddr, 51820))
		p2Key, _, _, err := wgDump(ctx, peer2, meshIface(ctx, peer2))
		if err != nil {
			t.Fatal(err)
		}
		directPeers(ctx, t, nn, peer2, p2Key, fmt.Sprintf("%s:%d", lab.Peer2Addr, lab.TunnelPort))
		if fw == lab.FirewallUFW {
			// Once, not per firewall: nothing derived from the address is stale after a push,
			// and a restart keeps the sealed key.
			movedTunnelPortFollows(ctx, t, hub, peer2, nn, nnKey)
		}
	})

	step("take webapp on hub (the cutover: the container swapped)")
	t.Run("taking cuts over: the container is replaced, the file converges, the port stays open", func(t *testing.T) {
		if out, err := meshd(ctx, hub, "module", "take", "hub", "webapp"); err != nil {
			t.Fatalf("take webapp: %v\n%s", err, out)
		}
		if err := testenv.Poll(t, 60*time.Second, func() error {
			id, err := hub.Docker(ctx, "inspect", "-f", "{{.Id}} {{index .Config.Labels \"meshd.module\"}}", "webapp")
			if err != nil || strings.HasPrefix(id, webappBefore) || !strings.Contains(id, "webapp") {
				return fmt.Errorf("webapp not replaced by meshd's: %q %v", id, err)
			}
			if body, err := hub.ReadFile(ctx, lab.WebappFile); err != nil || string(body) != "listen 8080\n" {
				return fmt.Errorf("webapp's file not converged: %q %v", body, err)
			}
			if out, err := nn.Reach(ctx, fmt.Sprintf("http://%s:%d/", lab.HubAddr, lab.WebappPort)); err != nil {
				return fmt.Errorf("the new webapp does not serve from newnode: %v %s", err, out)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if got, err := meshd(ctx, hub, "node", "original", "hub", lab.WebappFile); err != nil || got != string(fileBefore) {
			t.Fatalf("the original is not kept after take: %v %q", err, got)
		}
		probesSince(t, l, time.Now(), "after webapp's take", 5*time.Second)
	})

	step("assign and take notes on peer1 (nothing found: created)")
	t.Run("a module with nothing found is created on assign and taken with nothing to replace", func(t *testing.T) {
		for _, args := range [][]string{{"module", "assign", "peer1", "notes"}, {"module", "take", "peer1", "notes"}} {
			if out, err := meshd(ctx, hub, args...); err != nil {
				t.Fatalf("%v: %v\n%s", args, err, out)
			}
		}
		reachPoll(ctx, t, hub, "http://10.44.0.2:8081/", 90*time.Second)
	})

	step("reload the hub's found firewall, then reboot the hub")
	t.Run("the openings survive a reload of the found firewall and a reboot", func(t *testing.T) {
		// The bus is an incoming opening (meshd's agent listens there); the registry a forwarded
		// one. `nft -f /etc/nftables.conf` begins with flush ruleset and `iptables-restore
		// rules.v4` flushes the filter table, dropping Docker's rules, so until Docker is
		// restarted no published port works: after those reloads the incoming opening is what
		// meshd answers for.
		registry := fmt.Sprintf("http://%s:5001/", lab.HubAddr)
		reload, check := []string{"ufw", "reload"}, registry
		switch fw {
		case lab.FirewallNftables:
			reload, check = []string{"nft", "-f", "/etc/nftables.conf"}, fmt.Sprintf("tcp://%s:7070", lab.HubAddr)
		case lab.FirewallIptables:
			reload, check = []string{"iptables-restore", "/etc/iptables/rules.v4"}, fmt.Sprintf("tcp://%s:7070", lab.HubAddr)
		}
		if _, err := nn.Reach(ctx, check); err != nil {
			t.Fatalf("%s not reachable before the reload: %v", check, err)
		}
		if fw == lab.FirewallIptables {
			// The found rules.v6 allows none of these: the bus (incoming) and the registry
			// (forwarded, over IPv6 through Docker's proxy) answer outside over IPv6 through
			// meshd's ip6tables twins, and the published port no opening declares stays closed
			// over IPv6 as over IPv4.
			hub6 := "[" + hub.Addr6.String() + "]"
			for _, target := range []string{fmt.Sprintf("tcp://%s:7070", hub6), fmt.Sprintf("http://%s:5001/", hub6)} {
				if out, err := outside.Reach(ctx, target); err != nil {
					t.Errorf("outside does not reach %s over IPv6: %v %s", target, err, out)
				}
			}
			outsideRefused(ctx, t, outside, hub6, lab.DeniedPort)
		}
		if out, err := hub.Exec(ctx, reload[0], reload[1:]...); err != nil {
			t.Fatalf("reload: %v %s", err, out)
		}
		reloaded := time.Now()
		if err := testenv.Poll(t, 10*time.Second, func() error { _, err := nn.Reach(ctx, check); return err }); err != nil {
			t.Fatalf("%s did not come back after %s: %v", check, strings.Join(reload, " "), err)
		}
		if took := time.Since(reloaded); took > 2*time.Second+500*time.Millisecond {
			t.Errorf("the opening came back %s after the reload, want within 2 s", took)
		}
		outsideRefused(ctx, t, outside, "["+hub.Addr6.String()+"]", lab.StorePort)
		// The agent, started as systemd starts it, enabled the boot unit that loads the table it
		// keeps. The reboot holds the agent back, so what guards the store once the engine has
		// restarted it is that unit alone (chaos seed 19: without it, outside reached the store
		// until the agent's first pass); then the agent is started.
		if _, err := hub.ReadFile(ctx, "/etc/systemd/system/sysinit.target.wants/meshd-boot.service"); err != nil {
			t.Fatalf("the agent did not enable meshd-boot.service: %v", err)
		}
		if err := hub.DisableService(ctx, "meshd"); err != nil {
			t.Fatal(err)
		}
		if err := hub.Reboot(ctx); err != nil {
			t.Fatal(err)
		}
		if err := testenv.Poll(t, 60*time.Second, func() error {
			out, err := hub.Docker(ctx, "ps", "--filter", fmt.Sprintf("publish=%d", lab.StorePort), "--format", "{{.Names}}")
			if err == nil && strings.TrimSpace(out) == "" {
				err = fmt.Errorf("no running container publishes %d yet", lab.StorePort)
			}
			return err
		}); err != nil {
			t.Fatalf("the engine did not restart the store after the reboot: %v", err)
		}
		outsideRefused(ctx, t, outside, "["+hub.Addr6.String()+"]", lab.StorePort)
		if out, err := hub.Run(ctx, "ln -sf /etc/systemd/system/meshd.service /etc/systemd/system/multi-user.target.wants/meshd.service"); err != nil {
			t.Fatalf("enable meshd again: %v %s", err, out)
		}
		if err := hub.StartService(ctx, "meshd"); err != nil {
			t.Fatal(err)
		}
		if err := testenv.Poll(t, 90*time.Second, func() error {
			if _, err := nn.Reach(ctx, registry); err != nil {
				return err
			}
			_, err := nn.Reach(ctx, fmt.Sprintf("http://%s:%d/", lab.HubAddr, lab.WebappPort))
			return err
		}); err != nil {
			t.Fatalf("after a reboot the mesh's openings are not back: %v", err)
		}
		var out string
		if err := testenv.Poll(t, 60*time.Second, func() error {
			var err error
			out, err = meshd(ctx, hub, "declaration", "hub", "--json")
			return err
		}); err != nil {
			t.Fatalf("the agent did not come back after the reboot: %v", err)
		}
		var decl struct{ Taken []string }
		if err := json.Unmarshal([]byte(out), &decl); err != nil || !slices.Contains(decl.Taken, "webapp") {
			t.Fatalf("the record did not survive the reboot: the first declaration served is\n%s", out)
		}
		waitMeshUp(ctx, t, hub, 60*time.Second, "after the reboot")
		checkTakenOver(ctx, t, hub, foundKey, confBefore)
		outsideRefused(ctx, t, outside, "["+hub.Addr6.String()+"]", lab.StorePort)
		probesSince(t, l, time.Now(), "after the reboot", 5*time.Second)
	})

	step("preview and converge hub")
	t.Run("the board: webapp taken on the hub, the rest for its converge, the preview's closing ports in the way", func(t *testing.T) {
		boardSays(ctx, t, hub, "hub", "will close", func(_ string, row api.BoardRow) error {
			// The foundation's modules (assigned at genesis) are taken by the converge itself.
			if !stepDone(row, "taken webapp") || stepDone(row, "converged") || row.Next == "" {
				return fmt.Errorf("want webapp taken and the converge to come")
			}
			return nil
		})
	})
	t.Run("converging the hub previews, then changes", func(t *testing.T) {
		convergeNode(ctx, t, hub, "hub", func(pv report.ConvergePreview, code int) error {
			if code != 2 || !strings.HasPrefix(verdictOn(pv, "tcp", lab.WebappPort), "declared by webapp") ||
				verdictOn(pv, "tcp", lab.DeniedPort) != report.MarkWillClose {
				return fmt.Errorf("exit %d, 8080 %q, 9090 %q", code, verdictOn(pv, "tcp", lab.WebappPort), verdictOn(pv, "tcp", lab.DeniedPort))
			}
			return nil
		})
		if err := consistent(ctx, hub, fw, "converged"); err != nil {
			t.Fatal(err)
		}
		if err := testenv.Poll(t, 30*time.Second, func() error {
			if _, err := nn.Reach(ctx, fmt.Sprintf("tcp://%s:%d", lab.HubAddr, lab.WebappPort)); err != nil {
				return fmt.Errorf("the declared 8080 does not answer: %v", err)
			}
			if _, err := nn.Reach(ctx, fmt.Sprintf("tcp://%s:%d", lab.HubAddr, lab.DeniedPort)); err == nil {
				return fmt.Errorf("the undeclared 9090 still answers")
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		outsideRefused(ctx, t, outside, "["+hub.Addr6.String()+"]", lab.StorePort)
		probesSince(t, l, time.Now(), "after the hub converged", 5*time.Second)
	})
	for _, p := range []string{"peer1", "peer2"} {
		step("preview and converge " + p)
		t.Run("converging "+p+" keeps its tunnel and the peers' calls", func(t *testing.T) {
			convergeNode(ctx, t, hub, p, nil)
			probesSince(t, l, time.Now(), "after "+p+" converged", 5*time.Second)
		})
	}
	step("meshd status")
	t.Run("meshd status shows every node converged", func(t *testing.T) {
		if err := testenv.Poll(t, 60*time.Second, func() error {
			nodes, err := statusNodes(ctx, hub)
			if err != nil {
				return err
			}
			for _, name := range []string{"hub", "peer1", "peer2", "newnode"} {
				if n, ok := nodes[name]; !ok || n.Mode != "converged" {
					return fmt.Errorf("%s: %+v", name, n)
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		out, _ := meshd(ctx, hub, "status")
		t.Logf("meshd status:\n%s", out)
	})
	t.Run("the board: every node converged, nothing in the way; the history in order with who gave each", func(t *testing.T) {
		for _, name := range []string{"hub", "peer1", "peer2", "newnode"} {
			boardSays(ctx, t, hub, name, "", func(summary string, row api.BoardRow) error {
				if !strings.HasPrefix(summary, "4 of 4 nodes converged; ") || row.Next != "" || row.AdoptedFor != 0 {
					return fmt.Errorf("want every step done: %q", summary)
				}
				return nil
			})
		}
		historyHas(ctx, t, hub, [2]string{"the mesh began on hub (adopted)", ""},
			[2]string{"webapp assigned to hub", "root on hub's socket"},
			[2]string{"peer1 enrolled", ""},
			[2]string{"webapp taken on hub", "root on hub's socket"},
			[2]string{"the converge of hub recorded", "root on hub's socket"},
			[2]string{"mesh taken on hub, by its converge", "root on hub's socket"},
			[2]string{"hub is converged", ""},
			[2]string{"peer2 is converged", ""})
		out, _ := meshd(ctx, hub, "history")
		t.Logf("meshd history:\n%s", out)
	})

	if fw == lab.FirewallUFW {
		// Once, not per firewall: the hub returned to adopted converges its openings through ufw
		// again, whose after.rules hands DOCKER-USER to ufw's route rules (issue 34).
		step("adopt hub again (ufw in force again)")
		t.Run("returned to adopted, the openings answer and the containers no rule allows do not", func(t *testing.T) {
			adoptedAgainOpensNoMore(ctx, t, hub, nn, outside, fw)
		})
	}

	t.Run("the probes per step: the store and the containers no rule allows never reached from outside; the peers' outages short", func(t *testing.T) {
		rows, err := l.StepReport()
		if err != nil {
			t.Fatal(err)
		}
		refused := 0
		for _, r := range rows {
			refused += r.Refused
			breached := r.Breached
			if strings.HasPrefix(r.Step, "reload") {
				// While `ufw reload` reloads the found firewall, its own drop of
				// what no rule allows is briefly not in force (the ufw hub's goes through
				// ufw-after-forward, which ufw's stop empties): metrics and dashboard are then the
				// predecessor's firewall's to keep, not an opening's; the store is meshd's guard's.
				breached = slices.DeleteFunc(slices.Clone(breached), func(p string) bool {
					return p == "outside-metrics" || p == "outside-dashboard"
				})
				if len(breached) < len(r.Breached) {
					t.Logf("step %q: outside reached %s while the found firewall reloaded", r.Step, strings.Join(r.Breached, ", "))
				}
			}
			if len(breached) > 0 {
				t.Errorf("step %q: outside reached what it must not (%s) %d times", r.Step, strings.Join(r.Breached, ", "), r.Breaches)
			}
			// A reload that drops Docker's rules and a reboot are outages by design; every
			// other step holds the peers and the served port to a short gap.
			if !strings.HasPrefix(r.Step, "reload") && r.LongestOutage > 5*time.Second {
				t.Errorf("step %q: %s was down for %s", r.Step, r.OutageProbe, r.LongestOutage)
			}
			if strings.HasPrefix(r.Step, "take webapp") {
				t.Logf("webapp's take: %d failed calls, longest outage %s (%s)", r.Failures, r.LongestOutage.Round(time.Millisecond), r.OutageProbe)
			}
		}
		if refused == 0 {
			t.Error("no call to the store from outside was made: the outside probe is not running")
		}
	})
}
