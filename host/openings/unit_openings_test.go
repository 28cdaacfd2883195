package openings

// Unit tests of the opening kind's decision and its execution on the in-memory packet filter
// (fakes_test.go): the firewall rows of docs/architecture.md's "Adopted and converged", without
// root, in milliseconds. The same rules against the real kernel are openings_test.go.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"meshd/catalogue"
	"meshd/fsm"
	"meshd/host"
	"meshd/host/hosttest"
	"meshd/host/hosttest/drivertest"
	"meshd/netfilter"
	"meshd/report"
)

func unitOpening(module string, port uint16, proto, from string, guarded bool) fsm.Resource {
	return fsm.Resource{Module: module, Kind: fsm.KindOpening, Opening: &catalogue.PortOpening{
		Port: port, Proto: proto, From: from, Path: netfilter.PathIncoming, Guarded: guarded}}
}

func unitOpeningDecl(mode fsm.Mode, rs ...fsm.Resource) *fsm.Declaration {
	d := hosttest.DeclUntaken(mode, rs...)
	d.Tunnel.Range = "10.99.0.0/24"
	d.Mesh = fsm.MeshPorts{Bus: 7070, Raft: 7071, Gossip: 7946, Tunnel: 51820}
	return d
}

func unitMarks(rs ...fsm.Resource) []string {
	var out []string
	for _, r := range rs {
		o := r.Opening
		out = append(out, netfilter.Opening{Module: r.Module, Proto: o.Proto, Port: o.Port, From: o.From, Path: o.Path}.Mark())
	}
	slices.Sort(out)
	return out
}

func TestUnitDecideOpenings(t *testing.T) {
	active := netfilter.Found{Kind: netfilter.KindUFW, Active: true}
	retired := netfilter.Found{Kind: netfilter.KindUFW}
	none := netfilter.Found{Kind: netfilter.KindNone, Active: true}
	firewalld := fmt.Errorf("firewalld is active: %w", netfilter.ErrUnsupported)
	unreadable := errors.New("permission denied")
	for _, c := range []struct {
		name  string
		mode  fsm.Mode
		found netfilter.Found
		err   error
		want  plan
	}{
		{"adopted: through the found firewall, guard", fsm.Adopted, active, nil, plan{throughFound: true}},
		{"adopted: nothing found, still through its driver, guard", fsm.Adopted, none, nil, plan{throughFound: true}},
		{"adopted: unsupported fails every opening, guard all the same", fsm.Adopted, netfilter.Found{}, firewalld,
			plan{refused: firewalld.Error()}},
		{"adopted: unreadable fails every opening", fsm.Adopted, netfilter.Found{}, unreadable,
			plan{refused: "the found firewall could not be read: permission denied"}},
		{"converged: derived filter and the active found firewall", fsm.Converged, active, nil, plan{throughFound: true, filter: true}},
		{"converged: retired found firewall untouched", fsm.Converged, retired, nil, plan{filter: true}},
		{"converged: nothing found", fsm.Converged, none, nil, plan{filter: true}},
	} {
		if got := decideOpenings(c.mode, c.found, c.err); got != c.want {
			t.Errorf("%s: decideOpenings = %+v, want %+v", c.name, got, c.want)
		}
	}
}

