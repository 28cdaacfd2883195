package lab

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// MachineSpec says what a scenario's machine is.
type MachineSpec struct {
	// Name is the machine's hostname and the last part of its namespace's name (at most 15
	// characters: it also names the machine's port on the underlay bridge).
	Name string `json:"name"`
	// Addr is its address on the underlay (198.51.100.0/24).
	Addr string `json:"addr"`
	// Docker gives the machine its own Docker engine.
	Docker bool `json:"docker"`
	// TunnelAddr is its address on the predecessor's tunnel, if it has one.
	TunnelAddr string `json:"tunnel_addr,omitempty"`
	// Systemd boots the machine with real systemd under systemd-nspawn (lab/systemd) instead of
	// the namespace machines' unit runner: slower to raise, but its units, ordering, Restart=
	// and reboots are systemd's own.
	Systemd bool `json:"systemd,omitempty"`
}

// Machine is one lab machine.
type Machine struct {
	Name string
	Addr netip.Addr
	// Addr6 is its IPv6 address on the underlay (Underlay6), the same last number as Addr.
	Addr6      netip.Addr
	TunnelAddr netip.Addr // the zero Addr when the machine is not on the tunnel

	lab  *Lab
	spec MachineSpec
	dir  string
}

func newMachine(l *Lab, ms MachineSpec) *Machine {
	m := &Machine{Name: ms.Name, Addr: mustAddr(ms.Addr), lab: l, spec: ms, dir: filepath.Join(l.Dir, "machines", ms.Name)}
	m.Addr6 = Addr6(m.Addr)
	if ms.TunnelAddr != "" {
		m.TunnelAddr = mustAddr(ms.TunnelAddr)
	}
	return m
}

// Addr6 is the IPv6 underlay address of the machine whose IPv4 underlay address is a:
// 198.51.100.N is 2001:db8:100::N (N written the same, so .10 is ::10).
func Addr6(a netip.Addr) netip.Addr {
	return mustAddr(fmt.Sprintf("2001:db8:100::%d", a.As4()[3]))
}

// Netns is the path of the machine's network namespace (/run/netns/ml-LAB-NAME).
func (m *Machine) Netns() string { return "/run/netns/" + m.lab.nsName(m.Name) }

// MountNS is the path of the file the machine's mount namespace is bound to.
func (m *Machine) MountNS() string { return filepath.Join(m.lab.Dir, "ns", m.Name+".mnt") }

// UTSNS is the path of the file the machine's UTS namespace (its hostname) is bound to.
func (m *Machine) UTSNS() string { return filepath.Join(m.lab.Dir, "ns", m.Name+".uts") }

// Dir is the machine's directory in the lab's state directory (overlays, Docker data, logs).
func (m *Machine) Dir() string { return m.dir }

// DockerHost is the machine's Docker engine as a DOCKER_HOST value (a unix socket the host can
// reach), or "" when the machine has no engine.
func (m *Machine) DockerHost() string {
	if !m.spec.Docker {
		return ""
	}
	if m.spec.Systemd {
		return "unix://" + filepath.Join(m.sdDir(), "root", sdDockerSock)
	}
	return "unix://" + filepath.Join(m.dir, "docker.sock")
}

func (m *Machine) nsenterArgs() []string {
	return []string{"--net=" + m.Netns(), "--mount=" + m.MountNS(), "--uts=" + m.UTSNS(), "--"}
}

// Command returns a command that runs inside the machine (its network, mount and UTS
// namespaces), with a clean environment and / as working directory.
func (m *Machine) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	if m.spec.Systemd {
		return m.sdCommand(ctx, name, args...)
	}
	cmd := exec.CommandContext(ctx, "nsenter", append(append(m.nsenterArgs(), name), args...)...)
	cmd.Env = machineEnv()
	cmd.Dir = "/"
	return cmd
}

