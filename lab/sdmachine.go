package lab

// A lab machine of the systemd kind (MachineSpec.Systemd): instead of the namespace machines'
// mount and UTS namespaces and the lab's own unit runner, a Debian root booted by real systemd
// under systemd-nspawn (package lab/systemd), in the machine's network namespace, on the lab's
// switch like any other. Its units, their order, Restart= and a reboot are systemd's own; its
// Docker engine is Debian's, its socket reached from the host through the machine's root.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"meshd/lab/systemd"
)

// sdBoot bounds a systemd machine's boot to running (a few seconds here).
const sdBoot = 90 * time.Second

// sdDockerSock is where a systemd machine's engine also listens, inside the machine: a path on
// its root's overlay, which the host reaches under the root (/run is the machine's own tmpfs).
const sdDockerSock = "/var/lib/meshlab/docker.sock"

func (m *Machine) sdDir() string { return filepath.Join(m.dir, "sd") }

// sd is the machine's systemd machine.
func (m *Machine) sd() (*systemd.Machine, error) { return systemd.Attach(m.sdDir()) }

// Systemd says the machine is booted by systemd (MachineSpec.Systemd).
func (m *Machine) Systemd() bool { return m.spec.Systemd }

// sdCommand is name run in the systemd machine: every namespace of its PID 1 and a clean
// environment; a machine that is down runs a command that says so.
func (m *Machine) sdCommand(ctx context.Context, name string, args ...string) *exec.Cmd {
	sm, err := m.sd()
	var cmd *exec.Cmd
	if err == nil {
		cmd, err = sm.Command(ctx, append([]string{name}, args...)...)
	}
	if err != nil {
		cmd = exec.CommandContext(ctx, "sh", "-c", `echo "$1" >&2; exit 1`, "sh", fmt.Sprintf("%s: %v", m.Name, err))
	}
	return cmd
}

// sdCreate boots the machine's root for the first time, after its network exists, and gives it
// what the lab's machines have: the lab's hosts, the scenario's engine reachable from the host
// (or no engine), ufw quiet and off until the scenario says otherwise.
func (m *Machine) sdCreate(ctx context.Context) error {
	bin := filepath.Join(m.lab.Dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return err
	}
	if _, err := systemd.BootAt(m.sdDir(), m.Name, m.lab.nsName(m.Name), sdBoot, bin); err != nil {
		return fmt.Errorf("%s: %w", m.Name, err)
	}
	hosts := "127.0.0.1\tlocalhost\n"
	for _, o := range m.lab.st.Machines {
		hosts += o.Addr + "\t" + o.Name + "\n"
	}
	if err := m.WriteFile(ctx, "/etc/hosts", []byte(hosts), 0o644); err != nil {
		return err
	}
	script := `set -e
sed -i 's/^IPV6=.*/IPV6=no/' /etc/default/ufw
sed -i 's/^ENABLED=.*/ENABLED=no/' /etc/ufw/ufw.conf
mkdir -p /var/lib/meshd /etc/meshd
`
	if m.spec.Docker {
		dropIn := "[Service]\nExecStart=\nExecStart=/usr/sbin/dockerd -H fd:// -H unix://" + sdDockerSock + " --containerd=/run/containerd/containerd.sock\n"
		if err := m.WriteFile(ctx, "/etc/systemd/system/docker.service.d/meshlab.conf", []byte(dropIn), 0o644); err != nil {
			return err
		}
		script += "mkdir -p " + filepath.Dir(sdDockerSock) + "\n"
	} else {
		script += "systemctl disable --now docker.service docker.socket containerd.service >/dev/null 2>&1 || true\n"
	}
	script += "systemctl daemon-reload\n"
	_, err := m.Run(ctx, script)
	return err
}

// sdBootUp boots the configured machine as it will run: a real reboot, so every unit the scenario
// enabled comes up by systemd's own boot, in systemd's order (the lab's programs are bound in
// read-only at the paths its units name). A machine powered off is powered on instead.
func (m *Machine) sdBootUp(ctx context.Context) error {
	sm, err := m.sd()
	if err != nil {
		return err
	}
	if sm.Leader() == 0 {
		err = sm.PowerOn(sdBoot)
	} else {
		err = sm.Reboot(sdBoot)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", m.Name, err)
	}
	if m.spec.Docker {
		return m.waitDocker(ctx)
	}
	return nil
}

// systemctl runs systemctl in the machine.
func (m *Machine) systemctl(ctx context.Context, args ...string) error {
	_, err := m.Exec(ctx, "systemctl", args...)
	return err
}

// sdReady is ReadyStatus read from the machine's systemd: the unit's STATUS= text, and whether
// it is active (a Type=notify unit is active once it sent READY=1).
func (m *Machine) sdReady(name string) (string, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := m.Exec(ctx, "systemctl", "show", "-p", "ActiveState", "-p", "StatusText", name)
	if err != nil {
		return "", false
	}
	var active bool
	var status string
	for _, l := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(l, "ActiveState="); ok {
			active = v == "active"
		}
		if v, ok := strings.CutPrefix(l, "StatusText="); ok {
			status = v
		}
	}
	return status, active
}

// sdLogTail is the end of a unit's journal in the machine.
func (m *Machine) sdLogTail(name string, n int) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, _ := m.Exec(ctx, "journalctl", "--no-pager", "-n", strconv.Itoa(40), "-u", name)
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return strings.TrimSpace(out)
}

// sdDown shuts a lab's systemd machine down and removes its root, for Down: by its directory,
// whichever process booted it.
func sdDown(machineDir string) error {
	dir := filepath.Join(machineDir, "sd")
	if _, err := os.Stat(filepath.Join(dir, "machine.json")); err != nil {
		return nil
	}
	sm, err := systemd.Attach(dir)
	if err != nil {
		return err
	}
	return sm.Stop()
}

// WithSystemd is sc with the machines named booted by systemd (MachineSpec.Systemd); a name
// that is not one of sc's machines is an error naming the ones it has.
func (sc Scenario) WithSystemd(names ...string) (Scenario, error) {
	machines := append([]MachineSpec(nil), sc.Machines...)
	for _, n := range names {
		found := false
		for i := range machines {
			if machines[i].Name == n {
				machines[i].Systemd, found = true, true
			}
		}
		if !found {
			var have []string
			for _, m := range machines {
				have = append(have, m.Name)
			}
			return sc, fmt.Errorf("scenario %s has no machine %q to boot by systemd (it has %s)", sc.Name, n, strings.Join(have, ", "))
		}
	}
	sc.Machines = machines
	return sc, nil
}
