package wg

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runDevice is a copy of this test binary run as `PROGRAM tunnel-device NAME`: the device
// process meshd runs (cmd/meshd's tunnel-device), so two copies are two programs.
func runDevice(name string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := RunDevice(ctx, name, 1420, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		return 1
	}
	return 0
}

// spawn is the request's Program as Config.Spawn, nil for none.
func (r helperReq) spawn() func(ctx context.Context, name string, mtu int) error {
	if r.Program == "" {
		return nil
	}
	return DeviceCommand{Path: r.Program, Args: []string{"tunnel-device"}}.Spawn
}

// supersede is the agent's hand-over in the helper: the running interface req.Iface read as it
// is, and the device processes not of req.Program replaced by one of req.Program's named req.Mesh.
func supersede(ctx context.Context, req helperReq, log *slog.Logger) (*Interface, []DeviceProcess, error) {
	f, err := Discover(req.Iface, "")
	if err != nil {
		return nil, nil, err
	}
	cfg, err := TakeoverConfig(f, req.Mesh)
	if err != nil {
		return nil, nil, err
	}
	cfg.Logger, cfg.Spawn = log, req.spawn()
	stale, err := StaleDevices(req.Program)
	if err != nil {
		return nil, nil, err
	}
	i, err := Supersede(ctx, stale, cfg)
	return i, stale, err
}

// devicePrograms are the programs of the device processes in the machine, by the interface
// each serves.
func (m *machine) devicePrograms() map[string]string {
	out := map[string]string{}
	b, _ := exec.Command("ip", "netns", "pids", m.ns).Output()
	for _, f := range strings.Fields(string(b)) {
		cmd, err := os.ReadFile("/proc/" + f + "/cmdline")
		if err != nil || !strings.Contains(string(cmd), "\x00tunnel-device\x00") {
			continue
		}
		pid, _ := strconv.Atoi(f)
		exe, _ := os.Readlink("/proc/" + f + "/exe")
		out[TunName(pid)] = exe
	}
	return out
}

// An upgrade leaves the old binary's device process running (the unit stops only the agent):
// the new agent hands the interface over to a device process of its own program, under the
// name it wants, with the found key, port, address and peers, and no process of the old program
// is left. Both upgrades: from the first packaged builds (their device served meshd0; the tree's
// takes the found name) and from a build that served the same name. The peer's probe through the
// tunnel (every 50 ms) reaches the hub again after each; its longest gap is logged (the figure is
// BenchmarkSupersedeGap's).
func TestSupersedeDeviceOfAnotherProgram(t *testing.T) {
	p := newPredecessor(t, "p1")
	p.reachAll(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	old, now := filepath.Join(dir, "old", "meshd"), filepath.Join(dir, "new", "meshd")
	for _, dst := range []string{old, now} {
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		run(t, "cp", self, dst)
	}
	hub := p.hub.helper()
	hub.must(helperReq{Op: "takeover", Iface: "wg0", Mesh: "meshd0", Program: old})
	hub.must(helperReq{Op: "release"})
	if got := p.hub.devicePrograms(); got["meshd0"] != old {
		t.Fatalf("before: the device processes are %v, want meshd0 run by %s", got, old)
	}
	pr := startProbe(t, p.peers[0], p.svc())
	start := time.Now()
	waitFor(t, 5*time.Second, "p1 probes before the hand-over", func() bool { return pr.succeededAfter(start) })

	for _, c := range []struct{ from, by, name string }{
		{"meshd0", now, "wg0"}, // the first packaged builds' name, to the tree's
		{"wg0", old, "wg0"},    // the same name, another program (either way round is an upgrade)
	} {
		before := time.Now()
		resp := hub.must(helperReq{Op: "supersede", Iface: c.from, Mesh: c.name, Program: c.by})
		if len(resp.Stale) != 1 || resp.Stale[0].Iface != c.from {
			t.Errorf("%s to %s: the stale device processes were %+v, want the one serving %s", c.from, c.name, resp.Stale, c.from)
		}
		if got := p.hub.devicePrograms(); len(got) != 1 || got[c.name] != c.by {
			t.Errorf("%s to %s: the device processes are %v, want only %s run by %s", c.from, c.name, got, c.name, c.by)
		}
		for _, s := range resp.Stale {
			if alive(s.PID) {
				t.Errorf("%s to %s: the old device process %d runs on", c.from, c.name, s.PID)
			}
		}
		done := time.Now()
		waitFor(t, 10*time.Second, "p1 reaches the hub after the hand-over", func() bool { return pr.succeededAfter(done) })
		mesh := hub.must(helperReq{Op: "discover", Iface: c.name}).Found
		if mesh.PrivateKey != p.keys["hub"] || mesh.ListenPort != tunnelPort || mesh.Address().String() != hubAddr+"/24" || len(mesh.Peers) != 1 {
			t.Errorf("%s to %s: key %v port %d address %v, %d peers; want the found ones", c.from, c.name,
				mesh.PrivateKey.PublicKey(), mesh.ListenPort, mesh.Address(), len(mesh.Peers))
		}
		t.Logf("%s to %s: the longest probe gap %v (%d failed probes so far)", c.from, c.name,
			pr.gap(before.Add(-200*time.Millisecond)).Round(time.Millisecond), pr.failed())
		hub.must(helperReq{Op: "release"})
	}
}
