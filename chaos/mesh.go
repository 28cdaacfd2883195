package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"meshd/api"
	"meshd/lab"
	"meshd/report"
)

// The chaos lab: three servers (hub, the control-node, with its own Docker engine so the store
// really runs on it; s2 and s3), a client c1 with an engine and a found firewall, a predecessor
// peer p1 on the hub's found wg-quick tunnel, and outside, on the underlay only.
const (
	S2Addr = "198.51.100.11"
	S3Addr = "198.51.100.12"
	C1Addr = "198.51.100.13"
	P1Addr = "198.51.100.14"
	// P1TunnelAddr is p1's address on the predecessor's tunnel (10.44.0.0/24, the hub at .1): far
	// from the addresses the mesh gives s2, s3 and c1 (.2, .3, .4), so the carried peer keeps it.
	P1TunnelAddr = "10.44.0.20"
	// Peer is the predecessor peer the workload migrates: enrolled adopted over the tunnel, its
	// tunnel taken, modules assigned and taken, converged, returned, converged again.
	Peer = "p1"
	// SvcPort is the predecessor's service on the hub, published by its engine, that p1 calls
	// through the tunnel (the probe p1-tunnel).
	SvcPort = lab.WebappPort
)

// Nodes are the chaos lab's meshd nodes; Servers its Raft servers.
var (
	Nodes   = []string{"hub", "s2", "s3", "c1"}
	Servers = []string{"hub", "s2", "s3"}
)

// Modules are the workload's modules: a file each (chaos-a, -b, -c) or a container (chaos-d, only
// on the nodes with an engine: hub and c1), with a setting the workload sets.
var Modules = []string{"chaos-a", "chaos-b", "chaos-c", "chaos-d"}

// Engines are the nodes with a Docker engine.
var Engines = []string{"hub", "c1"}

// HeldPath is chaos-a's file, which every node has before meshd arrives (found, so held on
// assignment, its original recorded). The others' files are created on assignment.
const HeldPath = "/etc/chaos-a/chaos-a.conf"

// FoundContent is what each node's HeldPath holds before meshd arrives.
func FoundContent(node string) []byte {
	return []byte("# the predecessor's file on " + node + "\ngreeting = found-" + node + "\n")
}

// SvcModule is the hub's predecessor service (the container svc, publishing SvcPort, which p1
// calls through the tunnel) as a module: found on the hub, so held when assigned, then taken,
// so that converging the hub keeps it open. Only the migration assigns it (never the random
// clients): the hub is converged with it declared.
const SvcModule = "chaos-svc"

func manifest(name string) string {
	if name == SvcModule {
		return fmt.Sprintf("name: %s\ndescription: the predecessor's service on the hub, which p1 calls through the tunnel\nsettings:\n  port: %d\ncontainers:\n  - name: svc\n    image: lab/echo:1\n    command: [serve, --listen, \":%d\", --name, svc]\n    ports: [\"${port}:%d/tcp\"]\n    restart: unless-stopped\nopenings:\n  - {port: \"${port}\", proto: tcp, from: anywhere, path: forwarded}\n", name, SvcPort, SvcPort, SvcPort)
	}
	if name == "chaos-d" {
		return "name: chaos-d\ndescription: a chaos test module with a container\nsettings:\n  greeting: g0\ncontainers:\n  - name: chaos-d\n    image: lab/echo:1\n    env: {GREETING: \"${greeting}\"}\n    restart: unless-stopped\n"
	}
	return fmt.Sprintf("name: %s\ndescription: a chaos test module\nsettings:\n  greeting: g0\nfiles:\n  - path: /etc/%s/%s.conf\n    content: |\n      greeting = ${greeting}\n    mode: \"0644\"\n", name, name, name)
}

// TunnelProbe is the probe from p1 through the tunnel to the hub's service: every failed call is
// an outage of a predecessor service, reported per step.
const TunnelProbe = "p1-tunnel"

