package systemd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// DefaultCache is where scripts/labroot.sh keeps the root (MESHD_LAB_CACHE overrides it there
// and here).
const DefaultCache = "/var/cache/meshd-lab"

// Tools are the host's commands a systemd machine needs.
var Tools = []string{"systemd-nspawn", "nsenter", "mount", "umount"}

// CachedRoot is the root scripts/labroot.sh built (root-current), or an error that says how to
// build it.
func CachedRoot() (string, error) {
	cache := os.Getenv("MESHD_LAB_CACHE")
	if cache == "" {
		cache = DefaultCache
	}
	root, err := filepath.EvalSymlinks(filepath.Join(cache, "root-current"))
	if err == nil {
		if _, err = os.Stat(filepath.Join(root, ".meshd-lab-root")); err == nil {
			return root, nil
		}
	}
	return "", fmt.Errorf("no lab root in %s (bash scripts/labroot.sh builds it, as root): %v", cache, err)
}

// Machine is one systemd machine: its overlay, and the supervisor that runs its nspawn. The
// supervisor is a process of its own (setsid, not the booting process's child), so a machine
// outlives what booted it, as a lab's machines outlive `meshlab up`: Attach finds it again by
// its directory. Everything the supervisor knows is in files there.
type Machine struct {
	Name string `json:"name"`
	// NetNS is the lab namespace the machine's network is (a name under /run/netns).
	NetNS string `json:"netns"`
	// Root is the machine's file system as the host sees it, mounted from Boot to Stop: a file
	// written under it is the machine's file, between boots too.
	Root string `json:"root"`
	// Dir is the machine's own directory: the overlay's layers, the supervisor's files, the log.
	Dir string `json:"dir"`
	// Binds are host directories the machine sees read-only at the same path (a lab's programs,
	// which its units name by the host's path; /tmp is the machine's own tmpfs).
	Binds []string `json:"binds,omitempty"`
}

// The supervisor's files in the machine's directory.
const (
	fileState      = "machine.json"   // the Machine, for Attach
	fileSupervisor = "supervisor.pid" // the supervisor's pid
	fileNspawn     = "nspawn.pid"     // the running nspawn's pid
	fileBooted     = "booted"         // when the running boot began (Unix seconds, nanoseconds)
	fileExit       = "exit"           // how the last boot ended (nspawn's status: 133 is a reboot)
	fileStop       = "stop"           // present: the next boot's end is the last
	fileLog        = "nspawn.log"
)

// Boot mounts an overlay of the cached root at name's own directory and boots it in the network
// namespace netns, waiting (within) until systemd says the system is running.
func Boot(name, netns string, within time.Duration) (*Machine, error) {
	dir, err := os.MkdirTemp("", "meshd-lab-"+name+"-")
	if err != nil {
		return nil, err
	}
	return BootAt(dir, name, netns, within)
}

// BootAt is Boot with the machine's directory given (it must be empty or not there yet), and
// host directories bound into it read-only at their own paths: a lab keeps its machines under
// its own directory, and its programs where its units name them.
func BootAt(dir, name, netns string, within time.Duration, binds ...string) (*Machine, error) {
	lower, err := CachedRoot()
	if err != nil {
		return nil, err
	}
	m := &Machine{Name: name, NetNS: netns, Root: filepath.Join(dir, "root"), Dir: dir, Binds: binds}
	for _, d := range []string{"upper", "work", "root"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	if err := m.dockerFiles(filepath.Join(dir, "upper")); err != nil {
		return nil, err
	}
	opts := "lowerdir=" + lower + ",upperdir=" + filepath.Join(dir, "upper") + ",workdir=" + filepath.Join(dir, "work")
	if out, err := exec.Command("mount", "-t", "overlay", "overlay", "-o", opts, m.Root).CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("overlay for %s: %v: %s", name, err, out)
	}
	b, _ := json.Marshal(m)
	if err := os.WriteFile(m.file(fileState), b, 0o644); err != nil {
		m.Stop()
		return nil, err
	}
	if err := m.start(); err != nil {
		m.Stop()
		return nil, err
	}
	if err := m.WaitRunning(within); err != nil {
		return m, err
	}
	return m, nil
}

