package openings

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"meshd/catalogue"
	"meshd/fsm"
	"meshd/host"
	"meshd/host/hosttest"
	"meshd/internal/testenv"
	"meshd/netfilter"
	"meshd/report"
)

// The openings lab: network namespaces named with the prefix ho.
//
//	cli  (198.51.100.2) ──veth── host (198.51.100.1)   an outside machine
//	peer (203.0.113.2)  ──veth── host (203.0.113.1)    stands in for the mesh's WireGuard interface
//
// host runs the found firewall; /etc/nftables.conf and /etc/ufw there are bind mounts from a temp
// dir in a private mount namespace (a holder process), so this machine's files are never touched.
// The declarations are composed by fsm from the shipped catalogue plus howeb, a webapp-like
// module whose port is opened to anywhere on the incoming path.

const howebManifest = `name: howeb
description: a webapp-like test module, its port opened to anywhere on the incoming path
settings:
  port: 7000
openings:
  - {port: "${port}", proto: tcp, from: anywhere, path: incoming}
`

type hoLab struct {
	t        *testing.T
	host     string
	cli      string
	peer     string
	dir      string
	env      netfilter.Env
	wgIf     string
	hostAddr string
	privAddr string
}

func newHoLab(t *testing.T) *hoLab {
	t.Helper()
	testenv.RequireRoot(t, "openings lab", "ip", "nft", "iptables-nft", "nsenter", "unshare")
	b := make([]byte, 3)
	rand.Read(b)
	id := hex.EncodeToString(b)
	l := &hoLab{t: t, host: "ho-host-" + id, cli: "ho-cli-" + id, peer: "ho-peer-" + id,
		wgIf: "how" + id, hostAddr: "198.51.100.1", privAddr: "203.0.113.1"}
	for _, ns := range []string{l.host, l.cli, l.peer} {
		testenv.NewNetns(t, ns)
	}
	link := func(hostIf, other, hostIP, otherIP string) {
		testenv.Run(t, "ip", "link", "add", hostIf, "netns", l.host, "type", "veth", "peer", "name", hostIf+"x", "netns", other)
		testenv.Run(t, "ip", "-n", l.host, "addr", "add", hostIP+"/24", "dev", hostIf)
		testenv.Run(t, "ip", "-n", other, "addr", "add", otherIP+"/24", "dev", hostIf+"x")
		testenv.Run(t, "ip", "-n", l.host, "link", "set", hostIf, "up")
		testenv.Run(t, "ip", "-n", other, "link", "set", hostIf+"x", "up")
	}
	link("hou"+id, l.cli, l.hostAddr, "198.51.100.2")
	link(l.wgIf, l.peer, l.privAddr, "203.0.113.2")

	l.dir = t.TempDir()
	if _, err := os.Stat("/etc/ufw"); err == nil {
		testenv.Run(t, "cp", "-a", "/etc/ufw", filepath.Join(l.dir, "etc-ufw"))
		// nothing in this lab is ufw: the copy only keeps Detect from reading the machine's own
		os.WriteFile(filepath.Join(l.dir, "etc-ufw", "ufw.conf"), []byte("ENABLED=no\n"), 0o644)
	} else {
		os.MkdirAll(filepath.Join(l.dir, "etc-ufw"), 0o755)
	}
	os.WriteFile(filepath.Join(l.dir, "nftables.conf"), []byte("#!/usr/sbin/nft -f\nflush ruleset\n"), 0o644)
	script := fmt.Sprintf("mkdir -p /etc/ufw && mount --bind %[1]s/etc-ufw /etc/ufw && touch /etc/nftables.conf && "+
		"mount --bind %[1]s/nftables.conf /etc/nftables.conf && echo ready && exec sleep infinity", l.dir)
	mntns := testenv.HoldMountNS(t, script)
	netns := "/run/netns/" + l.host
	l.env = netfilter.Env{NetNS: netns, Runner: netfilter.NSEnter(netns, mntns), Root: strings.TrimSuffix(mntns, "/ns/mnt") + "/root",
		StateDir: filepath.Join(l.dir, "state"), Log: hosttest.Log()}
	return l
}

// sh runs a shell command on the host (its network and mount namespaces).
func (l *hoLab) sh(cmd string) string {
	l.t.Helper()
	out, err := l.env.Runner.Run(context.Background(), nil, "sh", "-c", cmd)
	if err != nil {
		l.t.Fatalf("host: %s: %v", cmd, err)
	}
	return string(out)
}

