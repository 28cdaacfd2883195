package lab_test

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"meshd/internal/labtest"
	"meshd/internal/testenv"
	"meshd/lab"
	"meshd/packaging"
)

// allowedPorts are the hub's ports the predecessor's firewall allows from anywhere.
var allowedPorts = []int{22, lab.WebappPort, lab.RegistryPort}

func TestPredecessorUFW(t *testing.T)      { testPredecessor(t, lab.FirewallUFW) }
func TestPredecessorNftables(t *testing.T) { testPredecessor(t, lab.FirewallNftables) }
func TestPredecessorIptables(t *testing.T) { testPredecessor(t, lab.FirewallIptables) }

// The predecessor's hub as a systemd machine (issue 28): booted by real systemd under nspawn,
// its firewall, Docker engine and the predecessor's units systemd's own, it passes every check
// the namespace hub does, its reboot (the walk's "a reboot brings the predecessor's state
// back") a real `systemctl reboot`.
func TestPredecessorUFWOnASystemdHub(t *testing.T) {
	sc, err := lab.Predecessor(lab.FirewallUFW).WithSystemd("hub")
	if err != nil {
		t.Fatal(err)
	}
	l := testPredecessorOf(t, lab.FirewallUFW, sc)
	hub := l.Machine("hub")
	ctx := testenv.Context(t, 4*time.Minute)
	if out, err := hub.Exec(ctx, "systemctl", "is-system-running"); err != nil || strings.TrimSpace(out) != "running" {
		t.Fatalf("the hub's systemd: %q, %v", out, err)
	}
	pid1, _ := hub.Exec(ctx, "sh", "-c", "cat /proc/1/comm")
	if strings.TrimSpace(pid1) != "systemd" {
		t.Errorf("the hub's PID 1 is %q, not systemd", pid1)
	}
}

func testPredecessor(t *testing.T, fw lab.FirewallKind) {
	testPredecessorOf(t, fw, lab.Predecessor(fw))
}