// Exec runs a program inside the machine and returns its combined output; the error names the
// machine and the command and carries the output.
func (m *Machine) Exec(ctx context.Context, name string, args ...string) (string, error) {
	cmd := m.Command(ctx, name, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %s %s: %w: %s", m.Name, name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// ExecStdin is Exec with stdin on the program's standard input: a secret (a join token) goes
// there, not on the command line, where every user of the machine can read it.
func (m *Machine) ExecStdin(ctx context.Context, stdin []byte, name string, args ...string) (string, error) {
	cmd := m.Command(ctx, name, args...)
	cmd.Stdin = bytes.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: %s %s: %w: %s", m.Name, name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// Run runs a shell script inside the machine and returns its combined output.
func (m *Machine) Run(ctx context.Context, script string, args ...string) (string, error) {
	return m.Exec(ctx, "/bin/sh", append([]string{"-c", script, "sh"}, args...)...)
}

// WriteFile writes a file inside the machine (creating its directory), atomically by rename.
func (m *Machine) WriteFile(ctx context.Context, path string, data []byte, mode os.FileMode) error {
	cmd := m.Command(ctx, "/bin/sh", "-c",
		`set -e; mkdir -p "$(dirname "$1")"; cat > "$1.meshlab-tmp"; chmod "$2" "$1.meshlab-tmp"; mv -f "$1.meshlab-tmp" "$1"`,
		"sh", path, strconv.FormatUint(uint64(mode.Perm()), 8))
	cmd.Stdin = bytes.NewReader(data)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: write %s: %w: %s", m.Name, path, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// ReadFile reads a file inside the machine.
func (m *Machine) ReadFile(ctx context.Context, path string) ([]byte, error) {
	cmd := m.Command(ctx, "cat", "--", path)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: read %s: %w: %s", m.Name, path, err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// create makes the machine: its directories, network namespace, underlay port, UTS namespace and
// a fresh mount namespace. The machine is powered off afterwards: nothing runs in it. One
// sequence of small steps, each undone by teardown in reverse, so it stays in one place.
func (m *Machine) create(ctx context.Context) error {
	if len(m.Name) > 15 {
		return fmt.Errorf("machine name %q: at most 15 characters", m.Name)
	}
	for _, d := range []string{"etc-upper", "etc-work", "usr-local-upper", "usr-local-work", "var-lib-upper", "var-lib-work", "srv-upper", "srv-work", "docker", "log", "units"} {
		if err := os.MkdirAll(filepath.Join(m.dir, d), 0o755); err != nil {
			return fmt.Errorf("%s: %w", m.Name, err)
		}
	}
	// Files the machine has from its first boot on, written into the upper layer before it is
	// mounted (writing an upper layer under a mounted overlay is undefined).
	upper := filepath.Join(m.dir, "etc-upper")
	hosts := "127.0.0.1\tlocalhost\n"
	for _, o := range m.lab.st.Machines {
		hosts += o.Addr + "\t" + o.Name + "\n"
	}
	files := map[string]string{
		"hostname":           m.Name + "\n",
		"hosts":              hosts,
		"docker/daemon.json": "{}\n",
	}
	if m.spec.Docker {
		files["systemd/system/docker.service"] = m.dockerUnit()
	}
	for p, c := range files {
		full := filepath.Join(upper, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			return fmt.Errorf("%s: %w", m.Name, err)
		}
	}
	// meshd's own places start empty on every machine, whatever the host holds there (a seal
	// key, a data dir): an opaque directory in the upper layer hides the host's.
	for _, p := range []string{filepath.Join(upper, "meshd"), filepath.Join(m.dir, "var-lib-upper", "meshd")} {
		if err := os.MkdirAll(p, 0o700); err != nil {
			return fmt.Errorf("%s: %w", m.Name, err)
		}
		if err := syscall.Setxattr(p, "trusted.overlay.opaque", []byte("y"), 0); err != nil {
			return fmt.Errorf("%s: make %s opaque: %w", m.Name, p, err)
		}
	}
	ns := m.lab.nsName(m.Name)
	if _, err := run(ctx, "ip", "netns", "add", ns); err != nil {
		return fmt.Errorf("%s: %w", m.Name, err)
	}
	if _, err := run(ctx, "ip", "-n", m.lab.st.Switch, "link", "add", m.Name, "type", "veth", "peer", "name", "eth0", "netns", ns); err != nil {
		return fmt.Errorf("%s: underlay port: %w", m.Name, err)
	}
	if _, err := run(ctx, "ip", "-n", m.lab.st.Switch, "link", "set", m.Name, "master", BridgeName, "up"); err != nil {
		return fmt.Errorf("%s: underlay port: %w", m.Name, err)
	}
	if m.spec.Systemd {
		// Its network as a boot leaves it (the namespace machines' Boot does this), then systemd.
		if err := m.upNetwork(ctx); err != nil {
			return err
		}
		return m.sdCreate(ctx)
	}
	for _, f := range []string{m.MountNS(), m.UTSNS()} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			return err
		}
	}
	if _, err := run(ctx, "unshare", "--uts="+m.UTSNS(), "hostname", m.Name); err != nil {
		return fmt.Errorf("%s: uts namespace: %w", m.Name, err)
	}
	if err := m.newMountNS(ctx); err != nil {
		return err
	}
	// The machine's enabled units are the lab's, not the host's: start from none but ufw's
	// (Debian enables ufw.service; /etc/ufw/ufw.conf says whether it does anything).
	script := `set -e
rm -rf /etc/systemd/system/*.target.wants
mkdir -p /etc/systemd/system/multi-user.target.wants /etc/systemd/system/sysinit.target.wants
ln -s /lib/systemd/system/ufw.service /etc/systemd/system/multi-user.target.wants/ufw.service
# Quiet, and nothing global: the machine's ufw touches only its own namespace.
sed -i 's/^IPV6=.*/IPV6=no/; s|^IPT_SYSCTL=.*|IPT_SYSCTL=/etc/ufw/meshlab-sysctl.conf|; s/^IPT_MODULES=.*/IPT_MODULES=""/' /etc/default/ufw
: > /etc/ufw/meshlab-sysctl.conf
sed -i 's/^ENABLED=.*/ENABLED=no/' /etc/ufw/ufw.conf
`
	if m.spec.Docker {
		script += "ln -s /etc/systemd/system/docker.service /etc/systemd/system/multi-user.target.wants/docker.service\n"
	}
	if _, err := m.Run(ctx, script); err != nil {
		return err
	}
	return nil
}

func (m *Machine) dockerUnit() string {
	return fmt.Sprintf(`[Unit]
Description=Docker Application Container Engine (lab machine %[1]s)

[Service]
Type=notify
ExecStart=/usr/sbin/dockerd --config-file /etc/docker/daemon.json --data-root %[2]s/docker --exec-root /run/docker --pidfile /run/docker.pid -H unix:///run/docker.sock -H unix://%[2]s/docker.sock --storage-driver vfs --cgroup-parent %[3]s

[Install]
WantedBy=multi-user.target
`, m.Name, m.dir, m.lab.nsName(m.Name))
}

// mountSetup runs in a new mount namespace: drop every mount but the root, /proc, /sys and /dev
// (so the machine holds no reference to other namespaces' files or the host's container
// mounts), then give it its own /etc, /usr/local, /var/lib and /srv (overlays on the host's; /srv
// because containers' volumes live there) and /run.
const mountSetup = `set -e
d="$1"
awk '{print $5}' /proc/self/mountinfo | sort -r | while read -r mp; do
  case "$mp" in /|/proc|/proc/*|/dev|/dev/*|/sys|/sys/*) ;; *) umount -l "$mp" 2>/dev/null || true ;; esac
done
for p in etc usr/local var/lib srv; do
  [ -d "/$p" ] || continue
  n=$(echo "$p" | tr / -)
  rm -rf "$d/$n-work/work"
  mount -t overlay overlay -o "lowerdir=/$p,upperdir=$d/$n-upper,workdir=$d/$n-work" "/$p"
done
mount -t tmpfs -o mode=0755,size=256m tmpfs /run
mkdir -p /run/lock /run/wireguard /var/lib/meshd
`

func (m *Machine) newMountNS(ctx context.Context) error {
	if isMountpoint(m.MountNS()) {
		if _, err := run(ctx, "umount", m.MountNS()); err != nil {
			return fmt.Errorf("%s: old mount namespace: %w", m.Name, err)
		}
	}
	cmd := exec.CommandContext(ctx, "unshare", "--mount="+m.MountNS(), "--propagation", "private", "/bin/sh", "-c", mountSetup, "sh", m.dir)
	cmd.Env = machineEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: mount namespace at %s: %w: %s", m.Name, m.MountNS(), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// matcher finds every process of the machine: in its namespaces, in its containers, and their
// descendants. The lab's probes are not the machine's.
func (m *Machine) matcher() matcher {
	ns := map[uint64]bool{}
	for _, f := range []string{m.Netns(), m.MountNS()} {
		if ino, err := nsInode(f); err == nil {
			ns[ino] = true
		}
	}
	ex := map[int]bool{}
	m.lab.mu.Lock()
	for _, p := range m.lab.st.Probes {
		ex[p.PID] = true
	}
	m.lab.mu.Unlock()
	return matcher{ns: ns, roots: []string{m.dir + "/"}, cgroupTok: []string{m.lab.nsName(m.Name)}, exclude: ex}
}

// Processes lists the pids of every process running in the machine.
func (m *Machine) Processes() []int {
	p := m.matcher().pids()
	sort.Ints(p)
	return p
}

// Stop powers the machine off: every process in it is killed, the kernel state a reboot loses
// (netfilter tables, links, addresses, conntrack, forwarding) is cleared, and /run is gone. Its
// disk (/etc, /usr/local, /var/lib, Docker data) stays. Boot starts it again.
func (m *Machine) Stop(ctx context.Context) error {
	if m.spec.Systemd {
		sm, err := m.sd()
		if err != nil {
			return err
		}
		return sm.PowerOff(sdBoot)
	}
	if err := killAll(ctx, m.matcher(), "machine "+m.Name); err != nil {
		return err
	}
	// What a power cycle loses: every firewall rule (nft, and legacy iptables beside it, with
	// the chains' policies back to ACCEPT), every policy rule but the kernel's three, every link
	// but the two the lab wires, addresses, routes, conntrack and forwarding sysctls.
	clear := `nft flush ruleset 2>/dev/null || true
for x in iptables-legacy ip6tables-legacy; do
  command -v $x >/dev/null || continue
  for t in filter nat mangle raw; do $x -t $t -F 2>/dev/null; $x -t $t -X 2>/dev/null; done
  for c in INPUT FORWARD OUTPUT; do $x -P $c ACCEPT 2>/dev/null; done
done
for f in -4 -6; do
  ip $f rule flush 2>/dev/null || true
  ip $f rule add priority 32766 table main 2>/dev/null || true
done
ip -4 rule add priority 32767 table default 2>/dev/null || true
for l in $(ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1); do
  case "$l" in lo|eth0) ;; *) ip link del "$l" 2>/dev/null || true ;; esac
done
ip addr flush dev eth0
ip link set eth0 down
ip route flush table main
conntrack -F >/dev/null 2>&1 || true
sysctl -qw net.ipv4.ip_forward=0
sysctl -qw net.ipv6.conf.all.forwarding=0 net.ipv4.conf.all.src_valid_mark=0 2>/dev/null || true
`
	cmd := exec.CommandContext(ctx, "nsenter", "--net="+m.Netns(), "--", "/bin/sh", "-c", clear)
	cmd.Env = machineEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: clear kernel state: %w: %s", m.Name, err, out)
	}
	_ = os.RemoveAll(filepath.Join(m.dir, "units"))
	_ = os.MkdirAll(filepath.Join(m.dir, "units"), 0o755)
	return m.newMountNS(ctx)
}

// Reboot stops the machine and boots it again.
func (m *Machine) Reboot(ctx context.Context) error {
	if m.spec.Systemd {
		sm, err := m.sd()
		if err != nil {
			return err
		}
		if err := sm.Reboot(sdBoot); err != nil {
			return err
		}
		if m.spec.Docker {
			return m.waitDocker(ctx)
		}
		return nil
	}
	if err := m.Stop(ctx); err != nil {
		return err
	}
	return m.Boot(ctx)
}

// CutOff unplugs the machine from the underlay (its port on the bridge goes down); the machine
// itself notices nothing but silence. Restore plugs it back in.
func (m *Machine) CutOff(ctx context.Context) error {
	_, err := run(ctx, "ip", "-n", m.lab.st.Switch, "link", "set", m.Name, "down")
	return err
}

// Restore undoes CutOff.
func (m *Machine) Restore(ctx context.Context) error {
	_, err := run(ctx, "ip", "-n", m.lab.st.Switch, "link", "set", m.Name, "up")
	return err
}

// Boot runs the machine's boot sequence: its network, then the units enabled in
// /etc/systemd/system/*.target.wants in the order a Debian boot reaches them — sysinit units (an
// nftables firewall), ufw, meshd's boot unit (the table its agent kept), wg-quick tunnels, the
// Docker engine (which starts the containers that have a restart policy), then every other unit
// (the meshd agent, the predecessor's daemons). A masked unit (UnitMasked) is not started.
func (m *Machine) Boot(ctx context.Context) error {
	if m.spec.Systemd {
		return m.sdBootUp(ctx)
	}
	if err := m.upNetwork(ctx); err != nil {
		return err
	}
	units, err := m.enabledUnits(ctx)
	if err != nil {
		return err
	}
	for _, u := range units {
		if m.UnitMasked(ctx, u) {
			continue // systemd starts no masked unit, wanted or not
		}
		if err := m.startUnit(ctx, u, false); err != nil {
			return err
		}
	}
	return nil
}

// upNetwork gives the machine's network what its configuration would at boot: lo, and eth0
// with its underlay addresses.
func (m *Machine) upNetwork(ctx context.Context) error {
	_, err := run(ctx, "ip", "netns", "exec", m.lab.nsName(m.Name), "sh", "-c", `set -e
ip link set lo up
ip addr replace "$1/24" dev eth0
ip addr replace "$2/64" dev eth0 nodad
ip link set eth0 up`, "sh", m.Addr.String(), m.Addr6.String())
	return err
}

func (m *Machine) waitDocker(ctx context.Context) error {
	deadline := time.Now().Add(45 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		if _, last = m.Docker(ctx, "version", "--format", "{{.Server.Version}}"); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	logb, _ := os.ReadFile(filepath.Join(m.dir, "log", "docker.log"))
	if len(logb) > 2000 {
		logb = logb[len(logb)-2000:]
	}
	return fmt.Errorf("%s: docker engine at %s not ready: %w; log tail: %s", m.Name, m.DockerHost(), last, logb)
}

// Docker runs the docker CLI against the machine's engine (from the host).
func (m *Machine) Docker(ctx context.Context, args ...string) (string, error) {
	if !m.spec.Docker {
		return "", fmt.Errorf("%s: has no docker engine", m.Name)
	}
	cmd := exec.CommandContext(ctx, "docker", append([]string{"-H", m.DockerHost()}, args...)...)
	cmd.Env = machineEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s: docker %s: %w: %s", m.Name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// ImportImage imports the lab's labsvc image into the machine's engine as ImageName, tagged
// also as every name in CatalogueImages.
func (m *Machine) ImportImage(ctx context.Context) error {
	if _, err := m.Docker(ctx, "import", "--change", `ENTRYPOINT ["/labsvc"]`, "--change", `CMD ["serve"]`,
		filepath.Join(m.lab.Dir, "bin", "labsvc-image.tar"), ImageName); err != nil {
		return err
	}
	for _, name := range CatalogueImages {
		if _, err := m.Docker(ctx, "import", "--change", `ENTRYPOINT ["/labsvc"]`, "--change", imageCmd[name],
			filepath.Join(m.lab.Dir, "bin", "labsvc-image.tar"), name); err != nil {
			return err
		}
	}
	return nil
}