// foundNftables loads a found nftables ruleset the way Debian's nftables.service does: default
// deny, ssh and (as a predecessor might) the store's port 7001 allowed from anywhere.
func (l *hoLab) foundNftables() {
	l.t.Helper()
	conf := `#!/usr/sbin/nft -f
flush ruleset

table inet hofound {
	chain input {
		type filter hook input priority filter; policy drop;
		ct state established,related accept
		iif "lo" accept
		tcp dport 22 accept
		tcp dport 7001 accept
	}

	chain forward {
		type filter hook forward priority filter; policy drop;
		ct state established,related accept
	}
}
`
	if err := os.WriteFile(filepath.Join(l.dir, "nftables.conf"), []byte(conf), 0o644); err != nil {
		l.t.Fatal(err)
	}
	l.sh("nft -f /etc/nftables.conf")
}

// serve listens on every address of the host at port and answers each connection with "ok".
func (l *hoLab) serve(port int) {
	l.t.Helper()
	var ln net.Listener
	if err := testenv.InNetns(l.host, func() (err error) { ln, err = net.Listen("tcp", fmt.Sprintf("0.0.0.0:%d", port)); return }); err != nil {
		l.t.Fatalf("listen on %d in %s: %v", port, l.host, err)
	}
	l.t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, "ok")
			c.Close()
		}
	}()
}

// hoReach is a real TCP connect from ns to addr that reads the server's "ok".
func hoReach(ns, addr string, timeout time.Duration) bool {
	var c net.Conn
	if err := testenv.InNetns(ns, func() (err error) {
		c, err = (&net.Dialer{Timeout: timeout}).Dial("tcp", addr)
		return err
	}); err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(timeout))
	b := make([]byte, 2)
	_, err := io.ReadFull(c, b)
	return err == nil && string(b) == "ok"
}

