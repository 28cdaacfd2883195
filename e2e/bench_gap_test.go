package e2e

// The gaps a user of the machine sees while meshd takes something over (issue 18): the hub's
// tunnel changing hands under its peers, and a container's take under its callers. Both are
// measured by the lab's probes, here at a cadence fine enough for sub-second gaps: a call every
// gapEvery, each given gapTimeout. A call whose packets were lost fails after gapTimeout; the
// next call starts at once, so a gap reads from the first failed call (within a call's own
// couple of milliseconds of the gap's start) to the first call that succeeded again: at most
// about gapTimeout longer than the gap was. A gap shorter than gapEvery may fall between two
// calls and go unseen.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"meshd/internal/labtest"
	"meshd/internal/testenv"
	"meshd/lab"
	"meshd/report"
)

const (
	gapEvery   = 20 * time.Millisecond
	gapTimeout = 100 * time.Millisecond
)

// fineProbes starts the probes specs at the gap cadence and waits until each has answered
// over the last second.
func fineProbes(ctx context.Context, b *testing.B, l *lab.Lab, specs ...lab.ProbeSpec) {
	b.Helper()
	for _, p := range specs {
		p.Every, p.Timeout, p.Expect = gapEvery, gapTimeout, lab.ExpectReach
		if err := l.StartProbe(ctx, p); err != nil {
			b.Fatal(err)
		}
	}
	for _, p := range specs {
		answering(b, l, p.Name, 30*time.Second)
	}
}

// answering waits until probe name's calls over the last second all succeeded.
func answering(b *testing.B, l *lab.Lab, name string, within time.Duration) {
	b.Helper()
	if err := testenv.Poll(b, within, func() error {
		s, err := l.Probe(name, time.Now().Add(-time.Second))
		if err == nil && (s.Calls == 0 || s.Failures > 0) {
			err = fmt.Errorf("probe %s not answering: %s", name, s)
		}
		return err
	}); err != nil {
		b.Fatal(err)
	}
}

// longestGap is the longest outage any of the probes saw since since, and which probe saw it,
// once at least settle has passed and each answers again.
func longestGap(b *testing.B, l *lab.Lab, since time.Time, settle time.Duration, names ...string) (time.Duration, string) {
	b.Helper()
	if wait := time.Until(since.Add(settle)); wait > 0 {
		time.Sleep(wait) // the record must cover the whole change, whatever the agent did last
	}
	var worst time.Duration
	var by string
	for _, n := range names {
		answering(b, l, n, 30*time.Second)
		s, err := l.Probe(n, since)
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("%s since %s: %d calls, %d failed, longest gap %s", n, since.Format("15:04:05.000"), s.Calls, s.Failures, s.LongestOutage.Round(time.Millisecond))
		if s.LongestOutage >= worst {
			worst, by = s.LongestOutage, n
		}
	}
	return worst, by
}

// BenchmarkTunnelTakeover is the longest gap a peer sees while the hub's tunnel changes hands
// (goal under 0.5 s): on the predecessor's lab (ufw), its control stopped, each peer calls the
// hub's webapp through the found tunnel every 20 ms (100 ms timeout); then `meshd genesis
// --adopted --take-tunnel wg0` and the agent, whose first pass deletes wg0 and raises meshd0 with
// the found key, port and address. gap-ms is the longest outage either peer's probe saw from
// genesis beginning until 5 s after meshd0 was up. One lab an iteration (a tunnel changes hands
// once).
func BenchmarkTunnelTakeover(b *testing.B) {
	bin := labtest.Meshd(b)
	var gaps []float64
	for range b.N {
		gap, by := tunnelTakeoverGap(b, bin)
		gaps = append(gaps, float64(gap.Microseconds())/1000)
		b.Logf("the tunnel changed hands: the longest gap a peer saw was %s (%s)", gap.Round(time.Millisecond), by)
	}
	b.ReportMetric(medianOf(gaps), "gap-ms")
	b.ReportMetric(float64(gapEvery.Milliseconds()), "every-ms")
}

func tunnelTakeoverGap(b *testing.B, bin string) (time.Duration, string) {
	l := labtest.Up(b, lab.Predecessor(lab.FirewallUFW))
	ctx := testenv.Context(b, 5*time.Minute)
	hub := l.Machine("hub")
	installMeshd(ctx, b, bin, hub)
	agentLogsOnFailure(b, 4000, hub)
	stopPredecessorControl(ctx, b, hub)
	target := fmt.Sprintf("http://%s:%d/", lab.HubTunnelAddr, lab.WebappPort)
	fineProbes(ctx, b, l,
		lab.ProbeSpec{Name: "peer1-fine", From: "peer1", Target: target},
		lab.ProbeSpec{Name: "peer2-fine", From: "peer2", Target: target})
	began := time.Now()
	if out, err := meshd(ctx, hub, hubGenesis("--adopted", "--port", "registry=5001", "--take-tunnel", lab.TunnelIface)...); err != nil {
		b.Fatalf("adopted genesis taking the tunnel: %v\n%s", err, out)
	}
	installAgent(ctx, b, hub, bin)
	if err := testenv.Poll(b, time.Minute, func() error {
		v, err := tunnelShow(ctx, hub)
		if err == nil && v.State != report.TunnelMeshUp {
			err = fmt.Errorf("state %q (%s)", v.State, v.Reason)
		}
		return err
	}); err != nil {
		b.Fatalf("the tunnel never changed hands: %v", err)
	}
	return longestGap(b, l, began, time.Since(began)+5*time.Second, "peer1-fine", "peer2-fine")
}

