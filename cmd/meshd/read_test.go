package main

import (
	"bytes"
	"strings"
	"testing"

	"meshd/api"
	"meshd/fsm"
	"meshd/report"
)

// node show on a machine without a firewall says so, rather than "found firewall none" and
// "meshd's rule in none".
func TestOpeningsWithoutAFirewall(t *testing.T) {
	var b bytes.Buffer
	printOpenings(&b, report.OpeningDetail{Firewall: report.FirewallView{Kind: "none", Description: "none"},
		Openings: []report.OpeningView{{Opening: "8080/tcp/forwarded/anywhere", Module: "webapp", Through: "found none", State: report.OpeningInForce}}})
	out := b.String()
	for _, bad := range []string{"in none", "firewall\tnone (its counts"} {
		if strings.Contains(out, bad) {
			t.Errorf("node show says %q:\n%s", bad, out)
		}
	}
	if !strings.Contains(out, "no firewall on this machine") || !strings.Contains(out, "no firewall (nothing filters it)") {
		t.Errorf("node show does not say the machine has no firewall:\n%s", out)
	}
	b.Reset()
	printOpenings(&b, report.OpeningDetail{Firewall: report.FirewallView{Kind: "ufw", Description: "ufw, active"},
		Openings: []report.OpeningView{{Opening: "8080/tcp/forwarded/anywhere", Module: "webapp", Through: "found ufw", State: report.OpeningInForce}}})
	if !strings.Contains(b.String(), "meshd's rule in ufw") {
		t.Errorf("an opening through ufw lost its wording:\n%s", b.String())
	}
}

// node show on a converged node names the found firewall retired, by the kind it was found as,
// not what a detection reads there now (what a disabled ufw leaves reads as iptables); enabled
// again by hand, the detection is said to be in force again, not what it left behind.
func TestOpeningsFoundFirewallRetired(t *testing.T) {
	for _, c := range []struct {
		name      string
		fw        report.FirewallView
		want, not []string
	}{
		{"retired", report.FirewallView{Kind: "ufw", Description: "ufw, retired (disabled, its files on disk)", Retired: true,
			Detected: "iptables over iptables-nft, active, 6 incoming and 8 forwarded rules"},
			[]string{"found firewall\tufw, retired (disabled, its files on disk)\n", "read on the machine now\tiptables over iptables-nft, active"},
			[]string{"its counts"}},
		{"active again", report.FirewallView{Kind: "ufw", Retired: true, ActiveAgain: true,
			Description: "ufw, retired (disabled, its files on disk); ACTIVE AGAIN: enabled by something else",
			Detected:    "ufw over iptables-nft, active, 3 incoming and 0 forwarded rules"},
			[]string{"; ACTIVE AGAIN: enabled by something else\n",
				"read on the machine now\tufw over iptables-nft, active, 3 incoming and 0 forwarded rules (the retired firewall in force again, beside meshd's filter)"},
			[]string{"what the retired firewall left"}},
	} {
		var b bytes.Buffer
		printOpenings(&b, report.OpeningDetail{Firewall: c.fw})
		out := b.String()
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: node show does not say %q:\n%s", c.name, w, out)
			}
		}
		for _, w := range c.not {
			if strings.Contains(out, w) {
				t.Errorf("%s: node show says %q:\n%s", c.name, w, out)
			}
		}
	}
}

// meshd's running containers read as meshd's own, never Docker's "created" (not started).
func TestContainerStateWords(t *testing.T) {
	var b bytes.Buffer
	printContainers(&b, report.ContainerReport{Engine: "unix:///run/docker.sock", Reachable: true, Containers: []report.ContainerView{
		{Name: "store", Module: "store", State: report.ContainerCreated, Running: true, ID: "1"},
		{Name: "webapp", Module: "webapp", State: report.ContainerHeld, Running: true, ID: "2"},
	}})
	out := b.String()
	if !strings.Contains(out, "store\tstore\tmeshd's own (created by meshd)") || !strings.Contains(out, "webapp\twebapp\theld") {
		t.Errorf("container states:\n%s", out)
	}
}

func TestPlural(t *testing.T) {
	if got := plural(1, "file") + ", " + plural(0, "container") + ", " + plural(2, "file"); got != "1 file, 0 containers, 2 files" {
		t.Errorf("plural: %q", got)
	}
}

// status names what needs the operator under the nodes: a converged node whose retired found
// firewall reads active again.
func TestStatusNamesFirewallActiveAgain(t *testing.T) {
	var b bytes.Buffer
	writeStatus(&b, api.StatusView{Leader: api.LeaderView{Node: "hub"}, Nodes: []api.NodeSummary{
		{Name: "hub", Mode: fsm.Converged, FirewallActiveAgain: "ufw"}, {Name: "web", Mode: fsm.Converged}}})
	out := b.String()
	if !strings.Contains(out, "node hub: FOUND FIREWALL ACTIVE AGAIN: ufw, retired at the flip, was enabled again by something else") ||
		strings.Contains(out, "node web: FOUND FIREWALL") {
		t.Errorf("status:\n%s", out)
	}
}
