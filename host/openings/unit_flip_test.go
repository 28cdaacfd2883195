package openings

// Unit tests of the flip on the machine (flip.go), on the in-memory packet filter: the flip loads
// the derived filter before it retires the found firewall, the return restores the found firewall
// before it loads the guard and unloads the filter, each reported done only once the machine is
// there; and a pass cut short at each named crash point is finished by a new host on the same
// records.

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"meshd/fsm"
	"meshd/host"
	"meshd/host/hosttest"
	"meshd/host/hosttest/drivertest"
	"meshd/netfilter"
	"meshd/report"
)

var flipAt = time.Date(2026, 12, 1, 5, 0, 0, 0, time.UTC)

func flipDecl(mode fsm.Mode, flip bool) *fsm.Declaration {
	d := unitOpeningDecl(mode, unitOpening("webapp", 8080, "tcp", "anywhere", false), unitOpening("store", 7001, "tcp", "private", true))
	if flip {
		d.Flip = &fsm.FlipIntent{To: mode, Since: flipAt}
	}
	return d
}

func TestUnitFlipConvergeAndReturn(t *testing.T) {
	pf := newFakeFilter(netfilter.Found{Kind: netfilter.KindUFW, Active: true})
	h, _ := drivertest.Open(t, newDriver(Config{Logger: hosttest.Log()}, pf))
	ctx := hosttest.Ctx(t)
	rep := h.Reconcile(ctx, flipDecl(fsm.Adopted, false))
	hosttest.NoErrorsFatal(t, rep)
	marked := pf.markedSorted()
	if od := detailOf(t, rep); od.Flip != nil || od.Retired != nil || len(marked) != 2 {
		t.Fatalf("adopted: flip %+v, retired %+v, marked %v", od.Flip, od.Retired, marked)
	}

	pf.ops = nil
	rep = h.Reconcile(ctx, flipDecl(fsm.Converged, true))
	hosttest.NoErrorsFatal(t, rep)
	od := detailOf(t, rep)
	if !slices.Equal(pf.ops, []string{"load filter", "remove guard", "retire ufw"}) {
		t.Fatalf("the flip did %q, want the filter loaded before the found firewall is retired", pf.ops)
	}
	if od.Flip == nil || !od.Flip.Done || od.Retired == nil || od.Retired.Kind != "ufw" || pf.found.Active {
		t.Fatalf("after the flip: flip %+v, retired %+v, found %+v", od.Flip, od.Retired, pf.found)
	}
	// The retired firewall keeps its rules (ufw keeps its files): nothing of it was flushed.
	if got := pf.markedSorted(); !slices.Equal(got, marked) {
		t.Fatalf("the retired firewall's rules changed: %q, was %q", got, marked)
	}
	pf.ops = nil
	rep = h.Reconcile(ctx, flipDecl(fsm.Converged, true))
	if rep.Changes != 0 || len(pf.ops) != 0 || pf.retires != 1 {
		t.Fatalf("a second pass of the flip changed %d (%q), retires %d", rep.Changes, pf.ops, pf.retires)
	}
	// Recorded converged: no flip pending, the found firewall stays retired.
	rep = h.Reconcile(ctx, flipDecl(fsm.Converged, false))
	if od := detailOf(t, rep); od.Flip != nil || od.Retired == nil || rep.Changes != 0 {
		t.Fatalf("converged: flip %+v, retired %+v, changes %d", od.Flip, od.Retired, rep.Changes)
	}

	// The return.
	pf.ops = nil
	rep = h.Reconcile(ctx, flipDecl(fsm.Adopted, true))
	hosttest.NoErrorsFatal(t, rep)
	od = detailOf(t, rep)
	if !slices.Equal(pf.ops, []string{"restore ufw", "load guard", "remove filter"}) {
		t.Fatalf("the return did %q, want the found firewall restored before the guard and the filter change", pf.ops)
	}
	if od.Flip == nil || !od.Flip.Done || od.Retired != nil || !pf.found.Active || pf.filter != nil || pf.guard == nil {
		t.Fatalf("after the return: flip %+v, retired %+v, found %+v, filter %v", od.Flip, od.Retired, pf.found, pf.filter)
	}
	if got := pf.markedSorted(); !slices.Equal(got, marked) {
		t.Fatalf("after the return the found firewall carries %q, was %q", got, marked)
	}
	if rep := h.Reconcile(ctx, flipDecl(fsm.Adopted, true)); rep.Changes != 0 || pf.restores != 1 {
		t.Fatalf("a second pass of the return changed %d, restores %d", rep.Changes, pf.restores)
	}
}

