package fleetsim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"meshd/api"
	"meshd/lab"
)

// The bed's machines: three servers and the machine the simulated nodes live on, on the lab's
// underlay.
const (
	SimMachine = "sim"
	simAddr    = "198.51.100.30"
	// noDocker is the engine address the servers are given: they run no engine, and no server
	// reaches this host's.
	noDocker = "unix:///nonexistent/docker.sock"
	dataDir  = "/var/lib/meshd"
	// busPort is the catalogue's mesh.bus, which the servers keep.
	busPort = 7070
	// FirstPort is the first simulated node's gossip port.
	FirstPort = 20000
	// credPath is where the simulator's machine keeps the operator credential.
	credPath = "/etc/meshd/fleetsim.credential"
	// fleetRange is the private network's range: room for 4094 nodes.
	fleetRange = "10.99.0.0/20"
)

// Hosts is where the simulated nodes' addresses are, each its own (NodeAddr): the simulator's
// machine holds them on its underlay link and the servers reach them there. A node needs its own
// address as a machine has one: the bus holds at most 32 connections from one source.
var Hosts = netip.MustParsePrefix("100.64.0.0/16")

// NodeAddr is simulated node i's address in hosts.
func NodeAddr(hosts netip.Prefix, i int) netip.Addr {
	a := hosts.Addr()
	for range i + 1 {
		a = a.Next()
	}
	return a
}

// Servers are the bed's servers, the control-node first.
var Servers = []string{"s1", "s2", "s3"}

var serverAddr = map[string]string{"s1": "198.51.100.21", "s2": "198.51.100.22", "s3": "198.51.100.23"}

// Scenario is the bed's lab for up to nodes simulated nodes: three bare machines for the servers
// (no engine) and one for the simulated nodes.
func Scenario(nodes int) lab.Scenario {
	sc := lab.Scenario{Name: "fleet", Hosts: nodes}
	for _, s := range Servers {
		sc.Machines = append(sc.Machines, lab.MachineSpec{Name: s, Addr: serverAddr[s]})
	}
	sc.Machines = append(sc.Machines, lab.MachineSpec{Name: SimMachine, Addr: simAddr})
	return sc
}

// Bed is three real servers (meshd agents with Raft on disk, each on a lab machine of its own)
// and the simulator's machine, with meshsim on it.
type Bed struct {
	Lab *lab.Lab
	// killed are the servers killed so far.
	killed map[string]bool
	// hosts is how many node addresses the simulator's machine holds.
	hosts int
}

