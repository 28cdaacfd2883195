package systemd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"meshd/internal/testenv"
	"meshd/lab/systemd"
	"meshd/packaging/deb"
)

// firstPackaged is the first commit `make package` built a package of: the oldest a machine can
// upgrade from.
const firstPackaged = "ae14058"

// cachedBuild is the package of commit, built once by its own meshpkg and kept under the lab's
// cache (MESHD_LAB_CACHE, else /var/cache/meshd-lab) beside the machines' root.
func cachedBuild(t testing.TB, repo, commit string) string {
	t.Helper()
	cache := os.Getenv("MESHD_LAB_CACHE")
	if cache == "" {
		cache = systemd.DefaultCache
	}
	p, err := deb.BuiltCommit(repo, commit, cache)
	if err != nil {
		t.Fatalf("the package of %s: %v", commit, err)
	}
	return p
}

// devicePIDs are the hub's device processes (`meshd tunnel-device`), each with its program as
// /proc says it ("/usr/bin/meshd (deleted)" once an upgrade replaced the file).
func (r *rebootHub) devicePIDs(ctx context.Context) map[string]string {
	out, _ := r.hub.Run(ctx, "sh", "-c", `for p in $(pgrep -f '^/usr/bin/meshd tunnel-device '); do echo "$p $(readlink /proc/$p/exe)"; done`)
	pids := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if pid, exe, ok := strings.Cut(l, " "); ok {
			pids[pid] = exe
		}
	}
	return pids
}

// history is `meshd history --json`'s events, each as its record index, op, node and module
// (the words may change between versions); none when the command is not there (the first
// packaged builds had none).
func (r *rebootHub) history(ctx context.Context) []string {
	out, err := r.hub.Run(ctx, "meshd", "history", "--json")
	if err != nil {
		return nil
	}
	var v struct {
		Events []struct {
			Index        uint64
			Op           string
			Node, Module string
		} `json:"events"`
	}
	if json.Unmarshal([]byte(out), &v) != nil {
		return nil
	}
	var evs []string
	for _, e := range v.Events {
		evs = append(evs, fmt.Sprintf("%d %s %s %s", e.Index, e.Op, e.Node, e.Module))
	}
	return evs
}