// Adopted node: the found firewall gets meshd-marked rules equal to the declared openings (and
// loses those no longer declared), the guard is loaded with the guarded ports, no derived filter.
func TestUnitOpeningsAdoptedThroughFoundFirewall(t *testing.T) {
	pf := newFakeFilter(netfilter.Found{Kind: netfilter.KindUFW, Active: true})
	pf.filter = &netfilter.FilterSpec{} // left from an earlier converged life
	h, _ := drivertest.Open(t, newDriver(Config{Logger: hosttest.Log()}, pf))
	ctx := hosttest.Ctx(t)
	web := unitOpening("webapp", 8080, "tcp", "anywhere", false)
	store := unitOpening("store", 7001, "tcp", "private", true)
	broker := unitOpening("broker", 15672, "tcp", "private", true)

	rep := h.Reconcile(ctx, unitOpeningDecl(fsm.Adopted, web, store, broker))
	hosttest.NoErrorsFatal(t, rep)
	if got, want := pf.markedSorted(), unitMarks(web, store, broker); !slices.Equal(got, want) {
		t.Fatalf("meshd-marked rules in the found firewall %q, want %q", got, want)
	}
	if pf.guard == nil || fmt.Sprint(pf.guard.Ports) != "[tcp/7001 tcp/15672]" || pf.guard.Private.Interface != MeshInterface {
		t.Fatalf("guard %+v, want the guarded ports tcp/7001, tcp/15672 from %s", pf.guard, MeshInterface)
	}
	if pf.filter != nil {
		t.Fatal("the derived filter is loaded on an adopted node")
	}
	od := detailOf(t, rep)
	for _, v := range od.Openings {
		if v.State != report.OpeningInForce || v.Through != "found ufw" {
			t.Errorf("opening %+v, want in force through the found ufw", v)
		}
	}
	if od.Guard == nil || od.Guard.State != "loaded" || od.Filter != nil {
		t.Errorf("tables: guard %+v, filter %+v", od.Guard, od.Filter)
	}

	rep = h.Reconcile(ctx, unitOpeningDecl(fsm.Adopted, web, store, broker))
	if rep.Changes != 0 {
		t.Errorf("a pass with nothing to do changed %d", rep.Changes)
	}
	rep = h.Reconcile(ctx, unitOpeningDecl(fsm.Adopted, web))
	hosttest.NoErrorsFatal(t, rep)
	if got, want := pf.markedSorted(), unitMarks(web); !slices.Equal(got, want) {
		t.Fatalf("after unassigning: marked rules %q, want %q", got, want)
	}
	if len(pf.guard.Ports) != 0 {
		t.Fatalf("guard still guards %v with no guarded opening", pf.guard.Ports)
	}
}

// A found firewall meshd does not speak fails every opening, naming it; the guard is loaded all
// the same (it only refuses).
func TestUnitOpeningsUnsupportedFirewallFailsEveryOpening(t *testing.T) {
	pf := newFakeFilter(netfilter.Found{})
	pf.detectErr = fmt.Errorf("firewalld is active (/etc/firewalld): %w", netfilter.ErrUnsupported)
	h, _ := drivertest.Open(t, newDriver(Config{Logger: hosttest.Log()}, pf))
	ctx := hosttest.Ctx(t)
	rs := []fsm.Resource{unitOpening("webapp", 8080, "tcp", "anywhere", false), unitOpening("store", 7001, "tcp", "private", true)}

	rep := h.Reconcile(ctx, unitOpeningDecl(fsm.Adopted, rs...))
	if len(rep.Errors) != len(rs) {
		t.Fatalf("errors %+v, want one for each opening", rep.Errors)
	}
	for _, e := range rep.Errors {
		if !strings.HasPrefix(e.Resource, fsm.KindOpening+":") || !strings.Contains(e.Reason, "firewalld") {
			t.Errorf("error %+v does not name the firewall", e)
		}
	}
	if len(pf.markedSorted()) != 0 {
		t.Error("rules were written to a firewall meshd does not speak")
	}
	if pf.guard == nil || fmt.Sprint(pf.guard.Ports) != "[tcp/7001]" {
		t.Errorf("guard %+v, want loaded with tcp/7001", pf.guard)
	}
	if od := detailOf(t, rep); od.Firewall.Kind != "refused" || !strings.Contains(od.Firewall.Refused, "firewalld") {
		t.Errorf("firewall view %+v", od.Firewall)
	}
}