// Raise makes s1 by genesis, joins s2 and s3 with server tokens, starts the three agents (with
// extra flags: --cpu-profile FILE, say), waits until the three vote, and puts an operator
// credential and the meshsim binary on the simulator's machine.
func Raise(ctx context.Context, l *lab.Lab, meshd, meshsim string, extra ...string) (*Bed, error) {
	b := &Bed{Lab: l, killed: map[string]bool{}}
	bin, err := os.ReadFile(meshd)
	if err != nil {
		return nil, err
	}
	for _, s := range Servers {
		if err := l.Machine(s).WriteFile(ctx, "/usr/local/bin/meshd", bin, 0o755); err != nil {
			return nil, err
		}
	}
	agent := append([]string{"agent", "--data-dir", dataDir, "--docker-host", noDocker}, extra...)
	s1 := l.Machine("s1")
	if _, err := b.meshd(ctx, "s1", "genesis", "--name", "s1", "--adopted", "--data-dir", dataDir, "--docker-host", noDocker,
		"--advertise", serverAddr["s1"], "--set", "mesh.range="+fleetRange); err != nil {
		return nil, err
	}
	if err := s1.InstallAgent(ctx, meshd, agent...); err != nil {
		return nil, err
	}
	for _, s := range Servers[1:] {
		var tv api.TokenView
		if err := b.meshdJSON(ctx, "s1", &tv, "token", "create", "--adopted", "--server"); err != nil {
			return nil, err
		}
		if out, err := l.Machine(s).ExecStdin(ctx, []byte(tv.Token+"\n"), "/usr/local/bin/meshd", "join", "--token-file", "-",
			"--name", s, "--data-dir", dataDir, "--docker-host", noDocker, "--advertise", serverAddr[s]); err != nil {
			return nil, fmt.Errorf("%s: join as a server: %w\n%s", s, err, out)
		}
		if err := l.Machine(s).InstallAgent(ctx, meshd, agent...); err != nil {
			return nil, err
		}
	}
	if err := b.poll(ctx, 60*time.Second, "three voters", func() error {
		st, _, err := b.Status(ctx, "s1")
		if err != nil {
			return err
		}
		if len(st.Voters) != 3 {
			return fmt.Errorf("voters %v", st.Voters)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	// Under /var/lib, which the machine overlays (/root is the host's), and removed once read.
	tmp := "/var/lib/fleetsim.credential"
	if _, err := b.meshd(ctx, "s1", "operator", "credential", "create", "--name", "fleetsim", "--out", tmp); err != nil {
		return nil, err
	}
	cred, err := s1.ReadFile(ctx, tmp)
	if err != nil {
		return nil, err
	}
	if _, err := s1.Exec(ctx, "rm", "-f", tmp); err != nil {
		return nil, err
	}
	for _, s := range Servers {
		if out, err := l.Machine(s).Exec(ctx, "ip", "route", "replace", Hosts.String(), "dev", "eth0"); err != nil {
			return nil, fmt.Errorf("%s: a route to the simulated nodes: %w\n%s", s, err, out)
		}
	}
	sim := l.Machine(SimMachine)
	if err := sim.WriteFile(ctx, credPath, cred, 0o600); err != nil {
		return nil, err
	}
	sb, err := os.ReadFile(meshsim)
	if err != nil {
		return nil, err
	}
	if err := sim.WriteFile(ctx, "/usr/local/bin/meshsim", sb, 0o755); err != nil {
		return nil, err
	}
	return b, nil
}

// AddHosts gives the simulator's machine the addresses of nodes 0 to n-1 (those it lacks).
func (b *Bed) AddHosts(ctx context.Context, n int) error {
	var batch strings.Builder
	for i := b.hosts; i < n; i++ {
		fmt.Fprintf(&batch, "address add %s/32 dev eth0\n", NodeAddr(Hosts, i))
	}
	if batch.Len() == 0 {
		return nil
	}
	if out, err := b.Lab.Machine(SimMachine).ExecStdin(ctx, []byte(batch.String()), "ip", "-batch", "-"); err != nil {
		return fmt.Errorf("%s: the nodes' addresses: %w\n%s", SimMachine, err, out)
	}
	b.hosts = n
	return nil
}

// meshd runs the meshd CLI on a server.
func (b *Bed) meshd(ctx context.Context, on string, args ...string) (string, error) {
	out, err := b.Lab.Machine(on).Exec(ctx, "/usr/local/bin/meshd", args...)
	if err != nil {
		return out, fmt.Errorf("%s: meshd %s: %w", on, strings.Join(args, " "), err)
	}
	return out, nil
}

// meshdJSON runs a meshd command with --json on a server and decodes what it prints.
func (b *Bed) meshdJSON(ctx context.Context, on string, v any, args ...string) error {
	cmd := b.Lab.Machine(on).Command(ctx, "/usr/local/bin/meshd", append(args, "--json")...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: meshd %s: %w: %s", on, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return json.Unmarshal(out.Bytes(), v)
}

// Status is `meshd status --json` on a server, and how long the command took.
func (b *Bed) Status(ctx context.Context, on string) (api.StatusView, time.Duration, error) {
	var st api.StatusView
	start := time.Now()
	err := b.meshdJSON(ctx, on, &st, "status")
	return st, time.Since(start), err
}

// Bus is a server's bus address, as the simulated nodes call it.
func Bus(server string) string { return serverAddr[server] + ":" + strconv.Itoa(busPort) }

// Clients starts meshsim's fleet process on the simulator's machine, its nodes of shape with
// memberlist's profile (Options.Profile), and returns it to drive; its log goes to
// DIR/fleet.log in the lab's directory; extra are more of `meshsim clients`'s flags.
func (b *Bed) Clients(ctx context.Context, shape, profile string, extra ...string) (*Remote, error) {
	args := append([]string{"clients", "--credential", credPath,
		"--hosts", Hosts.String(), "--first-port", strconv.Itoa(FirstPort), "--shape", shape, "--gossip", profile}, extra...)
	cmd := b.Lab.Machine(SimMachine).Command(ctx, "/usr/local/bin/meshsim", args...)
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(b.Lab.Dir, "fleet.log"))
	if err != nil {
		return nil, err
	}
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("meshsim clients on %s: %w", SimMachine, err)
	}
	return NewRemote(in, out, func() error { defer logf.Close(); return cmd.Wait() }), nil
}

// FleetLog is the tail of the fleet process's log.
func (b *Bed) FleetLog(n int) string {
	data, _ := os.ReadFile(filepath.Join(b.Lab.Dir, "fleet.log"))
	if len(data) > n {
		data = data[len(data)-n:]
	}
	return string(data)
}

// agentPIDs are the meshd processes on a server (its agent and the agent's WireGuard device).
func (b *Bed) agentPIDs(server string) []int {
	var out []int
	for _, pid := range b.Lab.Machine(server).Processes() {
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err == nil && strings.TrimSpace(string(comm)) == "meshd" {
			out = append(out, pid)
		}
	}
	return out
}

// Usage is a server's meshd processes' CPU time so far and resident memory now.
type Usage struct {
	Server string        `json:"server"`
	CPU    time.Duration `json:"cpu_ns"`
	RSS    int64         `json:"rss_bytes"`
}

// Usage reads each live server's usage.
func (b *Bed) Usage() []Usage {
	var out []Usage
	for _, s := range Servers {
		if b.killed[s] {
			continue
		}
		u := Usage{Server: s}
		for _, pid := range b.agentPIDs(s) {
			cpu, rss := procUsage(pid)
			u.CPU += cpu
			u.RSS += rss
		}
		out = append(out, u)
	}
	return out
}

// procUsage is a process's user and system time (from /proc/PID/stat, in clock ticks of 10 ms)
// and its resident set (VmRSS).
func procUsage(pid int) (time.Duration, int64) {
	var cpu time.Duration
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		s := string(stat)
		if i := strings.LastIndexByte(s, ')'); i > 0 {
			f := strings.Fields(s[i+1:])
			if len(f) > 12 {
				ut, _ := strconv.ParseInt(f[11], 10, 64)
				st, _ := strconv.ParseInt(f[12], 10, 64)
				cpu = time.Duration(ut+st) * 10 * time.Millisecond
			}
		}
	}
	var rss int64
	if status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, line := range strings.Split(string(status), "\n") {
			if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
				rss = kb << 10
			}
		}
	}
	return cpu, rss
}