// Scenario is the chaos lab's shape: c1 has a found nftables firewall; the hub a wg-quick tunnel
// (wg0, 10.44.0.1/24 on 51820, brought up with wireguard-go as the predecessor does) to p1, and a
// service container publishing SvcPort; the p1-tunnel probe calls that service through the
// tunnel; the outside-store probes call the store's port on the hub from outside, which must
// never answer.
func Scenario() lab.Scenario {
	return lab.Scenario{
		Name: "chaos",
		Machines: []lab.MachineSpec{
			{Name: "hub", Addr: lab.HubAddr, Docker: true, TunnelAddr: lab.HubTunnelAddr},
			{Name: "s2", Addr: S2Addr},
			{Name: "s3", Addr: S3Addr},
			{Name: "c1", Addr: C1Addr, Docker: true},
			{Name: Peer, Addr: P1Addr, TunnelAddr: P1TunnelAddr},
			{Name: "outside", Addr: lab.OutsideAddr},
		},
		Probes: []lab.ProbeSpec{
			{Name: "outside-store", From: "outside", Target: fmt.Sprintf("tcp://%s:%d", lab.HubAddr, lab.StorePort), Expect: lab.ExpectUnreachable},
			{Name: "outside-store6", From: "outside", Target: fmt.Sprintf("tcp://[%s]:%d", lab.Addr6(netip.MustParseAddr(lab.HubAddr)), lab.StorePort), Expect: lab.ExpectUnreachable},
			{Name: TunnelProbe, From: Peer, Target: fmt.Sprintf("http://%s:%d/", lab.HubTunnelAddr, SvcPort), Expect: lab.ExpectReach},
		},
		Configure: func(ctx context.Context, l *lab.Lab) error {
			c1 := l.Machine("c1")
			if err := c1.WriteFile(ctx, "/etc/nftables.conf", []byte(c1Firewall), 0o755); err != nil {
				return err
			}
			if _, err := c1.Run(ctx, "ln -sf /lib/systemd/system/nftables.service /etc/systemd/system/sysinit.target.wants/nftables.service"); err != nil {
				return err
			}
			return configureTunnel(ctx, l)
		},
		// chaos-d's container, found on c1: held when the module is assigned, replaced at take;
		// the hub's service, which p1 calls through the tunnel.
		Populate: func(ctx context.Context, l *lab.Lab) error {
			if _, err := l.Machine("c1").Docker(ctx, "run", "-d", "--name", "chaos-d", "--restart", "unless-stopped",
				"-e", "GREETING=found", "lab/echo:1"); err != nil {
				return err
			}
			_, err := l.Machine("hub").Docker(ctx, "run", "-d", "--name", "svc", "--restart", "unless-stopped",
				"-p", fmt.Sprintf("%d:%d", SvcPort, SvcPort), "lab/echo:1", "serve", "--listen", fmt.Sprintf(":%d", SvcPort), "--name", "svc")
			return err
		},
		Ready: func(ctx context.Context, l *lab.Lab) error {
			return poll(ctx, 60*time.Second, func() error {
				s, err := l.Probe(TunnelProbe, time.Now().Add(-time.Second))
				if err == nil && (s.Successes == 0 || s.Failures > 0) {
					err = fmt.Errorf("%s is not answering yet: %s", TunnelProbe, s.LastError)
				}
				return err
			})
		},
	}
}

// configureTunnel writes the predecessor's tunnel the way lab.Predecessor does: a wg-quick file on
// the hub and on p1 with fresh keys, each enabled as wg-quick@wg0 (the boot brings it up with
// wireguard-go, there being no kernel WireGuard).
func configureTunnel(ctx context.Context, l *lab.Lab) error {
	hubKey, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		return err
	}
	peerKey, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		return err
	}
	hubConf := fmt.Sprintf("# the predecessor's tunnel\n[Interface]\nAddress = %s/24\nListenPort = %d\nPrivateKey = %s\n\n# %s\n[Peer]\nPublicKey = %s\nAllowedIPs = %s/32\n",
		lab.HubTunnelAddr, lab.TunnelPort, hubKey, Peer, peerKey.PublicKey(), P1TunnelAddr)
	peerConf := fmt.Sprintf("[Interface]\nAddress = %s/24\nListenPort = %d\nPrivateKey = %s\n\n# hub\n[Peer]\nPublicKey = %s\nEndpoint = %s:%d\nAllowedIPs = %s\nPersistentKeepalive = 5\n",
		P1TunnelAddr, lab.TunnelPort, peerKey, hubKey.PublicKey(), lab.HubAddr, lab.TunnelPort, lab.TunnelRange)
	for m, conf := range map[string]string{"hub": hubConf, Peer: peerConf} {
		mm := l.Machine(m)
		if err := mm.WriteFile(ctx, "/etc/wireguard/"+lab.TunnelIface+".conf", []byte(conf), 0o600); err != nil {
			return err
		}
		if _, err := mm.Run(ctx, `ln -sf /lib/systemd/system/wg-quick@.service "/etc/systemd/system/multi-user.target.wants/wg-quick@$1.service"`, lab.TunnelIface); err != nil {
			return err
		}
	}
	return nil
}