func testPredecessorOf(t *testing.T, fw lab.FirewallKind, sc lab.Scenario) *lab.Lab {
	began := time.Now()
	l := labtest.Up(t, sc)
	if took := time.Since(began); took > time.Minute {
		t.Errorf("lab came up in %s, want under a minute", took)
	}
	t.Logf("lab %s (%s) up in %s", l.Name, l.Scenario, time.Since(began).Round(time.Millisecond))
	ctx := testenv.Context(t, 4*time.Minute)
	hub, newnode, outside := l.Machine("hub"), l.Machine("newnode"), l.Machine("outside")

	t.Run("the found firewall is active and of its kind", func(t *testing.T) {
		kind, err := hub.FirewallKind(ctx)
		if err != nil || kind != fw {
			t.Fatalf("hub firewall kind = %q, %v; want %q", kind, err, fw)
		}
		dump, err := hub.FirewallDump(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"8080", "5000", "51820"} {
			if !strings.Contains(dump, want) {
				t.Errorf("firewall dump has no rule for %s:\n%s", want, dump)
			}
		}
		if fw == lab.FirewallNftables {
			conf, err := hub.ReadFile(ctx, "/etc/nftables.conf")
			if err != nil || !strings.Contains(string(conf), "\nflush ruleset\n") {
				t.Errorf("/etc/nftables.conf does not flush the ruleset first (%v)", err)
			}
		}
	})

	t.Run("the hub serves through its firewall", func(t *testing.T) {
		for _, from := range []*lab.Machine{newnode, outside} {
			body, err := from.Reach(ctx, fmt.Sprintf("http://%s:%d/", lab.HubAddr, lab.WebappPort))
			if err != nil || !strings.Contains(body, "from webapp") {
				t.Errorf("%s -> hub:%d: %q, %v", from.Name, lab.WebappPort, body, err)
			}
			body, err = from.Reach(ctx, fmt.Sprintf("http://%s:%d/", lab.HubAddr, lab.RegistryPort))
			if err != nil || !strings.Contains(body, "from predecessor-registry") {
				t.Errorf("%s -> hub:%d: %q, %v", from.Name, lab.RegistryPort, body, err)
			}
		}
	})

	t.Run("the hub refuses a denied port that is served", func(t *testing.T) {
		// The metrics container answers on the hub itself ...
		body, err := hub.Reach(ctx, fmt.Sprintf("http://127.0.0.1:%d/", lab.DeniedPort))
		if err != nil || !strings.Contains(body, "from metrics") {
			t.Fatalf("metrics not served on the hub itself: %q, %v", body, err)
		}
		// ... and the firewall keeps it from everyone else.
		for _, from := range []*lab.Machine{newnode, outside} {
			if body, err := from.Reach(ctx, fmt.Sprintf("http://%s:%d/", lab.HubAddr, lab.DeniedPort)); err == nil {
				t.Errorf("%s reached the denied port %d: %q", from.Name, lab.DeniedPort, body)
			}
		}
	})

	t.Run("the peers reach the hub service through the tunnel", func(t *testing.T) {
		for _, name := range []string{"peer1", "peer2"} {
			p := l.Machine(name)
			body, err := p.Reach(ctx, fmt.Sprintf("http://%s:%d/", lab.HubTunnelAddr, lab.WebappPort))
			if err != nil || !strings.Contains(body, "from webapp") {
				t.Errorf("%s -> %s:%d through the tunnel: %q, %v", name, lab.HubTunnelAddr, lab.WebappPort, body, err)
			}
			route, err := p.Exec(ctx, "ip", "route", "get", lab.HubTunnelAddr)
			if err != nil || !strings.Contains(route, "dev "+lab.TunnelIface) {
				t.Errorf("%s routes %s not through %s: %q, %v", name, lab.HubTunnelAddr, lab.TunnelIface, route, err)
			}
		}
		// Each machine's userspace tunnel is its own: the hub's UAPI socket is not a peer's.
		if out, err := l.Machine("peer1").Exec(ctx, "wg", "show", "interfaces"); err != nil || strings.TrimSpace(out) != lab.TunnelIface {
			t.Errorf("peer1 sees interfaces %q, %v", out, err)
		}
		conf, err := hub.TunnelDump(ctx, lab.TunnelIface)
		if err != nil || strings.Count(conf, "[Peer]") != 2 || !strings.Contains(conf, "ListenPort = 51820") {
			t.Errorf("hub tunnel: %v\n%s", err, conf)
		}
	})

	t.Run("outside reaches nothing the firewall denies", func(t *testing.T) {
		listening, err := hub.Listening(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(listening, lab.DeniedPort) {
			t.Fatalf("hub listens on %v, want %d among them", listening, lab.DeniedPort)
		}
		for _, port := range append(listening, lab.StorePort) {
			if slices.Contains(allowedPorts, port) {
				continue
			}
			if out, err := outside.Reach(ctx, fmt.Sprintf("tcp://%s:%d", lab.HubAddr, port)); err == nil {
				t.Errorf("outside reached hub port %d, which the firewall denies: %q", port, out)
			}
		}
		// Nor the private network: outside has no route into the tunnel's range.
		if out, err := outside.Reach(ctx, fmt.Sprintf("tcp://%s:%d", lab.HubTunnelAddr, lab.WebappPort)); err == nil {
			t.Errorf("outside reached the hub's tunnel address: %q", out)
		}
	})

	t.Run("the predecessor's control keeps rewriting the module's file", func(t *testing.T) {
		first, err := hub.ReadFile(ctx, lab.WebappFile)
		if err != nil {
			t.Fatal(err)
		}
		if err := testenv.Poll(t, 10*time.Second, func() error {
			now, err := hub.ReadFile(ctx, lab.WebappFile)
			if err == nil && string(now) == string(first) {
				err = fmt.Errorf("%s unchanged: %q", lab.WebappFile, now)
			}
			return err
		}); err != nil {
			t.Error(err)
		}
		// The file is the machine's own: the host has no such file.
		if _, err := os.Stat(lab.WebappFile); err == nil {
			t.Errorf("%s exists on the host too: the machine's /etc is not its own", lab.WebappFile)
		}
	})

	t.Run("probes", func(t *testing.T) {
		sums, err := l.Probes()
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range sums {
			t.Log(s)
			if s.Calls == 0 {
				t.Errorf("probe %s made no calls", s.Name)
			}
			if !s.Holds() {
				t.Errorf("probe %s does not hold since the lab was ready: %s", s.Name, s)
			}
		}
	})

	t.Run("a reboot brings the predecessor's state back", func(t *testing.T) {
		// A stand-in agent proves the hook: installed, started, and started again by the boot.
		agent := writeFakeAgent(t)
		if err := hub.InstallAgent(ctx, agent, "agent", "--config", "/etc/meshd/agent.yaml"); err != nil {
			t.Fatal(err)
		}
		// Under meshd's own unit, exactly as `meshd install-unit` writes it, with no drop-in:
		// Type=notify, so InstallAgent returned once the agent said READY=1.
		unit, err := hub.ReadFile(ctx, lab.AgentUnit)
		if err != nil {
			t.Fatal(err)
		}
		if want := packaging.UnitFor("/usr/local/bin/meshd", "/etc/meshd/agent.yaml"); string(unit) != want {
			t.Errorf("the agent's unit is not packaging's:\n%s\nwant:\n%s", unit, want)
		}
		if status, ok := hub.ReadyStatus("meshd"); !ok || status != "stand-in agent serving" {
			t.Errorf("READY=1 from the agent: %v, status %q", ok, status)
		}
		if _, err := hub.ReadFile(ctx, "/run/meshd/started"); err != nil {
			t.Fatalf("InstallAgent returned, the agent ready, but it did not start: %v", err)
		}
		// The unit's RuntimeDirectory= made /run/meshd root's alone, as systemd does (it was 0755).
		if out, err := hub.Exec(ctx, "stat", "-c", "%a %U", "/run/meshd"); err != nil || strings.TrimSpace(out) != "700 root" {
			t.Errorf("/run/meshd under the agent's unit: %q %v, want 700 root", out, err)
		}
		type state struct{ firewall, tunnel, containers string }
		dump := func() (state, error) {
			var s state
			var err error
			if s.firewall, err = hub.FirewallDump(ctx); err != nil {
				return s, err
			}
			if s.tunnel, err = hub.TunnelDump(ctx, lab.TunnelIface); err != nil {
				return s, err
			}
			s.containers, err = hub.Containers(ctx)
			return s, err
		}
		before, err := dump()
		if err != nil {
			t.Fatal(err)
		}
		procsBefore := len(hub.Processes())
		rebooted := time.Now()
		if err := hub.Reboot(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("hub rebooted in %s (%d processes before)", time.Since(rebooted).Round(time.Millisecond), procsBefore)
		var after state
		err = testenv.Poll(t, 40*time.Second, func() error {
			var err error
			if after, err = dump(); err != nil {
				return err
			}
			if after != before {
				return fmt.Errorf("state differs after reboot")
			}
			return nil
		})
		if err != nil {
			if after.firewall != before.firewall {
				t.Errorf("firewall after reboot:\n%s\nbefore:\n%s", after.firewall, before.firewall)
			}
			if after.tunnel != before.tunnel {
				t.Errorf("tunnel after reboot:\n%s\nbefore:\n%s", after.tunnel, before.tunnel)
			}
			if after.containers != before.containers {
				t.Errorf("containers after reboot:\n%s\nbefore:\n%s", after.containers, before.containers)
			}
			t.Fatal(err)
		}
		if out, err := hub.Exec(ctx, "cat", "/run/meshd/started"); err != nil || !strings.Contains(out, "agent --config") {
			t.Errorf("agent not started again by the boot: %q, %v", out, err)
		}
		// The services come back for their callers, and the probes saw the outage.
		if err := testenv.Poll(t, 30*time.Second, func() error {
			for _, n := range []string{"peer1-tunnel", "served"} {
				if ok, err := lab.LastCall(l, n); err != nil || !ok {
					return fmt.Errorf("probe %s not answering again (%v)", n, err)
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		s, err := l.Probe("peer1-tunnel", rebooted)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("across the reboot: %s", s)
		if s.Failures == 0 || s.LongestOutage <= 0 || s.OutageStart.Before(rebooted) {
			t.Errorf("probe recorded no outage across the reboot: %s", s)
		}
	})

	t.Run("a machine cut off is silent until restored", func(t *testing.T) {
		if err := newnode.CutOff(ctx); err != nil {
			t.Fatal(err)
		}
		if out, err := newnode.Reach(ctx, fmt.Sprintf("http://%s:%d/", lab.HubAddr, lab.WebappPort)); err == nil {
			t.Errorf("newnode reached the hub while cut off: %q", out)
		}
		if err := newnode.Restore(ctx); err != nil {
			t.Fatal(err)
		}
		if err := testenv.Poll(t, 10*time.Second, func() error {
			_, err := newnode.Reach(ctx, fmt.Sprintf("http://%s:%d/", lab.HubAddr, lab.WebappPort))
			return err
		}); err != nil {
			t.Errorf("newnode does not reach the hub after restore: %v", err)
		}
	})
	return l
}

// writeFakeAgent builds a stand-in for the meshd binary (testdata/fakeagent): it records its
// arguments, says READY=1 to $NOTIFY_SOCKET from its own process (meshd's unit is Type=notify,
// NotifyAccess=main) and stays up.
func writeFakeAgent(t *testing.T) string {
	t.Helper()
	p := t.TempDir() + "/meshd"
	build := exec.Command("go", "build", "-o", p, "./testdata/fakeagent")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the stand-in agent: %v\n%s", err, out)
	}
	return p
}

// A lab of N machines raises the kernel's neighbour table to hold N² entries without collecting,
// and never lowers what is there: the default (128, 512, 1024) stays for a lab of five.
func TestUnitNeighbourTableHoldsTheFleet(t *testing.T) {
	def := [3]int{128, 512, 1024}
	if got := lab.NeighThresholds(5, 0, def); got != def {
		t.Errorf("5 machines: %v, want the default %v kept", got, def)
	}
	if got := lab.NeighThresholds(100, 0, def); got != [3]int{10000, 20000, 40000} {
		t.Errorf("100 machines: %v", got)
	}
	if got := lab.NeighThresholds(40, 0, [3]int{128, 512, 100000}); got != [3]int{1600, 3200, 100000} {
		t.Errorf("40 machines, a high gc_thresh3 already: %v", got)
	}
	// A fleet simulator's bed: three servers and a machine holding 1000 nodes' addresses.
	if got := lab.NeighThresholds(4, 1000, def); got != [3]int{4016, 8032, 16064} {
		t.Errorf("4 machines and 1000 hosts: %v", got)
	}
}