// Attach is the machine booted earlier (by this process or another) whose directory is dir.
func Attach(dir string) (*Machine, error) {
	b, err := os.ReadFile(filepath.Join(dir, fileState))
	if err != nil {
		return nil, fmt.Errorf("no systemd machine at %s: %w", dir, err)
	}
	var m Machine
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("systemd machine at %s: %w", dir, err)
	}
	return &m, nil
}

func (m *Machine) file(name string) string { return filepath.Join(m.Dir, name) }

// supervisor boots the machine, and boots it again each time it reboots, as a machine's
// firmware would: nspawn runs in the background so its pid is known, and between boots the
// network loses what a reboot loses (clearNetwork) and the machine's containers' cgroups go. It
// ends with the first boot that ends otherwise than by a reboot, or after Stop asked.
const supervisor = `d="$1"; ns="$2"; cg="$3"; shift 3
echo $$ > "$d/` + fileSupervisor + `"
while :; do
  date +%s.%N > "$d/` + fileBooted + `"
  echo "--- boot at $(date -u +%Y-%m-%dT%H:%M:%S.%NZ)" >> "$d/` + fileLog + `"
  env -u CLEAR "$@" >> "$d/` + fileLog + `" 2>&1 < /dev/null &
  echo $! > "$d/` + fileNspawn + `"
  wait $!
  rc=$?
  rm -f "$d/` + fileNspawn + `"
  echo $rc > "$d/` + fileExit + `"
  for top in /sys/fs/cgroup/*/"$cg"; do
    [ -d "$top" ] && find "$top" -depth -type d -exec rmdir {} + 2>/dev/null
  done
  [ "$rc" = 133 ] && [ ! -e "$d/` + fileStop + `" ] || exit 0
  ip netns exec "$ns" sh -c "$CLEAR" >> "$d/` + fileLog + `" 2>&1
done
`

// start runs the supervisor, detached (its own session, the booting process's nothing), over
// systemd-nspawn on the machine's root. nspawn registers with no machined and keeps to the
// caller's unit (the host need not be run by systemd); the console is passive and the boot's
// messages go to the log (LogTail).
func (m *Machine) start() error {
	for _, f := range []string{fileStop, fileExit, fileNspawn, fileSupervisor} {
		_ = os.Remove(m.file(f))
	}
	// CAP_NET_ADMIN: nspawn keeps it only for a network it makes itself (--private-network and
	// the like), not for one given by --network-namespace-path, so without it every unit in the
	// machine is refused what a machine's own network needs: wireguard-go's TUNSETIFF ioctl on
	// /dev/net/tun fails "operation not permitted" (the device node is there and no device cgroup
	// applies: this host's devices controller is at its root), and so do wg-quick's ip commands and
	// nftables' or ufw's rules. The capability reaches no further than the machine's namespace.
	nspawn := []string{"systemd-nspawn", "--quiet", "--register=no", "--keep-unit", "--boot",
		"--console=passive", "--machine=" + m.Name, "--directory=" + m.Root,
		"--network-namespace-path=/run/netns/" + m.NetNS, "--capability=CAP_NET_ADMIN",
		// runc joins a session keyring for each container, and nspawn's seccomp filter refuses
		// the keyring calls ("unable to join session keyring: operation not permitted").
		"--system-call-filter=add_key keyctl request_key"}
	for _, b := range m.Binds {
		nspawn = append(nspawn, "--bind-ro="+b)
	}
	cmd := exec.Command("setsid", append([]string{"-f", "sh", "-c", supervisor, "sh", m.Dir, m.NetNS, m.cgroup()}, nspawn...)...)
	// SYSTEMD_NSPAWN_API_VFS_WRITABLE=network: /proc/sys/net writable in the machine, as on a real
	// one (nspawn grants it by itself only for a network it makes), so a unit's sysctl for its
	// own network (PiVPN's ip_forward) applies to the machine's namespace.
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "CLEAR=" + clearScript, "SYSTEMD_NSPAWN_API_VFS_WRITABLE=network"}
	logf, err := os.OpenFile(m.file(fileLog), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, logf, logf // files, not pipes: the supervisor outlives this call
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("systemd-nspawn %s: %w: %s", m.Name, err, m.LogTail())
	}
	deadline := time.Now().Add(10 * time.Second)
	for m.nspawnPID() == 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("systemd-nspawn %s did not start: %s", m.Name, m.LogTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// pidIn is the live pid a file of the machine's directory names, 0 when none.
func (m *Machine) pidIn(name string) int {
	b, err := os.ReadFile(m.file(name))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 || syscall.Kill(pid, 0) != nil {
		return 0
	}
	return pid
}

func (m *Machine) nspawnPID() int { return m.pidIn(fileNspawn) }

// Booted is when the running boot began: a boot's figures count from here.
func (m *Machine) Booted() time.Time {
	b, _ := os.ReadFile(m.file(fileBooted))
	f, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
	if err != nil {
		return time.Time{}
	}
	sec := int64(f)
	return time.Unix(sec, int64((f-float64(sec))*1e9))
}

// lastExit is how the last boot ended ("" while none has).
func (m *Machine) lastExit() string {
	b, _ := os.ReadFile(m.file(fileExit))
	return strings.TrimSpace(string(b))
}

// Leader is the machine's PID 1 as the host numbers it (nspawn's child), 0 while it is down.
func (m *Machine) Leader() int {
	pid := m.nspawnPID()
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return 0
	}
	for _, f := range strings.Fields(string(b)) {
		if n, err := strconv.Atoi(f); err == nil {
			if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", n)); strings.TrimSpace(string(comm)) == "systemd" {
				return n
			}
		}
	}
	return 0
}