// c1Firewall is the client's found firewall, loaded at boot by nftables.service: it accepts
// everything (a predecessor's firewall that logs, say), so the client's mesh ports stay open
// while it is adopted, and the flip has a firewall to retire and the return one to restore.
const c1Firewall = `#!/usr/sbin/nft -f
flush ruleset
table inet predecessor {
	chain input {
		type filter hook input priority filter; policy accept;
		tcp dport 22 counter accept
	}
}
`

// Mesh is meshd running on a chaos lab.
type Mesh struct {
	Lab *lab.Lab
	// Interval is the agents' reconcile interval.
	Interval time.Duration
	// Step, when set, says a step of raising the mesh begins (the run marks it on the lab).
	Step func(name string)
	// creds are the operator credential files given to client machines, by machine: a client's
	// socket reads and writes no record (issue 26), so meshd there runs with --credential.
	creds sync.Map
}

func (ms *Mesh) step(name string) {
	if ms.Step != nil {
		ms.Step(name)
	}
}

// dockerHost is what an agent on machine uses: its own engine on hub and c1, none elsewhere.
func dockerHost(machine string) string {
	if slices.Contains(Engines, machine) {
		return "unix:///run/docker.sock"
	}
	return "unix:///nonexistent/docker.sock"
}

// AgentArgs are the agent's arguments on machine: the lab runs `/usr/local/bin/meshd ARGS` under
// meshd's own unit (lab.Machine.SetAgentUnit).
func (ms *Mesh) AgentArgs(machine string) []string {
	return []string{"agent", "--data-dir", "/var/lib/meshd", "--docker-host", dockerHost(machine),
		"--reconcile-interval", ms.Interval.String()}
}

// Meshd runs the meshd CLI on machine and returns its stdout, stderr and exit code (-1 when it
// did not run to an exit).
func (ms *Mesh) Meshd(ctx context.Context, machine string, args ...string) (stdout, stderr string, code int) {
	m := ms.Lab.Machine(machine)
	if path, ok := ms.creds.Load(machine); ok && len(args) > 0 && !isMachineLocal(args) {
		args = append([]string{"--credential", path.(string)}, args...)
	}
	cmd := m.Command(ctx, "/usr/local/bin/meshd", args...)
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return o.String(), e.String(), 0
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		return o.String(), e.String(), ee.ExitCode()
	}
	return o.String(), e.String() + err.Error(), -1
}

func (ms *Mesh) must(ctx context.Context, machine string, args ...string) (string, error) {
	out, errs, code := ms.Meshd(ctx, machine, args...)
	if code != 0 {
		return out, fmt.Errorf("%s: meshd %s: exit %d: %s%s", machine, strings.Join(args, " "), code, out, errs)
	}
	return out, nil
}

// isMachineLocal says args are a command about the machine itself: one of machineLocal, or
// `node original` (a node keeps its originals; only its own socket shows them).
func isMachineLocal(args []string) bool {
	return machineLocal[args[0]] || (len(args) > 1 && args[0] == "node" && args[1] == "original")
}

// machineLocal are the commands about the machine itself, run on its own socket even where the
// machine holds an operator credential.
var machineLocal = map[string]bool{"join": true, "agent": true, "genesis": true, "members": true, "leave": true, "check": true,
	"tunnel-device": true, "boot": true, "version": true, "install-unit": true, "config": true}

