// The migration's steps the three firewall kinds share: a node previewed and converged, a peer
// enrolled and its tunnel taken, the tunnel through an agent's restart and a moved port.

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"os/exec"
	"strings"
	"testing"
	"time"

	"meshd/api"
	"meshd/internal/testenv"
	"meshd/lab"
	"meshd/report"
	"meshd/setup"
)

// previewNode runs `meshd converge NODE --preview --json` on the hub: the preview and the exit
// code (0: nothing will close, 2: something will).
func previewNode(ctx context.Context, hub *lab.Machine, node string) (report.ConvergePreview, int, error) {
	cmd := hub.Command(ctx, meshdPath(hub), "converge", node, "--preview", "--json")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		return report.ConvergePreview{}, -1, err
	}
	var pv report.ConvergePreview
	if code != 0 && code != 2 {
		return pv, code, fmt.Errorf("converge %s --preview: exit %d: %s", node, code, stderr.String())
	}
	if err := json.Unmarshal(out, &pv); err != nil {
		return pv, code, fmt.Errorf("converge %s --preview --json: %v: %s", node, err, out)
	}
	if pv.Token == "" {
		return pv, code, fmt.Errorf("converge %s --preview: no plan token: %s", node, out)
	}
	return pv, code, nil
}

// convergeNode previews node until the preview has a plan token (check, when given, must accept
// it), then converges it with that token and waits until the record says converged.
func convergeNode(ctx context.Context, t *testing.T, hub *lab.Machine, node string, check func(report.ConvergePreview, int) error) report.ConvergePreview {
	t.Helper()
	var pv report.ConvergePreview
	if err := testenv.Poll(t, 60*time.Second, func() error {
		var code int
		var err error
		if pv, code, err = previewNode(ctx, hub, node); err != nil {
			return err
		}
		if check != nil {
			return check(pv, code)
		}
		return nil
	}); err != nil {
		t.Fatalf("the preview of %s: %v", node, err)
	}
	t.Logf("%s's preview: %d will close; plan %s", node, pv.WillClose, pv.Token)
	out, err := meshd(ctx, hub, "converge", node, "--plan", pv.Token, "--wait", "3m")
	if err != nil {
		t.Fatalf("converge %s --plan %s: %v\n%s", node, pv.Token, err, out)
	}
	t.Logf("converge %s:\n%s", node, out)
	return pv
}

// statusNodes reads `meshd status --json` on m: each node's summary by name.
func statusNodes(ctx context.Context, m *lab.Machine) (map[string]api.NodeSummary, error) {
	out, err := meshd(ctx, m, "status", "--json")
	if err != nil {
		return nil, fmt.Errorf("status: %v %s", err, out)
	}
	var st api.StatusView
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return nil, fmt.Errorf("status --json: %v: %s", err, out)
	}
	nodes := map[string]api.NodeSummary{}
	for _, n := range st.Nodes {
		nodes[n.Name] = n
	}
	return nodes, nil
}