// Env is the whole environment a command run in the machine has.
var Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8", "TERM=dumb", "HOME=/root"}

// Command is args run in the machine: every namespace of its PID 1, and a clean environment.
func (m *Machine) Command(ctx context.Context, args ...string) (*exec.Cmd, error) {
	pid := m.Leader()
	if pid == 0 {
		return nil, fmt.Errorf("machine %s is not up", m.Name)
	}
	argv := append([]string{"-t", strconv.Itoa(pid), "-a", "env", "-i"}, Env...)
	cmd := exec.CommandContext(ctx, "nsenter", append(argv, args...)...)
	cmd.Env = []string{}
	return cmd, nil
}

// Run runs args in the machine and returns its standard output and standard error together;
// an error names the command and carries that output.
func (m *Machine) Run(ctx context.Context, args ...string) (string, error) {
	cmd, err := m.Command(ctx, args...)
	if err != nil {
		return "", err
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s: %s: %w: %s", m.Name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return out.String(), nil
}

// State is `systemctl is-system-running` in the machine ("" while it cannot be asked).
func (m *Machine) State() string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, _ := m.Run(ctx, "systemctl", "is-system-running")
	return strings.TrimSpace(out)
}

// WaitRunning waits (within) until the machine's systemd says running. A boot that settles
// degraded fails at once, naming the failed units.
func (m *Machine) WaitRunning(within time.Duration) error {
	deadline := time.Now().Add(within)
	var state string
	for time.Now().Before(deadline) {
		if m.pidIn(fileSupervisor) == 0 && m.nspawnPID() == 0 {
			return fmt.Errorf("machine %s: nspawn exited while booting (status %s): %s", m.Name, m.lastExit(), m.LogTail())
		}
		state = m.State()
		switch state {
		case "running":
			return nil
		case "degraded":
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			failed, _ := m.Run(ctx, "systemctl", "--failed", "--no-legend", "--plain")
			// Each failed unit's own journal says why: a boot that failed once is rarely
			// reproduced on demand.
			why := ""
			for _, line := range strings.Split(strings.TrimSpace(failed), "\n") {
				if f := strings.Fields(line); len(f) > 0 {
					j, _ := m.Run(ctx, "journalctl", "-b", "--no-pager", "-n", "15", "-u", f[0])
					why += "\n" + f[0] + ":\n" + j
				}
			}
			cancel()
			return fmt.Errorf("machine %s booted degraded; failed units:\n%s%s", m.Name, failed, why)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("machine %s not running after %s (is-system-running: %q): %s", m.Name, within, state, m.LogTail())
}

// Reboot reboots the machine for real: `systemctl reboot` inside, nspawn exits (status 133, a
// reboot), the supervisor clears what a reboot loses from the network (clearScript) and boots the
// machine again on the same root; it waits (within) for running. Booted is when the new boot
// started.
func (m *Machine) Reboot(within time.Duration) error {
	old := m.nspawnPID()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_, err := m.Run(ctx, "systemctl", "reboot")
	cancel()
	if err != nil {
		return err
	}
	deadline := time.Now().Add(within)
	for {
		if now := m.nspawnPID(); now != 0 && now != old && m.Leader() != 0 {
			break
		}
		if m.pidIn(fileSupervisor) == 0 {
			return fmt.Errorf("machine %s: nspawn ended with status %s after systemctl reboot, not 133 (a reboot): %s", m.Name, m.lastExit(), m.LogTail())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("machine %s: not booted again %s after systemctl reboot: %s", m.Name, within, m.LogTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if e := m.lastExit(); e != "133" {
		return fmt.Errorf("machine %s: nspawn ended with status %s after systemctl reboot, not 133 (a reboot): %s", m.Name, e, m.LogTail())
	}
	return m.WaitRunning(time.Until(deadline))
}

// PowerOff shuts the machine down for good (`systemctl poweroff`: the supervisor ends with the
// boot), waiting (within); its overlay stays mounted, so PowerOn boots it again as it was.
func (m *Machine) PowerOff(within time.Duration) error {
	if m.nspawnPID() == 0 {
		return nil
	}
	_ = os.WriteFile(m.file(fileStop), nil, 0o644)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_, _ = m.Run(ctx, "systemctl", "poweroff")
	cancel()
	for deadline := time.Now().Add(within); m.pidIn(fileSupervisor) != 0 || m.nspawnPID() != 0; {
		if time.Now().After(deadline) {
			return fmt.Errorf("machine %s: still up %s after systemctl poweroff: %s", m.Name, within, m.LogTail())
		}
		time.Sleep(50 * time.Millisecond)
	}
	m.removeCgroups()
	return exec.Command("ip", "netns", "exec", m.NetNS, "sh", "-c", clearScript).Run()
}

// PowerOn boots a machine PowerOff shut down, waiting (within) for running.
func (m *Machine) PowerOn(within time.Duration) error {
	if m.nspawnPID() != 0 {
		return nil
	}
	if err := m.start(); err != nil {
		return err
	}
	return m.WaitRunning(within)
}

// clearScript drops what a real reboot loses from the machine's network, which is a lab
// namespace that outlives nspawn: netfilter's rules (so a firewall is back only if its own unit
// loads it), every link but lo and the lab's cables, eth* (a TUN goes with its wireguard-go, a
// bridge would not) and the connection tracking table. eth0's addresses and routes stay: they
// stand for the network's own configuration, which a real machine sets up again at boot.
const clearScript = `nft flush ruleset
for l in $(ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1); do
  case "$l" in lo|eth*) ;; *) ip link del "$l" 2>/dev/null || true ;; esac
done
conntrack -F >/dev/null 2>&1 || true
`

// cgroupsUnit makes the host's cgroup v1 controllers writable in the machine before its engine
// starts. nspawn mounts them read-only (it delegates only name=systemd), so runc could make no
// container's cgroup ("mkdir /sys/fs/cgroup/cpuset/...: read-only file system"). Each is mounted
// again read-write, or remounted where the mount point is busy, a few times over; the unit fails,
// naming them, if any is still read-only.
const cgroupsUnit = `[Unit]
Description=the lab's cgroup controllers, writable for the machine's Docker engine
DefaultDependencies=no
Before=containerd.service docker.service
After=local-fs.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/sbin/meshlab-cgroups

[Install]
WantedBy=sysinit.target
`

// cgroupsScript is cgroupsUnit's program (a file, so systemd's own $ and % expansion leaves it
// alone).
const cgroupsScript = `#!/bin/sh
for try in 1 2 3 4 5; do
  ro=
  for c in /sys/fs/cgroup/*/; do
    c=${c%/}
    n=$(basename "$c")
    case "$n" in systemd | unified) continue ;; esac
    grep -q " $c cgroup rw" /proc/mounts && continue
    { umount "$c" && mount -t cgroup -o "$n" cgroup "$c"; } 2>/dev/null || mount -o remount,rw "$c" 2>/dev/null || ro="$ro $n"
  done
  [ -z "$ro" ] && exit 0
  sleep 0.2
done
echo "meshlab-cgroups: still read-only:$ro" >&2
exit 1
`

// dockerFiles writes into the machine's upper layer, before its first boot, what its Docker
// engine needs under nspawn: cgroupsUnit and its script, enabled; a daemon.json that puts every container's
// cgroup under meshd-lab-NAME (removed when the machine stops or reboots) and uses vfs (overlay on
// the machine's overlay root is refused).
func (m *Machine) dockerFiles(upper string) error {
	files := map[string]string{
		"etc/systemd/system/meshlab-cgroups.service": cgroupsUnit,
		"etc/docker/daemon.json":                     fmt.Sprintf("{\"cgroup-parent\": \"/%s\", \"storage-driver\": \"vfs\"}\n", m.cgroup()),
	}
	files["usr/local/sbin/meshlab-cgroups"] = cgroupsScript
	for p, text := range files {
		full := filepath.Join(upper, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(full, []byte(text), 0o755); err != nil {
			return err
		}
	}
	wants := filepath.Join(upper, "etc/systemd/system/sysinit.target.wants")
	if err := os.MkdirAll(wants, 0o755); err != nil {
		return err
	}
	return os.Symlink("/etc/systemd/system/meshlab-cgroups.service", filepath.Join(wants, "meshlab-cgroups.service"))
}

// cgroup is the cgroup the machine's containers are under, in each of the host's controllers.
func (m *Machine) cgroup() string { return "meshd-lab-" + m.Name }

// removeCgroups removes what the machine's containers left in the host's cgroup controllers
// (empty once the machine is down), deepest first.
func (m *Machine) removeCgroups() {
	tops, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", m.cgroup()))
	for _, top := range tops {
		var dirs []string
		_ = filepath.WalkDir(top, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			_ = os.Remove(dirs[i])
		}
	}
}

// Stop shuts the machine down (SIGTERM to nspawn: an orderly poweroff, the supervisor told it
// is the last; SIGKILL to it and the machine's PID 1 after 30 s), unmounts its overlay and
// removes its directory. It is safe to call twice.
func (m *Machine) Stop() error {
	if m.Dir == "" {
		return nil
	}
	if _, err := os.Stat(m.Dir); err != nil {
		return nil
	}
	_ = os.WriteFile(m.file(fileStop), nil, 0o644)
	if pid := m.nspawnPID(); pid != 0 {
		leader := m.Leader()
		_ = syscall.Kill(pid, syscall.SIGTERM)
		deadline := time.Now().Add(30 * time.Second)
		for m.nspawnPID() != 0 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if m.nspawnPID() != 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			if leader > 0 {
				_ = syscall.Kill(leader, syscall.SIGKILL)
			}
		}
	}
	for deadline := time.Now().Add(10 * time.Second); m.pidIn(fileSupervisor) != 0 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	m.removeCgroups()
	var err error
	if out, e := exec.Command("umount", m.Root).CombinedOutput(); e != nil && !strings.Contains(string(out), "not mounted") {
		err = fmt.Errorf("umount %s: %v: %s", m.Root, e, out)
	}
	if err == nil {
		err = os.RemoveAll(m.Dir)
		m.Dir = ""
	}
	return err
}

// CopyIn copies the host's file src to path in the machine (mode kept).
func (m *Machine) CopyIn(src, path string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	dst := filepath.Join(m.Root, path)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, b, st.Mode().Perm())
}

// LogTail is the end of nspawn's log (its own messages; the boot's are in the machine's journal).
func (m *Machine) LogTail() string {
	b, _ := os.ReadFile(m.file(fileLog))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}
