package lab

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
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

	"meshd/packaging"
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
	return "unix://" + filepath.Join(m.dir, "docker.sock")
}

func (m *Machine) nsenterArgs() []string {
	return []string{"--net=" + m.Netns(), "--mount=" + m.MountNS(), "--uts=" + m.UTSNS(), "--"}
}

// Command returns a command that runs inside the machine (its network, mount and UTS
// namespaces), with a clean environment and / as working directory.
func (m *Machine) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
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
mkdir -p /run/lock /run/wireguard /run/meshd /var/lib/meshd
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
	if err := killAll(ctx, m.matcher(), "machine "+m.Name); err != nil {
		return err
	}
	clear := `nft flush ruleset 2>/dev/null || true
for l in $(ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1); do
  case "$l" in lo|eth0) ;; *) ip link del "$l" 2>/dev/null || true ;; esac
done
ip addr flush dev eth0
ip link set eth0 down
ip route flush table main
conntrack -F >/dev/null 2>&1 || true
sysctl -qw net.ipv4.ip_forward=0
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
// (the meshd agent, the predecessor's daemons).
func (m *Machine) Boot(ctx context.Context) error {
	if _, err := m.Run(ctx, `set -e
ip link set lo up
ip addr replace "$1/24" dev eth0
ip addr replace "$2/64" dev eth0 nodad
ip link set eth0 up`, m.Addr.String(), m.Addr6.String()); err != nil {
		return err
	}
	units, err := m.enabledUnits(ctx)
	if err != nil {
		return err
	}
	for _, u := range units {
		if err := m.startUnit(ctx, u, false); err != nil {
			return err
		}
	}
	return nil
}

func (m *Machine) enabledUnits(ctx context.Context) ([]string, error) {
	out, err := m.Run(ctx, `for t in sysinit multi-user; do for f in /etc/systemd/system/$t.target.wants/*.service; do if [ -e "$f" ] || [ -L "$f" ]; then echo "$t $(basename "$f")"; fi; done; done`)
	if err != nil {
		return nil, err
	}
	rank := func(t, u string) int {
		switch {
		case t == "sysinit" && u != bootUnit:
			return 0
		case u == "ufw.service":
			return 1
		case u == bootUnit:
			// WantedBy=sysinit.target, but After= every firewall unit (a flush in the found
			// firewall's own load would drop what it loads) and Before=docker.service.
			return 2
		case strings.HasPrefix(u, "wg-quick@"):
			return 2
		case u == "docker.service":
			return 3
		}
		return 4
	}
	type tu struct {
		r int
		u string
	}
	var list []tu
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 {
			list = append(list, tu{rank(f[0], f[1]), f[1]})
		}
	}
	sort.Slice(list, func(i, j int) bool {
		if list[i].r != list[j].r {
			return list[i].r < list[j].r
		}
		return list[i].u < list[j].u
	})
	names := make([]string, len(list))
	for i, x := range list {
		names[i] = x.u
	}
	return names, nil
}

// bootUnit is meshd's boot unit (agent.BootUnitName), which the boot orders by its After= and
// Before= rather than by its target.
const bootUnit = "meshd-boot.service"

// invocationID is a fresh 128-bit id in hex, as systemd's $INVOCATION_ID.
func invocationID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// unit is the part of a systemd unit the lab's boot honours.
type unit struct {
	name       string
	oneshot    bool
	notify     bool // Type=notify: started once it sends READY=1 to $NOTIFY_SOCKET
	execStart  []string
	execStop   []string
	execReload []string
	env        []string
}

func (m *Machine) readUnit(ctx context.Context, name string) (unit, error) {
	u := unit{name: name}
	inst := ""
	paths := []string{"/etc/systemd/system/" + name, "/lib/systemd/system/" + name}
	if at := strings.IndexByte(name, '@'); at > 0 {
		inst = strings.TrimSuffix(name[at+1:], ".service")
		tmpl := name[:at+1] + ".service"
		paths = append(paths, "/etc/systemd/system/"+tmpl, "/lib/systemd/system/"+tmpl)
	}
	var text []byte
	var err error
	for _, p := range paths {
		if text, err = m.ReadFile(ctx, p); err == nil {
			break
		}
	}
	if err != nil {
		own, _ := m.Run(ctx, `cd /etc/systemd/system 2>/dev/null && ls *.service 2>/dev/null | tr '\n' ' '`)
		return u, fmt.Errorf("%s: no unit %s in /etc/systemd/system or /lib/systemd/system (the machine's own units: %s)", m.Name, name, strings.TrimSpace(own))
	}
	// Drop-ins (NAME.d/*.conf, in name order) come after the unit, as systemd reads them: an empty
	// ExecStart= there clears the unit's, so the next ExecStart= replaces it.
	dropins, _ := m.Run(ctx, `for f in "/etc/systemd/system/$1.d"/*.conf; do [ -f "$f" ] && { cat "$f"; echo; }; done; true`, name)
	for _, line := range strings.Split(string(text)+"\n"+dropins, "\n") {
		line = strings.TrimSpace(line)
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		v = strings.ReplaceAll(strings.TrimSpace(v), "%i", inst)
		v = strings.ReplaceAll(v, "%I", inst)
		cmd := strings.TrimLeft(v, "-@+!:")
		switch strings.TrimSpace(k) {
		case "Type":
			u.oneshot, u.notify = v == "oneshot", v == "notify"
		case "ExecStart":
			u.execStart = appendOrReset(u.execStart, cmd)
		case "ExecStop":
			u.execStop = appendOrReset(u.execStop, cmd)
		case "ExecReload":
			u.execReload = appendOrReset(u.execReload, cmd)
		case "Environment":
			for _, kv := range strings.Fields(v) {
				u.env = append(u.env, strings.Trim(kv, `"`))
			}
		}
	}
	if len(u.execStart) == 0 {
		return u, fmt.Errorf("%s: unit %s has no ExecStart", m.Name, name)
	}
	return u, nil
}

// appendOrReset is systemd's rule for a list setting: an empty value clears it.
func appendOrReset(list []string, v string) []string {
	if v == "" {
		return nil
	}
	return append(list, v)
}

// NotifyTimeout is how long the lab waits for a Type=notify unit's READY=1 (systemd's
// TimeoutStartSec, shortened: a lab machine's record is small).
var NotifyTimeout = 90 * time.Second

// startUnit starts a unit as systemd would: a oneshot one's ExecStart lines run to their end; a
// long-running one is started detached, and a Type=notify one is waited for until it sends
// READY=1 (unless noBlock, as `systemctl start --no-block`). One sequence of the unit's start, so
// it stays one body.
func (m *Machine) startUnit(ctx context.Context, name string, noBlock bool) error {
	u, err := m.readUnit(ctx, name)
	if err != nil {
		return err
	}
	if u.oneshot {
		for _, line := range u.execStart {
			cmd := m.Command(ctx, "/bin/sh", "-c", line)
			cmd.Env = append(cmd.Env, u.env...)
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("%s: unit %s: %s: %w: %s", m.Name, name, line, err, strings.TrimSpace(string(out)))
			}
		}
		return nil
	}
	logf, err := os.OpenFile(filepath.Join(m.dir, "log", strings.TrimSuffix(name, ".service")+".log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	// A long-running unit: its own session, so Stop can signal the whole group, and detached from
	// the caller, so it outlives `meshlab up`.
	cmd := exec.Command("nsenter", append(m.nsenterArgs(), "/bin/sh", "-c", "exec "+u.execStart[0])...)
	// systemd gives every unit it starts an INVOCATION_ID; the meshd agent reads it as "run by
	// systemd" and then writes and enables its boot unit, as it does on a real machine.
	cmd.Env = append(append(machineEnv(), "INVOCATION_ID="+invocationID()), u.env...)
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	var ns *notifySocket
	if u.notify {
		// $NOTIFY_SOCKET: a datagram socket in the machine's directory, which the machine's mount
		// namespace shows at the same path (as it does the Docker engine's socket).
		if ns, err = listenNotify(filepath.Join(m.dir, "units", name+".notify"), filepath.Join(m.dir, "units", name+".ready")); err != nil {
			return fmt.Errorf("%s: unit %s: %w", m.Name, name, err)
		}
		cmd.Env = append(cmd.Env, "NOTIFY_SOCKET="+ns.path)
	}
	if err := cmd.Start(); err != nil {
		if ns != nil {
			ns.close()
		}
		return fmt.Errorf("%s: unit %s: %w", m.Name, name, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if err := os.WriteFile(filepath.Join(m.dir, "units", name+".pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		return err
	}
	if ns != nil {
		ready := make(chan error, 1)
		go func() { ready <- ns.waitReady(ctx, exited, NotifyTimeout) }()
		if noBlock {
			go func() { <-ready }()
		} else if err := <-ready; err != nil {
			return fmt.Errorf("%s: unit %s (Type=notify): %w; log tail:\n%s", m.Name, name, err, m.logTail(name, 2000))
		}
	}
	if name == "docker.service" {
		return m.waitDocker(ctx)
	}
	return nil
}

// logTail is the last n bytes of a long-running unit's log.
func (m *Machine) logTail(name string, n int) string {
	b, _ := os.ReadFile(filepath.Join(m.dir, "log", strings.TrimSuffix(name, ".service")+".log"))
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}

// ReadyStatus is what a Type=notify unit said with its last READY=1 since it was started (its
// STATUS=, or "" when it said none), and whether READY=1 arrived at all.
func (m *Machine) ReadyStatus(name string) (string, bool) {
	if !strings.HasSuffix(name, ".service") {
		name += ".service"
	}
	b, err := os.ReadFile(filepath.Join(m.dir, "units", name+".ready"))
	if err != nil {
		return "", false
	}
	for _, l := range strings.Split(string(b), "\n") {
		if s, ok := strings.CutPrefix(l, "STATUS="); ok {
			return s, true
		}
	}
	return "", true
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

// EnableService installs a unit file at /etc/systemd/system/NAME.service and enables it, so
// every boot starts it. execStart is one shell command line.
func (m *Machine) EnableService(ctx context.Context, name, execStart string, env ...string) error {
	text := "[Unit]\nDescription=" + name + "\n\n[Service]\nType=simple\n"
	for _, e := range env {
		text += "Environment=\"" + e + "\"\n"
	}
	text += "ExecStart=" + execStart + "\n\n[Install]\nWantedBy=multi-user.target\n"
	if err := m.WriteFile(ctx, "/etc/systemd/system/"+name+".service", []byte(text), 0o644); err != nil {
		return err
	}
	// The unit is written whole: no drop-in of an earlier one overrides it.
	_, err := m.Run(ctx, `rm -rf "/etc/systemd/system/$1.service.d"; ln -sf "/etc/systemd/system/$1.service" "/etc/systemd/system/multi-user.target.wants/$1.service"`, name)
	return err
}

// DisableService removes a unit from the boot (it keeps running until stopped).
func (m *Machine) DisableService(ctx context.Context, name string) error {
	_, err := m.Run(ctx, `rm -f "/etc/systemd/system/multi-user.target.wants/$1.service" "/etc/systemd/system/sysinit.target.wants/$1.service"`, name)
	return err
}

// StartService starts a unit now (NAME or NAME.service).
func (m *Machine) StartService(ctx context.Context, name string) error {
	if !strings.HasSuffix(name, ".service") {
		name += ".service"
	}
	return m.startUnit(ctx, name, false)
}

// StartServiceNoBlock starts a unit now without waiting for a Type=notify unit's READY=1, as
// `systemctl start --no-block` (READY is still recorded for ReadyStatus when it comes).
func (m *Machine) StartServiceNoBlock(ctx context.Context, name string) error {
	if !strings.HasSuffix(name, ".service") {
		name += ".service"
	}
	return m.startUnit(ctx, name, true)
}

// ReloadService runs a running unit's ExecReload (as `systemctl reload`), its $MAINPID the
// unit's process: for meshd.service a SIGHUP, which reads the config file again.
func (m *Machine) ReloadService(ctx context.Context, name string) error {
	if !strings.HasSuffix(name, ".service") {
		name += ".service"
	}
	u, err := m.readUnit(ctx, name)
	if err != nil {
		return err
	}
	if len(u.execReload) == 0 {
		return fmt.Errorf("%s: unit %s has no ExecReload", m.Name, name)
	}
	b, err := os.ReadFile(filepath.Join(m.dir, "units", name+".pid"))
	if err != nil {
		return fmt.Errorf("%s: unit %s is not running", m.Name, name)
	}
	pid := strings.TrimSpace(string(b))
	for _, line := range u.execReload {
		line = strings.NewReplacer("${MAINPID}", pid, "$MAINPID", pid).Replace(line)
		if _, err := m.Run(ctx, line); err != nil {
			return fmt.Errorf("unit %s: reload: %w", name, err)
		}
	}
	return nil
}

// StopService stops a unit now: a long-running one's process group gets SIGTERM, then SIGKILL;
// a oneshot one's ExecStop runs (wg-quick down, ufw-init stop, nft flush ruleset).
func (m *Machine) StopService(ctx context.Context, name string) error {
	if !strings.HasSuffix(name, ".service") {
		name += ".service"
	}
	pidFile := filepath.Join(m.dir, "units", name+".pid")
	b, err := os.ReadFile(pidFile)
	if errors.Is(err, os.ErrNotExist) {
		u, err := m.readUnit(ctx, name)
		if err != nil {
			return err
		}
		for _, line := range u.execStop {
			if _, err := m.Run(ctx, line); err != nil {
				return fmt.Errorf("unit %s: %w", name, err)
			}
		}
		return nil
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if pid <= 0 {
		return fmt.Errorf("%s: unit %s: bad pid file %s", m.Name, name, pidFile)
	}
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	deadline := time.Now().Add(15 * time.Second)
	for syscall.Kill(pid, 0) == nil && !isZombie(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	return os.Remove(pidFile)
}

func isZombie(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	k := strings.LastIndexByte(s, ')')
	return k > 0 && len(s) > k+2 && (s[k+2] == 'Z' || s[k+2] == 'X')
}

// AgentUnit is where the lab installs meshd's own unit, and AgentConfig the config file that
// unit runs the agent with when the caller gives no other flags.
const (
	AgentUnit   = "/etc/systemd/system/meshd.service"
	AgentConfig = "/etc/meshd/meshd.yaml"
	agentDropIn = "/etc/systemd/system/meshd.service.d/meshlab.conf"
)

// InstallAgent puts a meshd binary on the machine at /usr/local/bin/meshd, installs meshd's own
// unit running it with args (SetAgentUnit), enables it (so every boot starts it) and starts it
// now. The unit is Type=notify: InstallAgent returns once the agent sent READY=1 (a server once
// its record replayed: meshd commands are answered from then on).
func (m *Machine) InstallAgent(ctx context.Context, binary string, args ...string) error {
	b, err := os.ReadFile(binary)
	if err != nil {
		return fmt.Errorf("%s: agent binary %s: %w", m.Name, binary, err)
	}
	if err := m.WriteFile(ctx, "/usr/local/bin/meshd", b, 0o755); err != nil {
		return err
	}
	if err := m.SetAgentUnit(ctx, nil, args...); err != nil {
		return err
	}
	return m.StartService(ctx, "meshd")
}

// SetAgentUnit installs meshd.service as `meshd install-unit` writes it (packaging/meshd.service:
// Type=notify, ExecReload sends SIGHUP) for /usr/local/bin/meshd, and enables it. The unit runs
// `meshd agent --config FILE`; when args are other than that (the lab's agents run with flags),
// a drop-in (meshd.service.d/meshlab.conf) replaces its ExecStart with `/usr/local/bin/meshd
// ARGS...` and adds env, as an operator overrides a packaged unit. The running agent is not
// touched: StartService starts it.
func (m *Machine) SetAgentUnit(ctx context.Context, env []string, args ...string) error {
	config := AgentConfig
	own := len(args) == 3 && args[0] == "agent" && args[1] == "--config"
	if own {
		config = args[2]
	}
	if err := m.WriteFile(ctx, AgentUnit, []byte(packaging.UnitFor("/usr/local/bin/meshd", config)), 0o644); err != nil {
		return err
	}
	if _, err := m.Run(ctx, `rm -rf "$(dirname "$1")"`, agentDropIn); err != nil {
		return err
	}
	if !own || len(env) > 0 {
		text := "# meshlab: the lab's flags for this machine's agent\n[Service]\n"
		for _, e := range env {
			text += "Environment=\"" + e + "\"\n"
		}
		if !own {
			line := "/usr/local/bin/meshd"
			for _, a := range args {
				line += " " + shellQuote(a)
			}
			text += "ExecStart=\nExecStart=" + line + "\n"
		}
		if err := m.WriteFile(ctx, agentDropIn, []byte(text), 0o644); err != nil {
			return err
		}
	}
	_, err := m.Run(ctx, `ln -sf "$1" /etc/systemd/system/multi-user.target.wants/meshd.service`, AgentUnit)
	return err
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=,@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