// wantReach polls until addr's reachability from ns is want, or fails after 3 s.
func (l *hoLab) wantReach(ns, addr string, want bool) {
	l.t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		got := hoReach(ns, addr, 300*time.Millisecond)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("from %s to %s: reachable=%v, want %v", ns, addr, got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (l *hoLab) outside(port int) string { return fmt.Sprintf("%s:%d", l.hostAddr, port) }
func (l *hoLab) private(port int) string { return fmt.Sprintf("%s:%d", l.privAddr, port) }

// hoMesh is a record the way the controller keeps it: genesis from the shipped catalogue (plus
// howeb), the private network's range the lab's, the store on port 7001.
type hoMesh struct {
	t  *testing.T
	r  *fsm.Record
	at time.Time
}

func newHoMesh(t *testing.T, mode fsm.Mode) *hoMesh {
	m := &hoMesh{t: t, r: fsm.NewRecord(), at: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	sources := append(catalogue.DefaultSources(), catalogue.Source{File: "howeb.yaml", Data: howebManifest})
	m.apply(fsm.OpGenesis, fsm.Genesis{Node: "hub", ID: "id-hub", Mode: mode, Advertise: "198.51.100.1",
		Settings:  map[string]string{"mesh.range": "203.0.113.0/24", "store.port": "7001"},
		Catalogue: sources, Assign: []string{"broker", "mesh", "registry", "store"}})
	return m
}

func (m *hoMesh) apply(op fsm.Op, body any) {
	m.t.Helper()
	m.at = m.at.Add(time.Minute)
	c, err := fsm.Encode(op, m.at, body)
	if err != nil {
		m.t.Fatal(err)
	}
	if _, err := fsm.Apply(m.r, c); err != nil {
		m.t.Fatalf("%s: %v", op, err)
	}
}

func (m *hoMesh) decl() *fsm.Declaration {
	m.t.Helper()
	d, err := fsm.Compose(m.r, "hub")
	if err != nil {
		m.t.Fatal(err)
	}
	return d
}

// hoHost opens a host reconciler whose only driver is the opening driver, in the lab's host.
func hoHost(t *testing.T, l *hoLab) (*host.Host, *Driver) {
	t.Helper()
	drv := New(Config{Env: l.env, Interface: l.wgIf, Recheck: 500 * time.Millisecond, Logger: hosttest.Log()})
	t.Cleanup(func() { drv.Close() })
	b := hosttest.NewBed(t)
	h, err := host.Open(host.Config{DataDir: b.Data, Seal: hosttest.Seal, Root: b.Root, Logger: hosttest.Log(), Drivers: []host.Driver{drv}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h, drv
}

// errorsOf are the report's failures of opening resources (containers have no driver here).
func errorsOf(rep report.Report) []report.ResourceError {
	var out []report.ResourceError
	for _, e := range rep.Errors {
		if strings.HasPrefix(e.Resource, fsm.KindOpening+":") {
			out = append(out, e)
		}
	}
	return out
}

func detailOf(t *testing.T, rep report.Report) report.OpeningDetail {
	t.Helper()
	d, ok := rep.Kinds[fsm.KindOpening].(report.OpeningDetail)
	if !ok {
		t.Fatalf("report has no opening detail: %#v", rep.Kinds)
	}
	return d
}

func viewOf(d report.OpeningDetail, module string, port uint16) *report.OpeningView {
	for i, v := range d.Openings {
		if v.Module == module && strings.Contains(v.Resource, fmt.Sprintf(":%d/", port)) {
			return &d.Openings[i]
		}
	}
	return nil
}

func countOpenings(d *fsm.Declaration) int {
	n := 0
	for _, r := range d.Resources {
		if r.Kind == fsm.KindOpening {
			n++
		}
	}
	return n
}

// lineDiff returns the lines of after not in before, and of before not in after (as multisets).
func lineDiff(before, after string) (added, removed []string) {
	count := func(s string) map[string]int {
		m := map[string]int{}
		for _, l := range strings.Split(s, "\n") {
			if l = strings.TrimSpace(l); l != "" {
				m[l]++
			}
		}
		return m
	}
	b, a := count(before), count(after)
	for l, n := range a {
		for i := b[l]; i < n; i++ {
			added = append(added, l)
		}
	}
	for l, n := range b {
		for i := a[l]; i < n; i++ {
			removed = append(removed, l)
		}
	}
	return added, removed
}

// An adopted node with a found nftables ruleset (default deny): assigning a module opens its port
// through the found firewall, marking only its own rules; the guard keeps the store's port from
// the outside though the found firewall allows it; a reload that flushes the ruleset is repaired
// by the watch within 2 s, without a pass; a pass with nothing to do changes nothing; unassigning
// the module removes its openings and nothing else.
func TestOpeningsAdoptedFoundNftables(t *testing.T) {
	l := newHoLab(t)
	l.foundNftables()
	l.serve(7000) // howeb's port
	l.serve(7001) // the store's port (guarded)
	l.serve(7002) // nobody declares it
	dump := func() string { return l.sh("nft list table inet hofound") }
	found := dump()
	l.wantReach(l.cli, l.outside(7000), false)
	l.wantReach(l.cli, l.outside(7001), true) // the found firewall allows the store's port

	mesh := newHoMesh(t, fsm.Adopted)
	h, drv := hoHost(t, l)
	ctx := context.Background()

	rep := h.Reconcile(ctx, mesh.decl())
	if errs := errorsOf(rep); len(errs) > 0 {
		t.Fatalf("genesis declaration: %v", errs)
	}
	det := detailOf(t, rep)
	if det.Firewall.Kind != "nftables" || !strings.Contains(det.Firewall.Description, "nftables, active") {
		t.Fatalf("found firewall reported as %+v", det.Firewall)
	}
	// Every foundation port from private is guarded: the broker (5672), the store (7001 here),
	// Raft (7071: the record's servers are admitted to it at their underlay addresses, where they
	// meet before the private network is up; anyone else is refused before its mTLS) and the
	// broker's management port (15672).
	if det.Guard == nil || det.Guard.State != "loaded" || strings.Join(det.Guard.Ports, ",") != "tcp/5672,tcp/7001,tcp/7071,tcp/15672" {
		t.Fatalf("guard reported as %+v", det.Guard)
	}
	if !strings.HasPrefix(det.Watch, "re-applied on every change") {
		t.Fatalf("watch reported as %q", det.Watch)
	}
	// (4) the guard: the store is refused from outside, reachable over the private interface.
	l.wantReach(l.cli, l.outside(7001), false)
	l.wantReach(l.peer, l.private(7001), true)
	l.wantReach(l.cli, l.outside(7000), false) // not assigned yet

	// (1) assigning prepares: howeb's port opens through the found firewall.
	mesh.apply(fsm.OpModuleAssign, fsm.ModuleOnNode{Node: "hub", Module: "howeb"})
	assigned := mesh.decl()
	rep = h.Reconcile(ctx, assigned)
	if errs := errorsOf(rep); len(errs) > 0 {
		t.Fatalf("assigned: %v", errs)
	}
	if rep.Changes == 0 {
		t.Fatal("assigning an opening reported no change")
	}
	v := viewOf(detailOf(t, rep), "howeb", 7000)
	if v == nil || v.State != report.OpeningInForce || v.Taken || v.Through != "found nftables" || v.Since.IsZero() {
		t.Fatalf("howeb's opening reported as %+v", v)
	}
	l.wantReach(l.cli, l.outside(7000), true)
	l.wantReach(l.cli, l.outside(7002), false)
	l.wantReach(l.cli, l.outside(7001), false)
	withOpenings := dump()
	added, removed := lineDiff(found, withOpenings)
	if len(removed) > 0 {
		t.Fatalf("found rules removed: %q", removed)
	}
	if len(added) == 0 {
		t.Fatal("no rule added to the found ruleset")
	}
	for _, line := range added {
		if !strings.Contains(line, `comment "meshd:`) {
			t.Fatalf("an unmarked rule appeared in the found ruleset: %q", line)
		}
	}
	t.Logf("found ruleset after assigning:\n%s", withOpenings)

	// (7) a pass with nothing to do changes nothing.
	t0 := time.Now()
	if rep := h.Reconcile(ctx, assigned); rep.Changes != 0 {
		t.Fatalf("no-op pass reported %d changes", rep.Changes)
	}
	t.Logf("a no-op pass (detect, converge, guard) took %s", time.Since(t0).Round(time.Millisecond))

	// (2) a reload of the found firewall (flush ruleset) drops meshd's rules and the guard; the
	// watch puts both back within 2 s, with no pass.
	reloaded := time.Now().UTC()
	l.sh("nft -f /etc/nftables.conf")
	deadline := reloaded.Add(2 * time.Second)
	for {
		guardBack := strings.Contains(l.sh("nft list tables"), "inet "+netfilter.GuardTable)
		openBack := strings.Contains(dump(), "meshd:howeb:")
		if guardBack && openBack {
			t.Logf("restored %s after the reload", time.Since(reloaded).Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("2 s after the reload: guard back %v, howeb's opening back %v", guardBack, openBack)
		}
		time.Sleep(20 * time.Millisecond)
	}
	l.wantReach(l.cli, l.outside(7000), true)
	l.wantReach(l.cli, l.outside(7001), false)
	l.wantReach(l.peer, l.private(7001), true)
	// The rules are in the kernel a moment before the watch's pass records what it did: poll.
	var st report.OpeningDetail
	for until := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		st = drv.Status()
		v := viewOf(st, "howeb", 7000)
		okOpening := v != nil && v.State == report.OpeningRestored && !v.RestoredAt.Before(reloaded)
		okGuard := st.Guard != nil && st.Guard.State == "restored" && !st.Guard.RestoredAt.Before(reloaded)
		if okOpening && okGuard {
			break
		}
		if time.Now().After(until) {
			t.Fatalf("after the reload howeb's opening reads %+v and the guard %+v", v, st.Guard)
		}
	}
	if rep := h.Reconcile(ctx, assigned); rep.Changes != 0 || len(errorsOf(rep)) > 0 {
		t.Fatalf("pass after the watch repaired: %d changes, %v", rep.Changes, errorsOf(rep))
	} else if b, err := json.Marshal(rep.Kinds[fsm.KindOpening]); err != nil {
		t.Fatal(err)
	} else {
		t.Logf("opening detail: %s", b)
	}

	// (3) unassigning howeb removes its openings and nothing else.
	before := dump()
	mesh.apply(fsm.OpModuleUnassign, fsm.ModuleOnNode{Node: "hub", Module: "howeb"})
	rep = h.Reconcile(ctx, mesh.decl())
	if errs := errorsOf(rep); len(errs) > 0 {
		t.Fatalf("unassigned: %v", errs)
	}
	if viewOf(detailOf(t, rep), "howeb", 7000) != nil {
		t.Fatal("an unassigned module's opening is still reported")
	}
	l.wantReach(l.cli, l.outside(7000), false)
	l.wantReach(l.cli, l.outside(7001), false)
	after := dump()
	added, removed = lineDiff(before, after)
	if len(added) > 0 {
		t.Fatalf("unassigning added rules: %q", added)
	}
	if len(removed) == 0 {
		t.Fatal("unassigning removed nothing")
	}
	for _, line := range removed {
		if !strings.Contains(line, `comment "meshd:howeb:`) {
			t.Fatalf("unassigning howeb removed a rule that is not howeb's: %q", line)
		}
	}
	if added, removed := lineDiff(found, after); len(removed) > 0 || len(added) == 0 {
		t.Fatalf("against the found ruleset: added %q, removed %q", added, removed)
	}
}

// A converged node gets meshd's derived filter: a declared port open, an undeclared listening port
// closed, the mesh's own raft port admitted only from the record's servers' underlay addresses
// (here the hub's own; outside is none) and the private network; no guard.
func TestOpeningsConvergedDerivedFilter(t *testing.T) {
	l := newHoLab(t)
	l.serve(7000)                             // howeb's port
	l.serve(7002)                             // nobody declares it
	l.serve(7071)                             // raft: the mesh's own, from the servers (then mTLS)
	l.wantReach(l.cli, l.outside(7002), true) // nothing filters yet

	mesh := newHoMesh(t, fsm.Converged)
	mesh.apply(fsm.OpModuleAssign, fsm.ModuleOnNode{Node: "hub", Module: "howeb"})
	d := mesh.decl()
	h, _ := hoHost(t, l)
	ctx := context.Background()
	rep := h.Reconcile(ctx, d)
	if errs := errorsOf(rep); len(errs) > 0 {
		t.Fatalf("converged: %v", errs)
	}
	det := detailOf(t, rep)
	if det.Filter == nil || det.Filter.State != "loaded" || det.Guard != nil || det.Firewall.Kind != "none" {
		t.Fatalf("converged detail: filter %+v guard %+v firewall %+v", det.Filter, det.Guard, det.Firewall)
	}
	if v := viewOf(det, "howeb", 7000); v == nil || v.State != report.OpeningInForce || v.Through != "meshd filter" {
		t.Fatalf("howeb's opening reported as %+v", v)
	}
	l.wantReach(l.cli, l.outside(7000), true)
	l.wantReach(l.cli, l.outside(7002), false)
	l.wantReach(l.cli, l.outside(7071), false) // not a server: refused before its TLS
	l.wantReach(l.peer, l.private(7071), true)
	l.wantReach(l.peer, l.private(7002), false)
	if tables := l.sh("nft list tables"); strings.Contains(tables, netfilter.GuardTable) || !strings.Contains(tables, netfilter.FilterTable) {
		t.Fatalf("tables on a converged node:\n%s", tables)
	}
	if rep := h.Reconcile(ctx, d); rep.Changes != 0 {
		t.Fatalf("no-op pass on a converged node reported %d changes", rep.Changes)
	}

	// Returned to adopted: meshd's filter goes (nothing was found here, so nothing filters), the
	// guard comes.
	mesh.apply(fsm.OpModeSet, fsm.SetMode{Node: "hub", Mode: fsm.Adopted})
	rep = h.Reconcile(ctx, mesh.decl())
	if errs := errorsOf(rep); len(errs) > 0 {
		t.Fatalf("returned to adopted: %v", errs)
	}
	if det := detailOf(t, rep); det.Guard == nil || det.Guard.State != "loaded" || det.Filter != nil {
		t.Fatalf("returned to adopted: guard %+v filter %+v", det.Guard, det.Filter)
	}
	l.wantReach(l.cli, l.outside(7002), true)
	l.wantReach(l.cli, l.outside(7001), false) // the store's port, guarded
	if tables := l.sh("nft list tables"); !strings.Contains(tables, netfilter.GuardTable) || strings.Contains(tables, netfilter.FilterTable) {
		t.Fatalf("tables on a node returned to adopted:\n%s", tables)
	}
}

// A found firewall meshd does not speak (firewalld) fails every opening, naming it.
func TestOpeningsFirewalldFails(t *testing.T) {
	l := newHoLab(t)
	l.sh("nft add table inet firewalld && nft add chain inet firewalld filter_INPUT '{ type filter hook input priority 10; policy accept; }'")
	mesh := newHoMesh(t, fsm.Adopted)
	mesh.apply(fsm.OpModuleAssign, fsm.ModuleOnNode{Node: "hub", Module: "howeb"})
	d := mesh.decl()
	h, _ := hoHost(t, l)
	rep := h.Reconcile(context.Background(), d)
	errs := errorsOf(rep)
	if len(errs) != countOpenings(d) || len(errs) == 0 {
		t.Fatalf("%d openings failed, want every one of %d: %v", len(errs), countOpenings(d), errs)
	}
	for _, e := range errs {
		if !strings.Contains(e.Reason, "firewalld") {
			t.Fatalf("%s failed without naming firewalld: %s", e.Resource, e.Reason)
		}
	}
	t.Logf("for example: %s", errs[0])
	det := detailOf(t, rep)
	if !strings.Contains(det.Firewall.Refused, "firewalld") {
		t.Fatalf("firewall reported as %+v", det.Firewall)
	}
	for _, v := range det.Openings {
		if v.State != report.OpeningFailed {
			t.Fatalf("%s reads %q", v.Resource, v.State)
		}
	}
}