// A flip whose found firewall cannot be retired is not done: the report names why, the filter
// stays loaded, and the next pass tries again.
func TestUnitFlipRetireFails(t *testing.T) {
	pf := newFakeFilter(netfilter.Found{Kind: netfilter.KindNftables, Active: true})
	pf.retireErr = errFake("nft: permission denied")
	h, _ := drivertest.Open(t, newDriver(Config{Logger: hosttest.Log()}, pf))
	rep := h.Reconcile(hosttest.Ctx(t), flipDecl(fsm.Converged, true))
	od := detailOf(t, rep)
	if od.Flip == nil || od.Flip.Done || !hosttest.ReasonNames(rep, "firewall:found", "permission denied") || pf.filter == nil {
		t.Fatalf("flip %+v, errors %+v", od.Flip, rep.Errors)
	}
	pf.retireErr = nil
	rep = h.Reconcile(hosttest.Ctx(t), flipDecl(fsm.Converged, true))
	if od := detailOf(t, rep); !od.Flip.Done || pf.found.Active {
		t.Fatalf("after the retry: flip %+v, found %+v", od.Flip, pf.found)
	}
}

type errFake string

func (e errFake) Error() string { return string(e) }

// The pass is cut short at each named crash point of the flip and of the return (the record
// store and the packet filter keep what was done, as a SIGKILL leaves them); a new host on the
// same records finishes the act: the machine is in the declared mode's state and reports the
// flip done, and the pass after that changes nothing.
func TestUnitFlipCrashSafety(t *testing.T) {
	for _, c := range []struct {
		point string
		to    fsm.Mode
	}{
		{"flip.after-filter", fsm.Converged}, {"flip.before-retire", fsm.Converged}, {"flip.after-retire", fsm.Converged},
		{"return.after-restore", fsm.Adopted}, {"return.after-guard", fsm.Adopted},
	} {
		t.Run(c.point, func(t *testing.T) {
			pf := newFakeFilter(netfilter.Found{Kind: netfilter.KindUFW, Active: true})
			h, root := drivertest.Open(t, newDriver(Config{Logger: hosttest.Log()}, pf))
			data := filepath.Join(filepath.Dir(root), "data")
			hosttest.NoErrorsFatal(t, h.Reconcile(hosttest.Ctx(t), flipDecl(fsm.Adopted, false)))
			if c.to == fsm.Adopted {
				hosttest.NoErrorsFatal(t, h.Reconcile(hosttest.Ctx(t), flipDecl(fsm.Converged, true)))
			}
			h.Close()

			d := newDriver(Config{Logger: hosttest.Log()}, pf)
			d.crasher = hosttest.Armed(c.point)
			h, err := host.Open(host.Config{DataDir: data, Seal: hosttest.Seal, Root: root, Logger: hosttest.Log(), Drivers: []host.Driver{d}})
			if err != nil {
				t.Fatal(err)
			}
			func() {
				defer func() {
					if r := recover(); r != (hosttest.Crashed{Point: c.point}) {
						t.Fatalf("crash point %s not reached (%v)", c.point, r)
					}
				}()
				h.Reconcile(hosttest.Ctx(t), flipDecl(c.to, true))
			}()
			h.Close()

			h, err = host.Open(host.Config{DataDir: data, Seal: hosttest.Seal, Root: root, Logger: hosttest.Log(), Drivers: []host.Driver{newDriver(Config{Logger: hosttest.Log()}, pf)}})
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			rep := h.Reconcile(hosttest.Ctx(t), flipDecl(c.to, true))
			hosttest.NoErrorsFatal(t, rep)
			od := detailOf(t, rep)
			if od.Flip == nil || !od.Flip.Done {
				t.Fatalf("after restart the flip is not done: %+v", od.Flip)
			}
			switch c.to {
			case fsm.Converged:
				if pf.filter == nil || pf.guard != nil || pf.found.Active || od.Retired == nil {
					t.Fatalf("converged after restart: filter %v guard %v found %+v retired %+v", pf.filter, pf.guard, pf.found, od.Retired)
				}
			case fsm.Adopted:
				if pf.filter != nil || pf.guard == nil || !pf.found.Active || od.Retired != nil {
					t.Fatalf("adopted after restart: filter %v guard %v found %+v retired %+v", pf.filter, pf.guard, pf.found, od.Retired)
				}
			}
			if rep := h.Reconcile(hosttest.Ctx(t), flipDecl(c.to, true)); rep.Changes != 0 {
				t.Fatalf("the pass after the finished flip changed %d", rep.Changes)
			}
		})
	}
}

