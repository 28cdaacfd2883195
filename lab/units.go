// The machine's systemd units as the lab plays them: which a boot starts and in what order, a
// unit file read, started (Type=notify waits for READY=1), reloaded and stopped, and meshd's own.

package lab

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
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
	// runDirs are RuntimeDirectory='s, made under /run with runDirMode before the unit starts.
	runDirs    []string
	runDirMode string
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
		v = unitUnescape(strings.TrimSpace(v), inst)
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
		case "RuntimeDirectory":
			u.runDirs = append(u.runDirs, strings.Fields(v)...)
		case "RuntimeDirectoryMode":
			u.runDirMode = v
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

// unitEscape writes a command line as a unit file must hold it for systemd to run it as given:
// its own specifiers (%s is the user's shell, %N a name) and variables ($VAR) written %% and $$.
func unitEscape(line string) string {
	return strings.NewReplacer("%", "%%", "$", "$$").Replace(line)
}

// unitUnescape is what systemd makes of a unit's value before it runs it, as far as the lab's
// units go: %i and %I the instance, %% and $$ a literal % and $.
func unitUnescape(v, inst string) string {
	return strings.NewReplacer("%%", "%", "$$", "$", "%i", inst, "%I", inst).Replace(v)
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
	if m.UnitMasked(ctx, name) {
		// systemctl's own words, so a test reads the refusal a real machine prints
		return fmt.Errorf("%s: Failed to start %s: Unit %s is masked. (/etc/systemd/system/%s is a link to /dev/null)", m.Name, name, name, name)
	}
	u, err := m.readUnit(ctx, name)
	if err != nil {
		return err
	}
	// RuntimeDirectory=: made under /run with its mode (0755 unless told), as systemd does.
	for _, d := range u.runDirs {
		mode := cmp.Or(u.runDirMode, "0755")
		if out, err := m.Run(ctx, `mkdir -p "/run/$1" && chmod "$2" "/run/$1"`, d, mode); err != nil {
			return fmt.Errorf("%s: unit %s: RuntimeDirectory=%s: %w: %s", m.Name, name, d, err, out)
		}
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

// UnitMasked reports whether a unit is masked, as `systemctl mask` leaves it: its
// /etc/systemd/system file a link to /dev/null. A boot skips a masked unit even where a target
// still wants it, and starting one is refused, as systemd does.
func (m *Machine) UnitMasked(ctx context.Context, name string) bool {
	if !strings.HasSuffix(name, ".service") {
		name += ".service"
	}
	out, err := m.Exec(ctx, "readlink", "-f", "/etc/systemd/system/"+name)
	return err == nil && strings.TrimSpace(out) == "/dev/null"
}

// UnitLog is the end (n bytes at most) of a unit's log: the lab's file for a namespace machine's
// long-running unit, the journal on a systemd machine.
func (m *Machine) UnitLog(name string, n int) string { return m.logTail(name, n) }

// logTail is the last n bytes of a long-running unit's log.
func (m *Machine) logTail(name string, n int) string {
	if m.spec.Systemd {
		return m.sdLogTail(name, n)
	}
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
	if m.spec.Systemd {
		return m.sdReady(name)
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

// EnableService installs a unit file at /etc/systemd/system/NAME.service and enables it, so
// every boot starts it. execStart is one shell command line.
func (m *Machine) EnableService(ctx context.Context, name, execStart string, env ...string) error {
	text := "[Unit]\nDescription=" + name + "\n\n[Service]\nType=simple\n"
	for _, e := range env {
		text += "Environment=\"" + e + "\"\n"
	}
	text += "ExecStart=" + unitEscape(execStart) + "\n\n[Install]\nWantedBy=multi-user.target\n"
	if err := m.WriteFile(ctx, "/etc/systemd/system/"+name+".service", []byte(text), 0o644); err != nil {
		return err
	}
	// The unit is written whole: no drop-in of an earlier one overrides it.
	_, err := m.Run(ctx, `rm -rf "/etc/systemd/system/$1.service.d"; ln -sf "/etc/systemd/system/$1.service" "/etc/systemd/system/multi-user.target.wants/$1.service"`, name)
	if err == nil && m.spec.Systemd {
		err = m.systemctl(ctx, "daemon-reload")
	}
	return err
}

// DisableService removes a unit from the boot (it keeps running until stopped).
func (m *Machine) DisableService(ctx context.Context, name string) error {
	_, err := m.Run(ctx, `rm -f "/etc/systemd/system/multi-user.target.wants/$1.service" "/etc/systemd/system/sysinit.target.wants/$1.service"`, name)
	if err == nil && m.spec.Systemd {
		err = m.systemctl(ctx, "daemon-reload")
	}
	return err
}

// StartService starts a unit now (NAME or NAME.service).
func (m *Machine) StartService(ctx context.Context, name string) error {
	if !strings.HasSuffix(name, ".service") {
		name += ".service"
	}
	if m.spec.Systemd {
		if err := m.systemctl(ctx, "start", name); err != nil {
			return err
		}
		if name == "docker.service" {
			return m.waitDocker(ctx)
		}
		return nil
	}
	return m.startUnit(ctx, name, false)
}

// StartServiceNoBlock starts a unit now without waiting for a Type=notify unit's READY=1, as
// `systemctl start --no-block` (READY is still recorded for ReadyStatus when it comes).
func (m *Machine) StartServiceNoBlock(ctx context.Context, name string) error {
	if !strings.HasSuffix(name, ".service") {
		name += ".service"
	}
	if m.spec.Systemd {
		return m.systemctl(ctx, "start", "--no-block", name)
	}
	return m.startUnit(ctx, name, true)
}

// ReloadService runs a running unit's ExecReload (as `systemctl reload`), its $MAINPID the
// unit's process: for meshd.service a SIGHUP, which reads the config file again.
func (m *Machine) ReloadService(ctx context.Context, name string) error {
	if !strings.HasSuffix(name, ".service") {
		name += ".service"
	}
	if m.spec.Systemd {
		return m.systemctl(ctx, "reload", name)
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
	if m.spec.Systemd {
		return m.systemctl(ctx, "stop", name)
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
	if err == nil && m.spec.Systemd {
		err = m.systemctl(ctx, "daemon-reload")
	}
	return err
}

func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=,@") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