// giveCredential has the hub issue an operator credential for the client machine and puts it
// there (0600): from then on meshd on that machine drives the record with it, over the bus.
func (ms *Mesh) giveCredential(ctx context.Context, machine string) error {
	tmp := "/root/chaos-" + machine + ".credential"
	if _, err := ms.must(ctx, "hub", "operator", "credential", "create", "--name", "chaos-"+machine, "--out", tmp); err != nil {
		return err
	}
	hub := ms.Lab.Machine("hub")
	b, err := hub.ReadFile(ctx, tmp)
	if err != nil {
		return fmt.Errorf("hub: read the credential for %s: %w", machine, err)
	}
	if _, err := hub.Exec(ctx, "rm", "-f", tmp); err != nil {
		return err
	}
	path := "/etc/meshd/operator.credential"
	if err := ms.Lab.Machine(machine).WriteFile(ctx, path, b, 0o600); err != nil {
		return fmt.Errorf("%s: write its operator credential: %w", machine, err)
	}
	ms.creds.Store(machine, path)
	return nil
}

// MeshTunnelPort is the port genesis gives the mesh's own interface on the hub: the found tunnel
// holds 51820 until the hub takes it over on the running mesh (then the mesh's is the tunnel's).
const MeshTunnelPort = 51821

// Genesis puts the found file on every node (and on p1) and the binary, then runs genesis on the
// hub adopted, its found tunnel left running (the mesh's own interface on MeshTunnelPort, in the
// default range), and starts its agent. The hub's tunnel is taken over next, on the running
// mesh, before any other node joins: the record refuses a hub's takeover once a node holds an
// address outside the tunnel's range, and the mesh's range may not overlap the found tunnel
// while it runs (ADR 0100), so the takeover comes right after the hub is adopted (ADR 0105).
func (ms *Mesh) Genesis(ctx context.Context, binary string) error {
	for _, n := range append(slices.Clone(Nodes), Peer) {
		m := ms.Lab.Machine(n)
		if err := m.WriteFile(ctx, HeldPath, FoundContent(n), 0o644); err != nil {
			return err
		}
		if err := copyBinary(ctx, m, binary); err != nil {
			return err
		}
	}
	ms.step("hub adopted (genesis --adopted), its tunnel still the predecessor's")
	if _, err := ms.must(ctx, "hub", "genesis", "--name", "hub", "--adopted", "--data-dir", "/var/lib/meshd",
		"--docker-host", dockerHost("hub"), "--advertise", lab.HubAddr, "--port", fmt.Sprintf("tunnel=%d", MeshTunnelPort)); err != nil {
		return err
	}
	if err := ms.startAgent(ctx, "hub"); err != nil {
		return err
	}
	return ms.waitAnswer(ctx, "hub")
}