// What a retired ufw leaves in iptables (its jumps, Docker's hooks into its chains) reads as an
// iptables firewall: meshd neither retires that again nor opens ports in it; the flip is done,
// and the return restores ufw.
func TestUnitFlipLeftoverIsNotRetiredAgain(t *testing.T) {
	pf := newFakeFilter(netfilter.Found{Kind: netfilter.KindUFW, Active: true})
	pf.leftover = &netfilter.Found{Kind: netfilter.KindIptables, Active: true, Incoming: 6, Forwarded: 8}
	h, _ := drivertest.Open(t, newDriver(Config{Logger: hosttest.Log()}, pf))
	ctx := hosttest.Ctx(t)
	hosttest.NoErrorsFatal(t, h.Reconcile(ctx, flipDecl(fsm.Adopted, false)))
	for i := 0; i < 2; i++ {
		rep := h.Reconcile(ctx, flipDecl(fsm.Converged, true))
		hosttest.NoErrorsFatal(t, rep)
		if od := detailOf(t, rep); od.Flip == nil || !od.Flip.Done || od.Retired == nil || od.Retired.Kind != "ufw" {
			t.Fatalf("pass %d: flip %+v, retired %+v", i, od.Flip, od.Retired)
		}
	}
	if pf.retires != 1 {
		t.Fatalf("retired %d times", pf.retires)
	}
	pf.marked = map[string]netfilter.Opening{}
	h.Reconcile(ctx, flipDecl(fsm.Converged, false))
	if len(pf.marked) != 0 {
		t.Fatalf("openings written into what the retired firewall left: %v", pf.markedSorted())
	}
	rep := h.Reconcile(ctx, flipDecl(fsm.Adopted, true))
	hosttest.NoErrorsFatal(t, rep)
	if pf.found.Kind != netfilter.KindUFW || !pf.found.Active || !detailOf(t, rep).Flip.Done {
		t.Fatalf("after the return: found %+v", pf.found)
	}
}

// The table meshd loads is kept for the next boot (`meshd boot` loads it before the container
// engine starts): the guard while adopted, the filter once converged, the guard again after the
// return; a pass with nothing to do does not even ask.
func TestUnitTableKeptForBoot(t *testing.T) {
	pf := newFakeFilter(netfilter.Found{Kind: netfilter.KindUFW, Active: true})
	h, _ := drivertest.Open(t, newDriver(Config{Logger: hosttest.Log()}, pf))
	ctx := hosttest.Ctx(t)
	hosttest.NoErrorsFatal(t, h.Reconcile(ctx, flipDecl(fsm.Adopted, false)))
	if pf.kept == nil || pf.kept.Guard == nil || pf.kept.Filter != nil || fmt.Sprint(*pf.kept.Guard) != fmt.Sprint(*pf.guard) {
		t.Fatalf("adopted: kept %+v, want the guard as loaded (%+v)", pf.kept, pf.guard)
	}
	keeps := pf.keeps
	hosttest.NoErrorsFatal(t, h.Reconcile(ctx, flipDecl(fsm.Adopted, false)))
	if pf.keeps != keeps {
		t.Fatalf("a pass with nothing to do asked to keep the table again (%d calls, was %d)", pf.keeps, keeps)
	}
	hosttest.NoErrorsFatal(t, h.Reconcile(ctx, flipDecl(fsm.Converged, true)))
	if pf.kept.Filter == nil || pf.kept.Guard != nil || fmt.Sprint(*pf.kept.Filter) != fmt.Sprint(*pf.filter) {
		t.Fatalf("converged: kept %+v, want the filter as loaded", pf.kept)
	}
	hosttest.NoErrorsFatal(t, h.Reconcile(ctx, flipDecl(fsm.Adopted, true)))
	if pf.kept.Guard == nil || pf.kept.Filter != nil {
		t.Fatalf("returned: kept %+v, want the guard", pf.kept)
	}
}

