package agent

// Unit tests of what the leader reads from a report for the history (hostConditions): a held
// file changed by something else, a found firewall enabled again, the tunnel's state and a take
// stepped back are conditions with keys that stay the same while they stand.

import (
	"testing"

	"meshd/fsm"
	"meshd/report"
)

func TestUnitHostConditions(t *testing.T) {
	rep := &report.Report{Node: "web1",
		Held: []report.HeldFile{{Path: "/etc/web.conf", Module: "webapp", Changed: true, Reason: report.ChangedBySomethingElse},
			{Path: "/etc/other.conf", Module: "webapp"}},
		Errors: []report.ResourceError{{Resource: "file:/etc/web.conf", Module: "webapp", Reason: "write: read-only; the take of module webapp was stepped back, what was found put back"}},
		Kinds: map[string]any{fsm.KindOpening: report.OpeningDetail{Firewall: report.FirewallView{Kind: "ufw", ActiveAgain: true}},
			fsm.KindTunnel: report.TunnelDetail{State: report.TunnelMeshUp}}}
	got := map[string]string{}
	for _, c := range hostConditions(rep) {
		got[c.Key] = c.Says
	}
	want := map[string]string{
		"held-changed:file:/etc/web.conf": "held file /etc/web.conf changed by something else",
		"firewall-active-again:ufw":       "the found firewall ufw, retired at the flip, enabled again by something else",
		"tunnel:mesh-up":                  "tunnel mesh-up",
		"stepped-back:webapp":             "take of webapp stepped back: write: read-only; the take of module webapp was stepped back, what was found put back",
	}
	if len(got) != len(want) {
		t.Fatalf("conditions: %v", got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
	if !fsm.SameConditions(hostConditions(rep), hostConditions(rep)) {
		t.Fatal("the same report's conditions differ")
	}
	if len(hostConditions(&report.Report{Node: "web1"})) != 0 {
		t.Fatal("a quiet report has conditions")
	}
}