// Converged node: the derived filter carries every opening plus the mesh's own ports (from the
// declaration), the guard is removed; the found firewall carries them too while still active,
// and a retired one is not touched.
func TestUnitOpeningsConvergedDerivedFilter(t *testing.T) {
	pf := newFakeFilter(netfilter.Found{Kind: netfilter.KindNftables, Active: true})
	pf.guard = &netfilter.GuardSpec{} // left from the adopted life
	h, _ := drivertest.Open(t, newDriver(Config{Logger: hosttest.Log()}, pf))
	ctx := hosttest.Ctx(t)
	rs := []fsm.Resource{unitOpening("webapp", 8080, "tcp", "anywhere", false), unitOpening("store", 7001, "tcp", "private", true)}

	rep := h.Reconcile(ctx, unitOpeningDecl(fsm.Converged, rs...))
	hosttest.NoErrorsFatal(t, rep)
	if pf.filter == nil {
		t.Fatal("no derived filter on a converged node")
	}
	if got := fmt.Sprint(pf.filter.MeshPorts); got != "[tcp/7070 tcp/7071 tcp/7946 udp/7946]" {
		t.Errorf("the filter's mesh ports %s, want the declaration's bus, raft and gossip", got)
	}
	if len(pf.filter.Openings) != len(rs) || pf.filter.Private.Range.String() != "10.99.0.0/24" {
		t.Errorf("the filter's openings %v, private %v", pf.filter.Openings, pf.filter.Private)
	}
	if pf.guard != nil {
		t.Error("the guard is still loaded on a converged node")
	}
	if got, want := pf.markedSorted(), unitMarks(rs...); !slices.Equal(got, want) {
		t.Errorf("the active found firewall's marked rules %q, want %q", got, want)
	}
	od := detailOf(t, rep)
	if od.Filter == nil || od.Filter.State != "loaded" || od.Guard != nil {
		t.Errorf("tables: filter %+v, guard %+v", od.Filter, od.Guard)
	}
	for _, v := range od.Openings {
		if v.State != report.OpeningInForce || v.Through != "meshd filter and found nftables" {
			t.Errorf("opening %+v", v)
		}
	}

	// The found firewall retired (by the flip): the filter alone carries the openings and the
	// found firewall's rules are left as they are.
	pf.found.Active = false
	rep = h.Reconcile(ctx, unitOpeningDecl(fsm.Converged, rs[0]))
	hosttest.NoErrorsFatal(t, rep)
	if got, want := pf.markedSorted(), unitMarks(rs...); !slices.Equal(got, want) {
		t.Errorf("a retired found firewall was touched: marked rules %q, want %q", got, want)
	}
	if len(pf.filter.Openings) != 1 {
		t.Errorf("the filter's openings %v, want the one declared", pf.filter.Openings)
	}
	if v := detailOf(t, rep).Openings[0]; v.Through != "meshd filter" {
		t.Errorf("opening through %q, want the filter alone", v.Through)
	}
}

// The guard admits the mesh's own ports from the interface the declaration raises, whatever its
// name (ADR 0105: the private interface is the declared tunnel interface).
func TestUnitGuardFollowsTheDeclaredTunnelInterface(t *testing.T) {
	pf := newFakeFilter(netfilter.Found{Kind: netfilter.KindUFW, Active: true})
	h, _ := drivertest.Open(t, newDriver(Config{Logger: hosttest.Log()}, pf))
	d := unitOpeningDecl(fsm.Adopted, unitOpening("store", 7001, "tcp", "private", true))
	d.Tunnel.Interface = "wg-mesh"
	hosttest.NoErrorsFatal(t, h.Reconcile(hosttest.Ctx(t), d))
	if pf.guard == nil || pf.guard.Private.Interface != "wg-mesh" {
		t.Fatalf("guard %+v, want the private network on the declared interface wg-mesh", pf.guard)
	}
}

// A pass detects the found firewall again only when its stamp moved (firewall.Stamp: the
// nftables ruleset's generation, its files) or none stands for it: the firewall changing kind
// between passes is still seen on the next pass, an unchanged one is not read pass after pass.
func TestUnitOpeningsDetectOnlyWhenTheStampMoves(t *testing.T) {
	pf := newFakeFilter(netfilter.Found{Kind: netfilter.KindUFW, Active: true})
	pf.stamp = "gen 1"
	h, _ := drivertest.Open(t, newDriver(Config{Logger: hosttest.Log()}, pf))
	ctx := hosttest.Ctx(t)
	decl := unitOpeningDecl(fsm.Adopted, unitOpening("webapp", 8080, "tcp", "anywhere", false))
	detects := func() int { pf.mu.Lock(); defer pf.mu.Unlock(); return pf.detects }

	hosttest.NoErrorsFatal(t, h.Reconcile(ctx, decl))
	first := detects()
	for range 3 {
		hosttest.NoErrorsFatal(t, h.Reconcile(ctx, decl))
	}
	if n := detects() - first; n != 0 {
		t.Fatalf("three passes over an unchanged firewall (same stamp) detected it %d times, want 0", n)
	}
	// ufw disabled and an nftables ruleset loaded: the kernel's generation moves.
	pf.mu.Lock()
	pf.found, pf.stamp = netfilter.Found{Kind: netfilter.KindNftables, Active: true}, "gen 2"
	pf.mu.Unlock()
	rep := h.Reconcile(ctx, decl)
	hosttest.NoErrorsFatal(t, rep)
	if od := detailOf(t, rep); od.Firewall.Kind != string(netfilter.KindNftables) {
		t.Fatalf("after the stamp moved the report says the found firewall is %q, want nftables", od.Firewall.Kind)
	}
	for _, v := range detailOf(t, rep).Openings {
		if v.Through != "found nftables" {
			t.Errorf("opening %+v, want through the found nftables", v)
		}
	}
	// No stamp (iptables-legacy has no generation): every pass detects.
	pf.mu.Lock()
	pf.stamp = ""
	pf.mu.Unlock()
	before := detects()
	hosttest.NoErrorsFatal(t, h.Reconcile(ctx, decl))
	hosttest.NoErrorsFatal(t, h.Reconcile(ctx, decl))
	if n := detects() - before; n != 2 {
		t.Fatalf("two passes with no stamp detected %d times, want 2", n)
	}
}