// WaitHubTunnel waits until the hub's tunnel is the mesh's (the found interface down, the mesh's
// up with its key, port and address).
func (ms *Mesh) WaitHubTunnel(ctx context.Context) error {
	var last api.TunnelView
	err := poll(ctx, 90*time.Second, func() error {
		out, err := ms.must(ctx, "hub", "tunnel", "show", "--json")
		if err != nil {
			return err
		}
		if err := json.Unmarshal([]byte(out), &last); err != nil {
			return err
		}
		if last.State != report.TunnelMeshUp {
			return fmt.Errorf("the hub's tunnel is %q (%s), not the mesh's", last.State, last.Reason)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("the hub's tunnel taken: %w", err)
	}
	return nil
}

// Join joins s2 as a server and c1 as a client, both adopted, and s3 as a server enrolled
// converged (a new, bare machine: the "a new node converged", its derived filter loaded
// from its first pass, the Raft port admitting only the record's servers), and adds the
// workload's modules. It returns once the three servers vote.
func (ms *Mesh) Join(ctx context.Context) error {
	ms.step("s2 joined as a server and c1 as a client, adopted; s3 as a server, converged")
	for _, j := range []struct {
		name, addr string
		server     bool
		mode       string
	}{{"s2", S2Addr, true, "--adopted"}, {"s3", S3Addr, true, "--converged"}, {"c1", C1Addr, false, "--adopted"}} {
		args := []string{"token", "create", j.mode, "--json"}
		if j.server {
			args = append(args, "--server")
		}
		out, err := ms.must(ctx, "hub", args...)
		if err != nil {
			return err
		}
		var tv api.TokenView
		if err := json.Unmarshal([]byte(out), &tv); err != nil || tv.Token == "" {
			return fmt.Errorf("token for %s: %v: %s", j.name, err, out)
		}
		if _, err := ms.must(ctx, j.name, "join", tv.Token, "--name", j.name, "--data-dir", "/var/lib/meshd", "--advertise", j.addr); err != nil {
			return err
		}
		if err := ms.startAgent(ctx, j.name); err != nil {
			return err
		}
		if !j.server {
			if err := ms.giveCredential(ctx, j.name); err != nil {
				return err
			}
		}
		if err := ms.waitAnswer(ctx, j.name); err != nil {
			return err
		}
	}
	if err := poll(ctx, 60*time.Second, func() error {
		st, err := ms.Status(ctx, "hub")
		if err != nil {
			return err
		}
		if v := strings.Join(st.Voters, ","); v != "hub,s2,s3" {
			return fmt.Errorf("voters %s", v)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("three voters: %w", err)
	}
	ms.step("the workload's modules added")
	for _, mod := range append(slices.Clone(Modules), SvcModule) {
		path := "/etc/chaos-manifests/" + mod + ".yaml"
		if err := ms.Lab.Machine("hub").WriteFile(ctx, path, []byte(manifest(mod)), 0o644); err != nil {
			return err
		}
		if _, err := ms.must(ctx, "hub", "module", "add", path); err != nil {
			return err
		}
	}
	return nil
}

func copyBinary(ctx context.Context, m *lab.Machine, binary string) error {
	b, err := os.ReadFile(binary)
	if err != nil {
		return err
	}
	return m.WriteFile(ctx, "/usr/local/bin/meshd", b, 0o755)
}

func (ms *Mesh) startAgent(ctx context.Context, n string) error {
	m := ms.Lab.Machine(n)
	if err := m.SetAgentUnit(ctx, nil, ms.AgentArgs(n)...); err != nil {
		return err
	}
	return m.StartService(ctx, "meshd")
}

// waitAnswer waits until the agent on n answers status (through the leader).
func (ms *Mesh) waitAnswer(ctx context.Context, n string) error {
	return poll(ctx, 60*time.Second, func() error { _, err := ms.Status(ctx, n); return err })
}

// Status is `meshd status --json` on machine.
func (ms *Mesh) Status(ctx context.Context, machine string) (api.StatusView, error) {
	var st api.StatusView
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	out, err := ms.must(ctx, machine, "status", "--json")
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal([]byte(out), &st)
}

// NodeView is `meshd node show NODE --json` asked on machine.
func (ms *Mesh) NodeView(ctx context.Context, machine, node string) (api.NodeView, error) {
	var v api.NodeView
	out, err := ms.must(ctx, machine, "node", "show", node, "--json")
	if err != nil {
		return v, err
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		return v, fmt.Errorf("node show %s on %s: %w", node, machine, err)
	}
	if v.Node == nil {
		return v, fmt.Errorf("node show %s on %s: no node in the answer", node, machine)
	}
	return v, nil
}

// StateOf is a node view in the model's terms.
func StateOf(v api.NodeView) NodeState {
	// A spoke says it took its found tunnel over (TookTunnel); the hub's takeover moves its
	// address to the tunnel's.
	tunnel := v.Node.TookTunnel || (v.ControlNode && v.Node.Address == lab.HubTunnelAddr)
	s := NodeState{Mode: string(v.Node.Target()), Assigned: nonNil(slices.Clone(v.Node.Assigned)),
		Taken: nonNil(slices.Clone(v.Taken)), Settings: map[string]string{}, Tunnel: tunnel}
	sort.Strings(s.Assigned)
	sort.Strings(s.Taken)
	for k, val := range v.Node.Settings {
		for _, mod := range Modules {
			if strings.HasPrefix(k, mod+".") {
				s.Settings[k] = val
			}
		}
	}
	return s
}

// poll calls f until it returns nil or within runs out; the error is f's last.
func poll(ctx context.Context, within time.Duration, f func() error) error {
	deadline := time.Now().Add(within)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}