// BenchmarkTakeOutage is the longest gap a probe sees through a container's take: on the
// predecessor's lab (ufw), adopted with the tunnel taken, webapp assigned (its found container
// and file held), then `meshd module take hub webapp`, which swaps the found container for
// meshd's (stop the found one, start the new one). newnode calls the webapp on the hub's address
// and peer1 through the tunnel, each every 20 ms (100 ms timeout); outage-ms is the longest
// outage either saw from the take until 5 s after meshd's container served, swap-ms the swap as
// the agent logged it (`swap=`). One lab an iteration.
func BenchmarkTakeOutage(b *testing.B) {
	bin := labtest.Meshd(b)
	var outages, swaps []float64
	for range b.N {
		outage, by, swap := takeOutage(b, bin)
		outages = append(outages, float64(outage.Microseconds())/1000)
		swaps = append(swaps, float64(swap.Microseconds())/1000)
		b.Logf("webapp's take: the longest gap a probe saw was %s (%s); the agent's swap took %s", outage.Round(time.Millisecond), by, swap)
	}
	b.ReportMetric(medianOf(outages), "outage-ms")
	if swaps[0] > 0 {
		b.ReportMetric(medianOf(swaps), "swap-ms")
	}
	b.ReportMetric(float64(gapEvery.Milliseconds()), "every-ms")
}