// upgrade installs the tree's package over the older one the hub was set up with (r.first), its
// tunnel and the webapp module taken, and waits for what an operator checks: the agent restarted
// on the new binary, no process of the old binary left (the device process handed over), the
// tunnel mesh-up with the same key and port, the taken module's container meshd's and running,
// `meshd status` answering with no tunnel down, the history as it was (every event before is
// still there), and the peer reaching the webapp through the tunnel. It returns the longest gap
// the peer's probe saw from the install to 3 s after all that held (the figure is
// BenchmarkSystemdHubUpgrade's, not a test's assertion).
func (r *rebootHub) upgrade(ctx context.Context, t testing.TB) time.Duration {
	t.Helper()
	before, err := r.meshIface(ctx)
	if err != nil {
		t.Fatalf("before the upgrade: %v", err)
	}
	oldDevices := r.devicePIDs(ctx)
	agent := strings.TrimSpace(mustRun(ctx, t, r.hub, "systemctl", "show", "-p", "MainPID", "--value", "meshd"))
	events := r.history(ctx)
	from := strings.TrimSpace(mustRun(ctx, t, r.hub, "meshd", "version"))
	start := time.Now()
	t.Logf("upgrade from %s:\n%s", from, mustRun(ctx, t, r.hub, "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", r.pkg))
	var status string
	if err := testenv.Poll(t, 90*time.Second, func() error {
		now := strings.TrimSpace(mustRun(ctx, t, r.hub, "systemctl", "show", "-p", "MainPID", "--value", "meshd"))
		if now == agent || now == "0" {
			return fmt.Errorf("meshd.service's MainPID is %s (was %s)", now, agent)
		}
		if exe, _ := r.hub.Run(ctx, "readlink", "/proc/"+now+"/exe"); strings.TrimSpace(exe) != "/usr/bin/meshd" {
			return fmt.Errorf("the agent %s runs %q", now, strings.TrimSpace(exe))
		}
		devices := r.devicePIDs(ctx)
		for pid, exe := range devices {
			if _, old := oldDevices[pid]; old || exe != "/usr/bin/meshd" {
				return fmt.Errorf("a device process of the old binary runs on: %s %s", pid, exe)
			}
		}
		if len(devices) != 1 {
			return fmt.Errorf("device processes %v, want one", devices)
		}
		if left, _ := r.hub.Run(ctx, "sh", "-c", `for p in $(pgrep meshd); do readlink /proc/$p/exe; done | grep deleted || true`); strings.TrimSpace(left) != "" {
			return fmt.Errorf("a process of the old binary runs: %s", left)
		}
		now2, err := r.meshIface(ctx)
		if err != nil {
			return err
		}
		if now2.Interface != "wg0" || now2.PublicKey != before.PublicKey || now2.Port != before.Port {
			return fmt.Errorf("the mesh's interface is %+v, was %+v; want wg0 with its key and port", now2, before)
		}
		if status, err = r.hub.Run(ctx, "meshd", "status"); err != nil || strings.Contains(status, "TUNNEL DOWN") {
			return fmt.Errorf("meshd status: %v", err)
		}
		if err := r.webapp(ctx, "replaced", "created", "adopted"); err != nil {
			return err
		}
		return r.probeServes()
	}); err != nil {
		t.Fatalf("upgraded from %s: %v\n%s\n%s", from, err, status, r.hub.Journal(ctx))
	}
	if v := mustRun(ctx, t, r.hub, "meshd", "version"); !strings.HasPrefix(v, "meshd "+r.version+" ") {
		t.Errorf("after the upgrade meshd version says %q; the package is %s", v, r.version)
	}
	after := r.history(ctx)
	for _, e := range events {
		if !slices.Contains(after, e) {
			t.Errorf("after the upgrade the history lost %s", e)
		}
	}
	if journal := r.hub.Journal(ctx); strings.Contains(journal, "is still held") {
		t.Errorf("the agent waited for a port held by the old device:\n%s", journal)
	}
	settled := time.Now()
	var s struct{ gap time.Duration }
	if err := testenv.Poll(t, 10*time.Second, func() error {
		sum, err := r.probeSince(start)
		if err == nil && time.Since(settled) < 3*time.Second {
			err = fmt.Errorf("watching the probe after the upgrade: %s", sum)
		}
		s.gap = sum.LongestOutage
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("upgraded from %s to %s: the peer's longest gap %s (probes every %s)", from, r.version, s.gap, probeEvery)
	r.settled = time.Now()
	return s.gap
}

// BenchmarkSystemdHubUpgrade is the longest gap the peer's probe through the hub's tunnel (a call
// every 50 ms) sees while the hub, its tunnel and the webapp module taken, is upgraded from the
// package of the commit before the tree's to the tree's (upgrade): the agent's restart and the
// hand-over of the device process. Each iteration first goes back to the older package
// (untimed). gap-ms is the median.
func BenchmarkSystemdHubUpgrade(b *testing.B) {
	r := setUpRebootHub(b, "HEAD^")
	ctx := testenv.Context(b, 10*time.Minute)
	var gaps []float64
	for i := range b.N {
		if i > 0 {
			mustRun(ctx, b, r.hub, "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "--allow-downgrades", r.first)
			if err := testenv.Poll(b, 60*time.Second, func() error { _, err := r.meshIface(ctx); return err }); err != nil {
				b.Fatal(err)
			}
		}
		gaps = append(gaps, float64(r.upgrade(ctx, b).Microseconds())/1000)
	}
	b.ReportMetric(median(gaps), "gap-ms")
	b.ReportMetric(float64(probeEvery.Milliseconds()), "every-ms")
	b.ReportMetric(0, "ns/op")
}
