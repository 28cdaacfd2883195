package wg

// The hand-over of the mesh's interface from a device process of another program: an upgrade
// replaces meshd's binary and restarts the agent, but the unit stops only the agent
// (KillMode=process, so the tunnel outlives an agent restart), so the old binary's device process
// runs on, holding the port. Attaching to it would keep a process of a program that is no longer
// installed (its /proc/PID/exe "(deleted)"), running the old wireguard-go until the next reboot;
// and the first packaged builds served the mesh's interface under another name (meshd0), which
// the agent cannot attach to at all. So the agent replaces it, as a takeover replaces a found
// interface: the new device is prepared beside it, then the old link is deleted (the process exits
// once its TUN is gone), and the new one takes its name and port. The peers see the takeover's own
// short gap.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// DeviceProcess is a device process (`PROGRAM tunnel-device NAME`) in the caller's network
// namespace.
type DeviceProcess struct {
	PID int
	// Iface is the interface it serves now: its TUN's name as the kernel says it (the "iff:"
	// line of the TUN's fdinfo). The command line's NAME is the name it started under, which a
	// takeover changes (meshd-take, renamed to the found name).
	Iface string
	// Exe is its program as /proc says it ("/usr/bin/meshd (deleted)" after an upgrade).
	Exe string
}

// StaleDevices lists the device processes in the caller's network namespace that do not run
// program (the file the caller would start a device with): those an upgrade left behind.
func StaleDevices(program string) ([]DeviceProcess, error) {
	self, err := os.Stat(program)
	if err != nil {
		return nil, fmt.Errorf("the device's program: %w", err)
	}
	netns, _ := os.Readlink("/proc/thread-self/ns/net")
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []DeviceProcess
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		p, ok := deviceProcess(pid, netns)
		if !ok {
			continue
		}
		if exe, err := os.Stat(filepath.Join("/proc", d.Name(), "exe")); err == nil && os.SameFile(exe, self) {
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

// deviceProcess reads pid as a device process in network namespace netns; ok is false for any
// other process (or one that is gone).
func deviceProcess(pid int, netns string) (DeviceProcess, bool) {
	dir := filepath.Join("/proc", strconv.Itoa(pid))
	cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
	if err != nil {
		return DeviceProcess{}, false
	}
	args := strings.Split(string(bytes.TrimRight(cmdline, "\x00")), "\x00")
	if len(args) < 3 || args[1] != "tunnel-device" {
		return DeviceProcess{}, false
	}
	if ns, _ := os.Readlink(filepath.Join(dir, "ns", "net")); ns != netns {
		return DeviceProcess{}, false
	}
	p := DeviceProcess{PID: pid, Iface: TunName(pid)}
	p.Exe, _ = os.Readlink(filepath.Join(dir, "exe"))
	return p, true
}

// TunName is the name of the TUN device process pid holds, "" when it holds none.
func TunName(pid int) string {
	infos, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "fdinfo", "*"))
	for _, f := range infos {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if name, ok := strings.CutPrefix(l, "iff:"); ok {
				return strings.TrimSpace(name)
			}
		}
	}
	return ""
}

// Supersede replaces the stale device processes (StaleDevices) by the mesh's interface cfg, run
// by cfg.Spawn: the one serving cfg.Name (else the first) is replaced in place as a takeover
// replaces a found interface (prepared beside it, then its link deleted, then the new one takes
// its name and port), and the others' links are deleted. It returns once every stale process has
// exited (one still running after its link went is killed), so no process of the old program is
// left.
func Supersede(ctx context.Context, stale []DeviceProcess, cfg Config) (*Interface, error) {
	if cfg.Spawn == nil {
		return nil, fmt.Errorf("handing %s over from another program's device process: no device process to start", cfg.Name)
	}
	var target *DeviceProcess
	for i := range stale {
		if stale[i].Iface == cfg.Name || target == nil && stale[i].Iface != "" {
			target = &stale[i]
		}
	}
	for _, p := range stale {
		if target != nil && p.PID == target.PID || p.Iface == "" {
			continue
		}
		if err := Remove(p.Iface); err != nil {
			return nil, fmt.Errorf("handing %s over: %w", cfg.Name, err)
		}
	}
	var i *Interface
	if target == nil {
		var err error
		if i, err = Raise(ctx, cfg); err != nil {
			return nil, err
		}
	} else {
		// Another program's device under cfg.Name: the new one is prepared under StageName.
		state, ni, err := Takeover(ctx, &Found{Name: target.Iface}, cfg)
		if err != nil && state != MeshUp {
			return nil, fmt.Errorf("handing %s over from %s's device process %d: %w", cfg.Name, target.Exe, target.PID, err)
		}
		i = ni
	}
	for _, p := range stale {
		if err := waitGone(ctx, p.PID); err != nil {
			return i, err
		}
	}
	return i, nil
}

// waitGone waits for pid to exit after its link went, and kills it after 5 s.
func waitGone(ctx context.Context, pid int) error {
	deadline := time.Now().Add(5 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			deadline = time.Now().Add(5 * time.Second)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the old device process %d is still running: %w", pid, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// alive says whether pid runs (a zombie, exited but not reaped by its parent, does not).
func alive(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}