func takeOutage(b *testing.B, bin string) (time.Duration, string, time.Duration) {
	l := labtest.Up(b, lab.Predecessor(lab.FirewallUFW))
	ctx := testenv.Context(b, 5*time.Minute)
	hub, nn := l.Machine("hub"), l.Machine("newnode")
	installMeshd(ctx, b, bin, hub)
	agentLogsOnFailure(b, 4000, hub)
	stopPredecessorControl(ctx, b, hub)
	if out, err := meshd(ctx, hub, hubGenesis("--adopted", "--port", "registry=5001", "--take-tunnel", lab.TunnelIface)...); err != nil {
		b.Fatalf("adopted genesis: %v\n%s", err, out)
	}
	installAgent(ctx, b, hub, bin)
	reporting(ctx, b, hub, "hub", time.Minute)
	if out, err := meshd(ctx, hub, "module", "assign", "hub", "webapp"); err != nil {
		b.Fatalf("assign webapp: %v\n%s", err, out)
	}
	if err := testenv.Poll(b, time.Minute, webappHeldUnchanged(ctx, hub)); err != nil {
		b.Fatal(err)
	}
	fineProbes(ctx, b, l,
		lab.ProbeSpec{Name: "served-fine", From: "newnode", Target: fmt.Sprintf("http://%s:%d/", lab.HubAddr, lab.WebappPort)},
		lab.ProbeSpec{Name: "peer1-fine", From: "peer1", Target: fmt.Sprintf("http://%s:%d/", lab.HubTunnelAddr, lab.WebappPort)})
	before, err := hub.Docker(ctx, "inspect", "-f", "{{.Id}}", "webapp")
	if err != nil {
		b.Fatal(err)
	}
	took := time.Now()
	if out, err := meshd(ctx, hub, "module", "take", "hub", "webapp"); err != nil {
		b.Fatalf("take webapp: %v\n%s", err, out)
	}
	if err := testenv.Poll(b, time.Minute, func() error {
		id, err := hub.Docker(ctx, "inspect", "-f", "{{.Id}} {{index .Config.Labels \"meshd.module\"}}", "webapp")
		if err != nil || strings.HasPrefix(id, before) || !strings.Contains(id, "webapp") {
			return fmt.Errorf("webapp not replaced by meshd's: %q %v", id, err)
		}
		out, err := nn.Reach(ctx, fmt.Sprintf("http://%s:%d/", lab.HubAddr, lab.WebappPort))
		if err != nil {
			return fmt.Errorf("meshd's webapp does not serve: %v %s", err, out)
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	outage, by := longestGap(b, l, took, time.Since(took)+5*time.Second, "served-fine", "peer1-fine")
	return outage, by, loggedSwap(hub)
}

// loggedSwap is the last container swap the agent on m logged (`swap=`), 0 if none.
func loggedSwap(m *lab.Machine) time.Duration {
	log, err := os.ReadFile(filepath.Join(m.Dir(), "log", "meshd.log"))
	if err != nil {
		return 0
	}
	i := strings.LastIndex(string(log), "swap=")
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(log[i+len("swap="):]))
	if len(f) == 0 {
		return 0
	}
	d, _ := time.ParseDuration(f[0])
	return d
}

func medianOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkTunnelTakeoverRealHub is tunnel.takeover.gap on issue 27's real hub (lab.RealHub,
// nftables: preshared keys, dual stack, a site behind a peer, the services admitted by interface
// name), two figures: hub-gap-ms, the longest gap any fine probe saw through the hub's takeover
// (`genesis --adopted --take-tunnel wg0` and the agent, from genesis beginning until 5 s after
// the hub reported the mesh up), and spoke-gap-ms, the longest through a spoke's own takeover
// (`join --tunnel wg0`, then `tunnel take SPOKE wg0`, from the take until 5 s after the spoke's
// wg0 is meshd's), the worse of peer1 (PiVPN's client: no ListenPort) and peer2 (full tunnel).
// The fine probes call every 20 ms (100 ms each): peer1 and peer2 to the hub's web over IPv4,
// peer1 over IPv6, peer2 to the site through the hub. One lab an iteration.
func BenchmarkTunnelTakeoverRealHub(b *testing.B) {
	bin := labtest.Meshd(b)
	var hubGaps, spokeGaps []float64
	for range b.N {
		hub, spoke := realHubTakeoverGaps(b, bin)
		hubGaps = append(hubGaps, float64(hub.Microseconds())/1000)
		spokeGaps = append(spokeGaps, float64(spoke.Microseconds())/1000)
	}
	b.ReportMetric(medianOf(hubGaps), "hub-gap-ms")
	b.ReportMetric(medianOf(spokeGaps), "spoke-gap-ms")
	b.ReportMetric(float64(gapEvery.Milliseconds()), "every-ms")
}

func realHubTakeoverGaps(b *testing.B, bin string) (hubGap, spokeGap time.Duration) {
	l := labtest.Up(b, lab.RealHub(lab.FirewallNftables))
	ctx := testenv.Context(b, 8*time.Minute)
	hub := l.Machine("hub")
	installMeshd(ctx, b, bin, hub)
	agentLogsOnFailure(b, 4000, hub, l.Machine("peer1"), l.Machine("peer2"))
	web := fmt.Sprintf("http://%s:%d/", lab.HubTunnelAddr, lab.WebappPort)
	names := []string{"peer1-fine", "peer1-fine6", "peer2-fine", "peer2-site-fine"}
	fineProbes(ctx, b, l,
		lab.ProbeSpec{Name: names[0], From: "peer1", Target: web},
		lab.ProbeSpec{Name: names[1], From: "peer1", Target: fmt.Sprintf("http://[%s]:%d/", lab.HubTunnelAddr6, lab.WebappPort)},
		lab.ProbeSpec{Name: names[2], From: "peer2", Target: web},
		lab.ProbeSpec{Name: names[3], From: "peer2", Target: fmt.Sprintf("http://%s:%d/", lab.SiteServiceAddr, lab.WebappPort)})
	began := time.Now()
	if out, err := meshd(ctx, hub, hubGenesis("--adopted", "--take-tunnel", lab.TunnelIface)...); err != nil {
		b.Fatalf("adopted genesis taking the real hub's tunnel: %v\n%s", err, out)
	}
	installAgent(ctx, b, hub, bin)
	if err := testenv.Poll(b, time.Minute, func() error {
		v, err := tunnelShow(ctx, hub)
		if err == nil && v.State != report.TunnelMeshUp {
			err = fmt.Errorf("state %q (%s)", v.State, v.Reason)
		}
		return err
	}); err != nil {
		b.Fatalf("the real hub's tunnel never changed hands: %v", err)
	}
	hubGap, by := longestGap(b, l, began, time.Since(began)+5*time.Second, names...)
	b.Logf("the hub's takeover: the longest gap was %s (%s)", hubGap.Round(time.Millisecond), by)
	for _, name := range []string{"peer1", "peer2"} {
		p := l.Machine(name)
		installMeshd(ctx, b, bin, p)
		if out, err := meshdJoin(ctx, p, adoptedToken(ctx, b, hub), "--name", p.Name, "--data-dir", "/var/lib/meshd",
			"--tunnel", lab.TunnelIface, "--advertise", p.Addr.String(), "--json"); err != nil {
			b.Fatalf("%s join --tunnel wg0: %v\n%s", p.Name, err, out)
		}
		installAgent(ctx, b, p, bin)
		took := time.Now()
		if out, err := meshd(ctx, hub, "tunnel", "take", p.Name, lab.TunnelIface); err != nil {
			b.Fatalf("tunnel take %s wg0: %v\n%s", p.Name, err, out)
		}
		if err := testenv.Poll(b, time.Minute, func() error { return meshdOwns(ctx, p, lab.TunnelIface) }); err != nil {
			b.Fatalf("%s's takeover: %v", p.Name, err)
		}
		gap, by := longestGap(b, l, took, time.Since(took)+5*time.Second, names...)
		b.Logf("%s's own takeover: the longest gap was %s (%s)", p.Name, gap.Round(time.Millisecond), by)
		spokeGap = max(spokeGap, gap)
	}
	return hubGap, spokeGap
}
