package agent

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"

	"meshd/api"
	"meshd/fsm"
	"meshd/report"
)

// The status page names a converged node's found firewall retired, by the kind it was found as,
// and says meshd's filter carries its openings; not what a detection reads there now.
func TestPageRetiredFirewall(t *testing.T) {
	n := PageNode{Name: "hub", Mode: fsm.Converged, Report: &report.Report{}, ReportFrom: "hub", Firewall: report.FirewallView{Kind: "ufw", Retired: true,
		Description: "ufw, retired (disabled, its files on disk)", Detected: "iptables over iptables-nft, active, 6 incoming and 8 forwarded rules"}}
	row, card := renderNode(t, n)
	if !strings.Contains(row, "<td>ufw, retired</td>") {
		t.Errorf("the node's row:\n%s", row)
	}
	c := card
	if !strings.Contains(c, "Openings through meshd's filter") || !strings.Contains(c, "found firewall ufw, retired (disabled, its files on disk); read on the machine now: iptables over") ||
		strings.Contains(c, "Openings through ufw") {
		t.Errorf("the node's card:\n%s", c)
	}
}

// A retired firewall enabled again by hand is flagged on the node's row and its card.
func TestPageRetiredFirewallActiveAgain(t *testing.T) {
	n := PageNode{Name: "hub", Mode: fsm.Converged, Report: &report.Report{}, ReportFrom: "hub", Firewall: report.FirewallView{Kind: "ufw", Retired: true, ActiveAgain: true,
		Description: "ufw, retired (disabled, its files on disk); ACTIVE AGAIN: enabled by something else", Detected: "ufw over iptables-nft, active, 3 incoming and 0 forwarded rules"}}
	row, card := renderNode(t, n)
	if !strings.Contains(row, `<td>ufw, retired <b class="warn">active again</b></td>`) {
		t.Errorf("the node's row:\n%s", row)
	}
	if !strings.Contains(card, `<p class="small warn">found firewall ufw, retired (disabled, its files on disk); ACTIVE AGAIN`) {
		t.Errorf("the node's card:\n%s", card)
	}
}

// On a converged node what a converge would close is closed already (meshd's filter admits it
// not): the page says so instead of warning of a close to come; an adopted node's still warns.
func TestPageConvergedNodeSaysNotAdmitted(t *testing.T) {
	listener := report.PreviewListener{Listener: report.Listener{Proto: "tcp", Addr: netip.MustParseAddr("0.0.0.0"), Port: 5000}, Verdict: report.Verdict{Mark: report.MarkWillClose}}
	n := PageNode{Name: "hub", Mode: fsm.Converged, Report: &report.Report{}, ReportFrom: "hub",
		Preview: &report.ConvergePreview{Listeners: []report.PreviewListener{listener}}}
	row, card := renderNode(t, n)
	if !strings.Contains(row, "1 not admitted") || strings.Contains(row, "close 1") {
		t.Errorf("a converged node's row:\n%s", row)
	}
	if !strings.Contains(card, "not admitted by meshd's filter") || strings.Contains(card, "would close:") {
		t.Errorf("a converged node's card:\n%s", card)
	}
	n.Mode = fsm.Adopted
	if row, card = renderNode(t, n); !strings.Contains(row, "close 1") || !strings.Contains(card, "would close:") {
		t.Errorf("an adopted node's row and card:\n%s\n%s", row, card)
	}
}

// renderNode is the node's row of the overview and its card, as the page renders them.
func renderNode(t *testing.T, n PageNode) (row, card string) {
	t.Helper()
	var r, c bytes.Buffer
	if err := pageTmpl.ExecuteTemplate(&r, "noderow", n); err != nil {
		t.Fatal(err)
	}
	if err := pageTmpl.ExecuteTemplate(&c, "nodecard", n); err != nil {
		t.Fatal(err)
	}
	return r.String(), c.String()
}

// Issue 34, finding 1: the page names each module that is root on a machine, each privileged path
// or mount with why, who said so, or that no one has yet and how to.
func TestPageNamesPrivilegedModules(t *testing.T) {
	v := PageOverview{Privileged: []api.ModulePrivilege{
		{Module: "web", Unconfirmed: true, Reaches: []string{"file /etc/nginx/nginx.conf (root writes it outside the module's own places)"}},
		{Module: "ops", By: "operator alice", Reaches: []string{"file /etc/sudoers.d/ops (sudo reads it)"}},
	}}
	var b bytes.Buffer
	if err := pageTmpl.ExecuteTemplate(&b, "overview", v); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, want := range []string{"meshd module confirm web", "/etc/nginx/nginx.conf", "said by operator alice", "file /etc/sudoers.d/ops (sudo reads it)"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page does not say %q", want)
		}
	}
}
