package fleetsim

import (
	"context"
	"testing"
	"time"

	"meshd/internal/labtest"
)

// bed raises the fleet's lab and servers for a test (agents with the extra flags), and the
// fleet's process on the simulator's machine, shaped like research 012's machine, its nodes'
// memberlist timers profile's.
func bed(t testing.TB, nodes int, profile string, extra []string, simExtra ...string) (*Bed, *Remote) {
	t.Helper()
	start := time.Now()
	meshd, meshsim := labtest.Meshd(t), labtest.Command(t, "meshsim")
	t.Logf("meshd and meshsim built in %s", time.Since(start).Round(time.Millisecond))
	l := labtest.Up(t, Scenario(nodes))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start = time.Now()
	b, err := Raise(ctx, l, meshd, meshsim, extra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("three servers up in %s", time.Since(start).Round(time.Millisecond))
	if err := b.AddHosts(ctx, nodes); err != nil {
		t.Fatal(err)
	}
	fleet, err := b.Clients(context.Background(), "measured", profile, simExtra...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := fleet.Close(); err != nil {
			t.Logf("the fleet's process: %v", err)
		}
		if t.Failed() {
			t.Logf("the fleet's log (tail):\n%s", b.FleetLog(4000))
			for _, s := range Servers {
				t.Logf("%s's agent log (tail):\n%s", s, l.Machine(s).UnitLog("meshd", 3000))
			}
		}
	})
	return b, fleet
}

// Issue 37's done-criterion on a fleet of 50 simulated nodes against three real servers: every
// node's report reaches every server, by gossip; a module assigned to every node is in force in
// each one's report on the leader's board; and no client held, sent or received another
// client's report, its push-pull state its own report's version (a few dozen bytes) however many
// members there are.
func TestFleetSmoke(t *testing.T) {
	const n = 50
	b, fleet := bed(t, n, "lan", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var er EnrolResult
	if err := fleet.Call(Request{Op: "enrol", N: n}, &er); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d nodes enrolled in %s (%.1f joins/s), up after %s more", n, er.Enrol.Round(time.Millisecond), er.JoinsPerSecond, er.Up.Round(time.Millisecond))
	start := time.Now()
	var tries int
	if err := b.poll(ctx, 30*time.Second, "every node's report on every server", func() error {
		tries++
		err := fleet.Call(Request{Op: "reached"}, nil)
		if err != nil && tries%10 == 1 {
			t.Logf("not yet: %v", err)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("every node's report on every server after %s", time.Since(start).Round(time.Millisecond))
	if err := fleet.Call(Request{Op: "module", Module: "fleet-a"}, nil); err != nil {
		t.Fatal(err)
	}
	var ar AssignResult
	if err := fleet.Call(Request{Op: "assign", Module: "fleet-a", Window: time.Minute}, &ar); err != nil {
		t.Fatal(err)
	}
	t.Logf("fleet-a assigned to %d nodes in %s, in force on each after %s", ar.Nodes, ar.Assigned.Round(time.Millisecond), ar.InForce.Round(time.Millisecond))
	var st Stats
	if err := fleet.Call(Request{Op: "stats"}, &st); err != nil {
		t.Fatal(err)
	}
	t.Logf("stats: %+v", st)
	if st.Nodes != n || st.ReportsSent == 0 {
		t.Fatalf("%d nodes sent %d reports, want %d nodes sending theirs", st.Nodes, st.ReportsSent, n)
	}
	if st.MaxReceivedOthers != 0 || st.MaxHeldOthers != 0 || st.MaxRelayed != 0 {
		t.Errorf("a client received %d, held %d and sent %d reports of other nodes, want none",
			st.MaxReceivedOthers, st.MaxHeldOthers, st.MaxRelayed)
	}
	// A version is {"node":"sim0049","seq":N} behind a byte: bounded by a name and a number.
	if st.MaxStateOut == 0 || st.MaxStateOut > 64 || st.MaxStateIn > 64 {
		t.Errorf("push-pull state: %d bytes out, %d in at most, want a member's version (at most 64 bytes)", st.MaxStateOut, st.MaxStateIn)
	}
}