// At rest a pass and the watch's timer read the monitor's mark and the stamp, nothing else; any
// event, a moved stamp or a monitor gone makes them read everything again, so what a reload
// dropped is restored and reported restored. The race the mark closes: a read between the kernel
// moving the generation and the commit's changes becoming visible sees the new stamp and the old
// rules; the commit's events, which come after, make the next timer call read again.
func TestUnitOpeningsAtRestReadOnlyTheStamp(t *testing.T) {
	pf, drv, h, ctx, decl := liveUFWBed(t)
	reads := func() int { pf.mu.Lock(); defer pf.mu.Unlock(); return pf.reads }

	hosttest.NoErrorsFatal(t, h.Reconcile(ctx, decl)) // starts the watch
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, live := drv.memo.changes.Mark(); live {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the watch's monitor never read live")
		}
	}
	hosttest.NoErrorsFatal(t, h.Reconcile(ctx, decl)) // a full application with the monitor live
	timer, event := netfilter.Tick{Timer: true}, netfilter.Tick{}
	at := reads()
	for range 3 {
		hosttest.NoErrorsFatal(t, h.Reconcile(ctx, decl))
		drv.recheckNow(ctx, timer)
	}
	if n := reads() - at; n != 0 {
		t.Fatalf("three passes and three timer calls at rest read the packet filter %d times, want 0", n)
	}
	// An event's call reads everything, whatever the stamp.
	drv.recheckNow(ctx, event)
	if reads() == at {
		t.Fatal("the watch's call for an event did not read the packet filter")
	}

	guardRestored := func(what string) {
		t.Helper()
		st := drv.Status()
		if st.Guard == nil || st.Guard.State != "restored" {
			t.Fatalf("%s: the guard reads %+v, want restored", what, st.Guard)
		}
		pf.mu.Lock()
		back := pf.guard != nil
		pf.mu.Unlock()
		if !back {
			t.Fatalf("%s: the guard is not loaded again", what)
		}
	}
	drop := func() {
		pf.mu.Lock()
		pf.guard = nil
		pf.mu.Unlock()
	}
	// The late read: the guard dropped, the stamp as it was (the generation had moved before the
	// last full read); the commit's event moves the mark and the timer's next call restores it.
	drop()
	drv.recheckNow(ctx, timer)
	if st := drv.Status(); st.Guard == nil || st.Guard.State != "loaded" {
		t.Fatalf("the guard reads %+v before any event, want loaded (the skip under test)", st.Guard)
	}
	pf.changes.Seen()
	drv.recheckNow(ctx, timer)
	guardRestored("after the commit's event")

	// The stamp moved (a lost event): the timer's call reads again.
	at = reads()
	drv.recheckNow(ctx, timer)
	if reads() != at {
		t.Fatal("at rest again, the timer's call read the packet filter")
	}
	drop()
	pf.mu.Lock()
	pf.stamp = "gen 2"
	pf.mu.Unlock()
	drv.recheckNow(ctx, timer)
	guardRestored("after the stamp moved")

	// No live monitor: every call reads (as does every call with no stamp, iptables-legacy).
	pf.changes.Subscribed(false)
	at = reads()
	drv.recheckNow(ctx, timer)
	hosttest.NoErrorsFatal(t, h.Reconcile(ctx, decl))
	if n := reads() - at; n < 2 {
		t.Fatalf("without a live monitor a timer call and a pass read %d times, want each to read", n)
	}
}