// Kill kills a server's agent with SIGKILL, as a crash does, and says when.
func (b *Bed) Kill(server string) (time.Time, error) {
	var killed bool
	for _, pid := range b.agentPIDs(server) {
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if strings.Contains(string(cmd), "\x00agent\x00") {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				return time.Time{}, fmt.Errorf("%s: kill the agent (pid %d): %w", server, pid, err)
			}
			killed = true
		}
	}
	if !killed {
		return time.Time{}, fmt.Errorf("%s: no agent runs", server)
	}
	b.killed[server] = true
	return time.Now(), nil
}

// Stop stops each live server's agent as its unit stops (SIGTERM: a CPU profile is complete).
func (b *Bed) Stop(ctx context.Context) error {
	for _, s := range Servers {
		if b.killed[s] {
			continue
		}
		if err := b.Lab.Machine(s).StopService(ctx, "meshd"); err != nil {
			return err
		}
		b.killed[s] = true
	}
	return nil
}

// poll calls f until it succeeds or wait ends, then names what it waited for.
func (b *Bed) poll(ctx context.Context, wait time.Duration, what string, f func() error) error {
	deadline := time.Now().Add(wait)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %s: %w", what, wait, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// NewLeader waits until a server other than the killed ones answers a write's leader: `status`
// on a live server answered by a live leader. It returns that leader.
func (b *Bed) NewLeader(ctx context.Context, wait time.Duration) (string, error) {
	var leader string
	err := b.poll(ctx, wait, "a new leader", func() error {
		for _, s := range Servers {
			if b.killed[s] {
				continue
			}
			st, _, err := b.Status(ctx, s)
			if err != nil {
				return err
			}
			if st.Leader.Node == "" || b.killed[st.Leader.Node] {
				return fmt.Errorf("%s says the leader is %q", s, st.Leader.Node)
			}
			leader = st.Leader.Node
			return nil
		}
		return fmt.Errorf("no server runs")
	})
	return leader, err
}