// On a converged node the report names the found firewall by the kind it was found as, retired,
// from the host's record of the retirement, whatever a detection reads there now (what a disabled
// ufw leaves reads as iptables; a retired nftables ruleset reads as none); what it reads stays
// beside it. After the return the found firewall is reported active again, as detected.
func TestUnitFlipReportsFoundFirewallRetired(t *testing.T) {
	for _, c := range []struct {
		name      string
		found     netfilter.Found
		leftover  *netfilter.Found
		desc, now string
	}{
		{"ufw", netfilter.Found{Kind: netfilter.KindUFW, Backend: "nft", Active: true, Incoming: 3, Config: "/etc/ufw"},
			&netfilter.Found{Kind: netfilter.KindIptables, Backend: "nft", Active: true, Incoming: 6, Forwarded: 8},
			"ufw, retired (disabled, its files on disk)", "iptables over iptables-nft, active, 6 incoming and 8 forwarded rules"},
		{"nftables", netfilter.Found{Kind: netfilter.KindNftables, Active: true, Incoming: 2, Config: "/etc/nftables.conf", Tables: []string{"inet filter"}},
			&netfilter.Found{Kind: netfilter.KindNone},
			"nftables, retired (its tables saved and moved aside, its files on disk)", "none"},
		{"iptables", netfilter.Found{Kind: netfilter.KindIptables, Backend: "legacy", Active: true, Incoming: 4, Config: "/etc/iptables/rules.v4"},
			nil,
			"iptables over iptables-legacy, retired (its rules saved and removed, its files on disk)", "iptables over iptables-legacy, inactive"},
	} {
		t.Run(c.name, func(t *testing.T) {
			pf := newFakeFilter(c.found)
			pf.leftover = c.leftover
			h, _ := drivertest.Open(t, newDriver(Config{Logger: hosttest.Log()}, pf))
			ctx := hosttest.Ctx(t)
			rep := h.Reconcile(ctx, flipDecl(fsm.Adopted, false))
			hosttest.NoErrorsFatal(t, rep)
			if fw := detailOf(t, rep).Firewall; fw.Kind != c.name || fw.Retired || fw.Description != c.found.String() || fw.Detected != "" {
				t.Fatalf("adopted: firewall %+v", fw)
			}
			wantRetired := func(stage string, rep report.Report) {
				t.Helper()
				fw := detailOf(t, rep).Firewall
				if fw.Kind != c.name || !fw.Retired || fw.Description != c.desc || !strings.HasPrefix(fw.Detected, c.now) ||
					fw.Config != c.found.Config || !slices.Equal(fw.Tables, c.found.Tables) {
					t.Fatalf("%s: firewall %+v, want kind %s retired %q, detected %q", stage, fw, c.name, c.desc, c.now)
				}
			}
			rep = h.Reconcile(ctx, flipDecl(fsm.Converged, true))
			hosttest.NoErrorsFatal(t, rep)
			wantRetired("after the flip", rep)
			// Recorded converged, no flip pending.
			rep = h.Reconcile(ctx, flipDecl(fsm.Converged, false))
			wantRetired("converged", rep)
			// The reconciler still works from the detection: meshd's filter carries the openings.
			for _, o := range detailOf(t, rep).Openings {
				if o.State != report.OpeningInForce || o.Through != "meshd filter" {
					t.Fatalf("converged: opening %+v, want in force through meshd filter", o)
				}
			}
			b, err := json.Marshal(detailOf(t, rep).Firewall)
			if err != nil || !strings.Contains(string(b), `"kind":"`+c.name+`"`) || !strings.Contains(string(b), `"retired":true`) ||
				strings.Contains(string(b), "active_again") {
				t.Fatalf("the firewall in JSON: %s (%v)", b, err)
			}
			// Enabled again by hand (ufw enable, its rules loaded again): still retired by the
			// record, and said to be active again, loudly, as the kind it was found as.
			pf.mu.Lock()
			retired := pf.found
			pf.found = c.found
			pf.mu.Unlock()
			rep = h.Reconcile(ctx, flipDecl(fsm.Converged, false))
			if fw := detailOf(t, rep).Firewall; !fw.Retired || !fw.ActiveAgain || !strings.HasPrefix(fw.Description, c.desc+"; ACTIVE AGAIN: enabled by something else") ||
				fw.Detected != c.found.String() {
				t.Fatalf("enabled again by hand: firewall %+v", fw)
			}
			pf.mu.Lock()
			pf.found = retired
			pf.mu.Unlock()
			rep = h.Reconcile(ctx, flipDecl(fsm.Converged, false))
			if fw := detailOf(t, rep).Firewall; !fw.Retired || fw.ActiveAgain || fw.Description != c.desc {
				t.Fatalf("retired again by hand: firewall %+v", fw)
			}

			rep = h.Reconcile(ctx, flipDecl(fsm.Adopted, true))
			hosttest.NoErrorsFatal(t, rep)
			if fw := detailOf(t, rep).Firewall; fw.Kind != c.name || fw.Retired || fw.Detected != "" || !strings.Contains(fw.Description, ", active") {
				t.Fatalf("after the return: firewall %+v, want %s active", fw, c.name)
			}
		})
	}
}