// On a converged server the derived filter is all that stands between the Raft port and anywhere:
// the mesh module's raft opening (from anywhere, admit: servers) is narrowed to the record's
// servers' underlay addresses, both families, as the guard narrows it on an adopted node.
func TestUnitFilterAdmitsOnlyServersToRaft(t *testing.T) {
	pf := newFakeFilter(netfilter.Found{Kind: netfilter.KindNone})
	h, _ := drivertest.Open(t, newDriver(Config{Logger: hosttest.Log()}, pf))
	raft := unitOpening("mesh", 7071, "tcp", "anywhere", true)
	raft.Opening.Admit = catalogue.AdmitServers
	d := unitOpeningDecl(fsm.Converged, raft, unitOpening("web", 8443, "tcp", "anywhere", false))
	d.Servers = []string{"192.0.2.1", "2001:db8::2", "not an address"}
	hosttest.NoErrorsFatal(t, h.Reconcile(hosttest.Ctx(t), d))
	if pf.filter == nil {
		t.Fatal("no derived filter loaded on a converged node")
	}
	got := fmt.Sprint(pf.filter.Admit)
	if want := "map[tcp/7071:[192.0.2.1 2001:db8::2]]"; got != want {
		t.Fatalf("the filter admits %s, want %s", got, want)
	}
	text, err := netfilter.FilterText(*pf.filter)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"ip saddr 192.0.2.1/32 tcp dport 7071 accept", "ip6 saddr 2001:db8::2/128 tcp dport 7071 accept", "tcp dport 8443 accept"} {
		if !strings.Contains(text, want) {
			t.Errorf("the derived filter lacks %q:\n%s", want, text)
		}
	}
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, "tcp dport 7071 accept") && !strings.Contains(l, "saddr") && !strings.Contains(l, "iifname") {
			t.Errorf("the derived filter opens the raft port from anywhere: %s", l)
		}
	}
	// No server in the declaration: nobody from off the machine but the private network.
	d.Servers = nil
	hosttest.NoErrorsFatal(t, h.Reconcile(hosttest.Ctx(t), d))
	if text, _ = netfilter.FilterText(*pf.filter); strings.Contains(text, "meshd:mesh:incoming:tcp/7071:anywhere") {
		t.Errorf("with no server the raft opening from anywhere is still in the filter:\n%s", text)
	}
}

// An event that changed the found firewall itself (ufw enabled or disabled by hand, a ruleset
// loaded) wakes a pass, so the report says so at once: the watch detects again after putting
// the openings back, when the stamp moved. An event that moved the stamp and left the found
// firewall as it was (meshd's own commit) wakes nothing, nor does the timer (the pass's stamp
// check covers it).
func TestUnitOpeningsEventRedetectsTheFoundFirewall(t *testing.T) {
	pf, drv, h, ctx, decl := liveUFWBed(t)
	hosttest.NoErrorsFatal(t, h.Reconcile(ctx, decl))
	woken := 0
	drv.mu.Lock()
	drv.watch.wake = func(...string) { woken++ }
	drv.mu.Unlock()
	timer, event := netfilter.Tick{Timer: true}, netfilter.Tick{}
	set := func(stamp string, active bool) {
		pf.mu.Lock()
		pf.stamp, pf.found.Active = stamp, active
		pf.mu.Unlock()
	}

	set("gen 2", true) // meshd's own commit: the stamp moves, the firewall reads the same
	drv.recheckNow(ctx, event)
	if woken != 0 {
		t.Fatalf("an event that left the found firewall as it was woke %d passes", woken)
	}
	set("gen 3", false) // ufw disabled by hand
	drv.recheckNow(ctx, timer)
	if woken != 0 {
		t.Fatal("the timer woke a pass (the pass's own stamp check is what notices there)")
	}
	drv.recheckNow(ctx, event)
	if woken != 1 {
		t.Fatalf("an event that changed the found firewall woke %d passes, want 1", woken)
	}
	if fw := detailOf(t, h.Reconcile(ctx, decl)).Firewall; !strings.Contains(fw.Description, "inactive") {
		t.Fatalf("the pass it woke reports the found firewall %q, want inactive", fw.Description)
	}
	drv.recheckNow(ctx, event) // nothing moved since
	if woken != 1 {
		t.Fatalf("an event with the stamp unmoved woke a pass (%d)", woken)
	}
}

// liveUFWBed is an adopted node whose found ufw is active, its packet filter stamped and its
// watch's monitor live, declaring one opening (webapp's 8080/tcp from anywhere, guarded).
func liveUFWBed(t *testing.T) (*fakeFilter, *Driver, *host.Host, context.Context, *fsm.Declaration) {
	t.Helper()
	pf := newFakeFilter(netfilter.Found{Kind: netfilter.KindUFW, Active: true})
	pf.stamp, pf.live = "gen 1", true
	drv := newDriver(Config{Logger: hosttest.Log()}, pf)
	h, _ := drivertest.Open(t, drv)
	return pf, drv, h, hosttest.Ctx(t), unitOpeningDecl(fsm.Adopted, unitOpening("webapp", 8080, "tcp", "anywhere", true))
}