// enrolPeer joins a predecessor peer with an adopted token over the tunnel it has (keeping the
// address its key had), starts its agent and takes its found tunnel over; the peers' probes hold.
func enrolPeer(ctx context.Context, t *testing.T, l *lab.Lab, hub, p *lab.Machine, bin, wantAddr string) {
	t.Helper()
	before, err := peerState(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	installMeshd(ctx, t, bin, p)
	out, err := meshdJoin(ctx, p, adoptedToken(ctx, t, hub), "--name", p.Name, "--data-dir", "/var/lib/meshd",
		"--tunnel", lab.TunnelIface, "--json")
	var jr setup.JoinResult
	if err != nil || json.Unmarshal([]byte(out), &jr) != nil || jr.Node == nil {
		t.Fatalf("%s join --tunnel wg0: %v\n%s", p.Name, err, out)
	}
	if jr.Node.Address != wantAddr {
		t.Fatalf("%s enrolled at %s, want the address its tunnel had, %s", p.Name, jr.Node.Address, wantAddr)
	}
	if now, err := peerState(ctx, p); err != nil || now != before {
		t.Errorf("%s's tunnel changed by enrolling: %v\n%s\n---\n%s", p.Name, err, before, now)
	}
	v, err := tunnelShow(ctx, hub)
	if err != nil {
		t.Fatal(err)
	}
	for _, pe := range v.Peers {
		if pe.Address == wantAddr && (!pe.Enrolled || pe.Node != p.Name) {
			t.Errorf("tunnel show after %s enrolled: %+v", p.Name, pe)
		}
	}
	takeSpokeTunnelOf(ctx, t, l, hub, p, bin, wantAddr)
}

// takeSpokeTunnelOf is takeSpokeTunnel for any enrolled predecessor peer at addr.
func takeSpokeTunnelOf(ctx context.Context, t *testing.T, l *lab.Lab, hub, p *lab.Machine, bin, addr string) {
	t.Helper()
	installAgent(ctx, t, p, bin)
	key, err := p.Exec(ctx, "wg", "show", lab.TunnelIface, "public-key")
	if err != nil {
		t.Fatalf("%s's found tunnel: %v %s", p.Name, err, key)
	}
	key = strings.TrimSpace(key)
	taken := time.Now()
	if out, err := meshd(ctx, hub, "tunnel", "take", p.Name, lab.TunnelIface); err != nil {
		t.Fatalf("tunnel take %s wg0: %v\n%s", p.Name, err, out)
	}
	if err := testenv.Poll(t, 60*time.Second, func() error {
		pub, _, _, err := wgDump(ctx, p, lab.TunnelIface)
		if err == nil && pub != key {
			err = fmt.Errorf("%s's wg0 (the mesh's now) has key %s, want its found %s", p.Name, pub, key)
		}
		if err == nil {
			if out, found := foundLink(ctx, p); found {
				err = fmt.Errorf("%s's found interface is still there: %s", p.Name, out)
			}
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	probesSince(t, l, taken, p.Name+"'s tunnel taken", 5*time.Second)
	if a, err := p.Exec(ctx, "ip", "-4", "-o", "addr", "show", "dev", lab.TunnelIface); err != nil || !strings.Contains(a, addr+"/24") {
		t.Fatalf("%s's wg0 address: %v %s", p.Name, err, a)
	}
}

// restartKeepsTunnel: the userspace device runs in a process of its own, not in the agent: the
// same link (same index) serves before and after the hub's agent restarts, and the peers' calls
// through the tunnel hold.
func restartKeepsTunnel(ctx context.Context, t *testing.T, l *lab.Lab, hub *lab.Machine) {
	t.Helper()
	if out, err := hub.Run(ctx, `pgrep -f "meshd tunnel-device"`); err != nil {
		t.Fatalf("no device process for the mesh's wg0 on the hub: %v %s", err, out)
	}
	linkBefore, err := linkIndex(ctx, hub, lab.TunnelIface)
	if err != nil {
		t.Fatal(err)
	}
	restart := time.Now()
	if err := hub.StopService(ctx, "meshd"); err != nil {
		t.Fatal(err)
	}
	if err := hub.StartService(ctx, "meshd"); err != nil {
		t.Fatal(err)
	}
	if err := testenv.Poll(t, 60*time.Second, func() error {
		v, err := tunnelShow(ctx, hub)
		if err == nil && v.State != report.TunnelMeshUp {
			err = fmt.Errorf("state %q", v.State)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	probesSince(t, l, restart, "agent restart", 5*time.Second)
	if linkAfter, err := linkIndex(ctx, hub, lab.TunnelIface); err != nil || linkAfter != linkBefore {
		t.Errorf("the mesh's wg0 was raised again by the restart (ifindex %q -> %q, %v): the peers' tunnel lived in the agent", linkBefore, linkAfter, err)
	}
}

// movedTunnelPortFollows: newnode's tunnel port moves by a push, and its device, the hub's and
// peer2's endpoints for it all follow; it still reaches both; a restart of its agent reuses the
// sealed key (the same public key, no new enrolment).
func movedTunnelPortFollows(ctx context.Context, t *testing.T, hub, peer2, nn *lab.Machine, nnKey string) {
	t.Helper()
	if out, err := meshd(ctx, hub, "node", "set", "newnode", "mesh.tunnel=51830"); err != nil {
		t.Fatalf("node set newnode mesh.tunnel=51830: %v\n%s", err, out)
	}
	if err := testenv.Poll(t, 60*time.Second, func() error {
		if _, port, _, err := wgDump(ctx, nn, "meshd0"); err != nil || port != "51830" {
			return fmt.Errorf("newnode's meshd0 listens on %s (%v), want 51830", port, err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	directPeers(ctx, t, hub, nn, nnKey, fmt.Sprintf("%s:%d", lab.NewnodeAddr, 51830))
	directPeers(ctx, t, peer2, nn, nnKey, fmt.Sprintf("%s:%d", lab.NewnodeAddr, 51830))
	reachPoll(ctx, t, nn, fmt.Sprintf("http://%s:%d/", lab.HubTunnelAddr, lab.WebappPort), 60*time.Second)
	reachPoll(ctx, t, nn, "tcp://10.44.0.3:7946", 60*time.Second)
	if err := nn.StopService(ctx, "meshd"); err != nil {
		t.Fatal(err)
	}
	if err := nn.StartService(ctx, "meshd"); err != nil {
		t.Fatal(err)
	}
	reachPoll(ctx, t, nn, fmt.Sprintf("http://%s:%d/", lab.HubTunnelAddr, lab.WebappPort), 60*time.Second)
	if pub, _, _, err := wgDump(ctx, nn, "meshd0"); err != nil || pub != nnKey {
		t.Fatalf("after newnode's agent restarted its meshd0 has key %s (%v), want the same %s", pub, err, nnKey)
	}
}

// reachRiderThroughHub: from, on the mesh, reaches a service on rider, which still rides the
// predecessor's tunnel (carried by the hub), through the hub: in on meshd0 and out on it again.
// A found firewall that drops what it routes (ufw's "deny routed", an iptables or nftables forward
// policy of drop) let it through only because of the hub's one routed rule; where the found
// firewall is iptables-based the rule is read back at the head of FORWARD, once, with the drop
// policy left as found (the nftables form is checked in TestTunnelOnAnNftablesHub).
func reachRiderThroughHub(ctx context.Context, t *testing.T, hub, from, rider *lab.Machine, fw lab.FirewallKind) {
	t.Helper()
	if out, err := rider.Docker(ctx, "run", "-d", "--name", "rider-svc", "-p", "8081:8080", "lab/echo:1"); err != nil {
		t.Fatalf("a service on %s: %v %s", rider.Name, err, out)
	}
	reachPoll(ctx, t, from, "http://"+rider.TunnelAddr.String()+":8081/", 60*time.Second)
	if fw == lab.FirewallNftables {
		return
	}
	fwd, err := hub.Exec(ctx, "iptables", "-S", "FORWARD")
	if err != nil {
		t.Fatalf("iptables -S FORWARD on the hub: %v %s", err, fwd)
	}
	rule := fmt.Sprintf(`-A FORWARD -s %s -d %s -i wg0 -o wg0 -m comment --comment "%s" -j ACCEPT`, lab.TunnelRange, lab.TunnelRange, routedMark)
	if strings.Count(fwd, routedMark) != 1 || !strings.Contains(fwd, rule) {
		t.Errorf("the hub's FORWARD, want one routed rule, %s:\n%s", rule, fwd)
	}
	if fw == lab.FirewallUFW && !strings.Contains(fwd, "-P FORWARD DROP") {
		t.Errorf("the hub's FORWARD policy is no longer ufw's DROP:\n%s", fwd)
	}
}

// pageAddr is where the hub's agent serves its status page in the migration's lab (loopback).
const pageAddr = "127.0.0.1:9464"

// boardRow reads `meshd status --json` on m: the board's summary and node's row.
func boardRow(ctx context.Context, m *lab.Machine, node string) (string, api.BoardRow, error) {
	out, err := meshd(ctx, m, "status", "--json")
	if err != nil {
		return "", api.BoardRow{}, fmt.Errorf("status: %v %s", err, out)
	}
	var st api.StatusView
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Board == nil {
		return "", api.BoardRow{}, fmt.Errorf("status --json has no board (%v): %s", err, out)
	}
	for _, r := range st.Board.Rows {
		if r.Node == node {
			return st.Board.Summary, r, nil
		}
	}
	return st.Board.Summary, api.BoardRow{}, fmt.Errorf("the board has no row for %s: %+v", node, st.Board.Rows)
}

// stepDone says whether row's step named name is done.
func stepDone(row api.BoardRow, name string) bool {
	for _, s := range row.Steps {
		if s.Name == name {
			return s.Done
		}
	}
	return false
}

// boardSays polls until the board in `meshd status --json` and `meshd status` on hub, and the
// status page's first screen, all show node's row as check wants it; blocking, when set, must be
// among what is in the way, in the status's text and on the page too.
func boardSays(ctx context.Context, t *testing.T, hub *lab.Machine, node, blocking string, check func(summary string, row api.BoardRow) error) {
	t.Helper()
	if err := testenv.Poll(t, 60*time.Second, func() error {
		summary, row, err := boardRow(ctx, hub, node)
		if err != nil {
			return err
		}
		if err := check(summary, row); err != nil {
			return fmt.Errorf("%w (board row %s: %s; next %q; in the way %q)", err, node, row.Track(), row.Next, row.Blocking)
		}
		if blocking != "" && !strings.Contains(strings.Join(row.Blocking, "\n"), blocking) {
			return fmt.Errorf("%s: %q not in the way: %q", node, blocking, row.Blocking)
		}
		text, err := meshd(ctx, hub, "status")
		if err != nil || !strings.Contains(text, "migration: "+summary) || (blocking != "" && !strings.Contains(text, blocking)) {
			return fmt.Errorf("meshd status does not say %q / %q: %v\n%s", summary, blocking, err, text)
		}
		page, err := hub.Exec(ctx, "curl", "-fsS", "http://"+pageAddr+"/")
		if err != nil {
			return fmt.Errorf("the status page: %v %s", err, page)
		}
		first := page
		if i := strings.Index(page, "<h2>Nodes</h2>"); i > 0 {
			first = page[:i]
		}
		if !strings.Contains(first, `id="board-`+node+`"`) || !strings.Contains(first, html.EscapeString(summary)) ||
			(blocking != "" && !strings.Contains(first, html.EscapeString(blocking))) {
			return fmt.Errorf("the page's first screen does not show %s's row, %q and %q", node, summary, blocking)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// historyHas polls `meshd history --json` on hub until each of want (a substring of an event's
// words, with its by: "" any, "(host)" a host event) is there, in that order.
func historyHas(ctx context.Context, t *testing.T, hub *lab.Machine, want ...[2]string) {
	t.Helper()
	if err := testenv.Poll(t, 60*time.Second, func() error {
		out, err := meshd(ctx, hub, "history", "--json")
		if err != nil {
			return fmt.Errorf("history: %v %s", err, out)
		}
		var v api.HistoryView
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			return fmt.Errorf("history --json: %v: %s", err, out)
		}
		i := 0
		var last uint64
		for _, e := range v.Events {
			if e.Index < last {
				return fmt.Errorf("history out of order: %d after %d", e.Index, last)
			}
			last = e.Index
			if i >= len(want) {
				continue
			}
			by := e.By
			if e.Host {
				by = "(host)"
			}
			if strings.Contains(e.What, want[i][0]) && (want[i][1] == "" || by == want[i][1]) {
				i++
			}
		}
		if i < len(want) {
			return fmt.Errorf("history lacks %q (by %q) after the ones before it:\n%s", want[i][0], want[i][1], out)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// adoptedAgainOpensNoMore returns the converged hub to adopted, its found firewall of kind fw in
// force again and meshd's openings converged through it, and checks what a user would: webapp's
// published 8080 and the registry's 5001 answer from newnode, and the containers no rule allows
// (metrics and dashboard, each published on its own port, both listening inside on the
// registry's 5001) answer neither outside nor newnode. The step's row of the probes' table holds
// the same from outside for the whole step.
func adoptedAgainOpensNoMore(ctx context.Context, t *testing.T, hub, nn, outside *lab.Machine, fw lab.FirewallKind) {
	t.Helper()
	if out, err := meshd(ctx, hub, "adopt", "hub", "--wait", "3m"); err != nil {
		t.Fatalf("adopt: %v\n%s", err, out)
	}
	if err := testenv.Poll(t, 60*time.Second, func() error { return consistent(ctx, hub, fw, "adopted") }); err != nil {
		t.Fatal(err)
	}
	if err := testenv.Poll(t, 60*time.Second, func() error {
		for _, p := range []int{lab.WebappPort, lab.DeniedInsidePort} {
			if out, err := nn.Reach(ctx, fmt.Sprintf("http://%s:%d/", lab.HubAddr, p)); err != nil {
				return fmt.Errorf("newnode does not reach the declared %d: %v %s", p, err, out)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, m := range []*lab.Machine{outside, nn} {
		for _, p := range []int{lab.DeniedPort, lab.DashboardPort} {
			if out, err := m.Reach(ctx, fmt.Sprintf("tcp://%s:%d", lab.HubAddr, p)); err == nil {
				t.Errorf("%s reached %d, which no rule allows (its container listens inside on the registry's %d): %s", m.Name, p, lab.DeniedInsidePort, out)
			}
		}
	}
}
