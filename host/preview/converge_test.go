package preview

// Unit tests of the converge preview's decision (no root): each socket and published port
// marked declared by its module or closing, the mesh's own ports declared by the mesh, IPv6
// sockets marked like IPv4 ones, loopback ignored, the modules to take, the found firewall's
// retirement, and the plan token changing when anything seen changes and only then.

import (
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"meshd/catalogue"
	"meshd/fsm"
	"meshd/report"
)

func previewDecl() *fsm.Declaration {
	return &fsm.Declaration{
		Node: "hub", Mode: fsm.Adopted,
		Assigned: []string{"mesh", "notes", "web"}, Taken: []string{"mesh", "notes"},
		Mesh: fsm.MeshPorts{Bus: 7400, Raft: 7401, Gossip: 7402, Tunnel: 51820},
		Resources: []fsm.Resource{
			{Module: "web", Kind: fsm.KindOpening, Opening: &catalogue.PortOpening{Port: 443, Proto: "tcp", Path: "incoming", From: "anywhere"}},
			{Module: "notes", Kind: fsm.KindOpening, Taken: true, Opening: &catalogue.PortOpening{Port: 8080, Proto: "tcp", Path: "forwarded", From: "anywhere"}},
			{Module: "notes", Kind: fsm.KindFile, Taken: true, File: &catalogue.File{Path: "/etc/notes.conf"}},
		},
	}
}

func lst(proto, addr string, port uint16, proc string, pid int) report.Listener {
	return report.Listener{Proto: proto, Addr: netip.MustParseAddr(addr), Port: port, Process: proc, PID: pid}
}

func previewSeen() ([]report.Listener, *report.ContainerReport, *report.OpeningDetail) {
	ls := []report.Listener{
		lst("tcp", "0.0.0.0", 443, "nginx", 100),
		lst("tcp", "::", 443, "nginx", 100),
		lst("tcp", "0.0.0.0", 5432, "postgres", 200),
		lst("tcp", "::", 9000, "minio", 300),
		lst("tcp", "127.0.0.1", 6379, "redis", 400),
		lst("tcp", "::1", 6379, "redis", 400),
		lst("tcp", "10.0.0.1", 7400, "meshd", 500),
		lst("udp", "0.0.0.0", 7402, "meshd", 500),
		lst("udp", "0.0.0.0", 51820, "", 0),
	}
	cr := &report.ContainerReport{Published: []report.PublishedPort{
		{Container: "notes", HostIP: "0.0.0.0", HostPort: 8080, ContainerPort: 80, Proto: "tcp"},
		{Container: "metrics", HostIP: "0.0.0.0", HostPort: 9100, ContainerPort: 9100, Proto: "tcp"},
		{Container: "admin", HostIP: "127.0.0.1", HostPort: 8081, ContainerPort: 80, Proto: "tcp"},
	}}
	od := &report.OpeningDetail{Firewall: report.FirewallView{Kind: "ufw", Description: "ufw over iptables-nft, active, 3 incoming and 1 forwarded rules, config /etc/ufw", Config: "/etc/ufw"}}
	return ls, cr, od
}

func mark(d *fsm.Declaration, ls []report.Listener, cr *report.ContainerReport, od *report.OpeningDetail) report.ConvergePreview {
	return Mark(report.ConvergePreview{Node: d.Node, Mode: d.Mode, Listeners: []report.PreviewListener{}, Published: []report.PreviewPublished{}, Take: []string{}}, d, ls, cr, od)
}

func TestUnitConvergePreviewMarks(t *testing.T) {
	ls, cr, od := previewSeen()
	pv := mark(previewDecl(), ls, cr, od)
	got := map[string]string{}
	for _, l := range pv.Listeners {
		got[l.Listener.String()] = l.Verdict.String()
	}
	for _, p := range pv.Published {
		got["published "+p.Container+" "+p.HostIP+":"+itoa(p.HostPort)] = p.Verdict.String()
	}
	want := map[string]string{
		"tcp 0.0.0.0:443 (nginx, pid 100)":     "declared by web (443/tcp incoming from anywhere)",
		"tcp [::]:443 (nginx, pid 100)":        "declared by web (443/tcp incoming from anywhere)",
		"tcp 0.0.0.0:5432 (postgres, pid 200)": "will close",
		"tcp [::]:9000 (minio, pid 300)":       "will close",
		"tcp 10.0.0.1:7400 (meshd, pid 500)":   "declared by mesh (7400/tcp the mesh's bus port)",
		"udp 0.0.0.0:7402 (meshd, pid 500)":    "declared by mesh (7402/udp the mesh's gossip port)",
		"udp 0.0.0.0:51820":                    "declared by mesh (51820/udp the mesh's tunnel port)",
		"published notes 0.0.0.0:8080":         "declared by notes (8080/tcp forwarded from anywhere)",
		"published metrics 0.0.0.0:9100":       "will close",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: marked %q, want %q", k, got[k], v)
		}
	}
	for k := range got {
		if strings.Contains(k, "6379") || strings.Contains(k, "8081") {
			t.Errorf("loopback %s listed; the flip cannot close what only the machine reaches", k)
		}
	}
	if len(got) != len(want) {
		t.Errorf("listed %d sockets and ports, want %d: %v", len(got), len(want), got)
	}
	if pv.WillClose != 3 {
		t.Errorf("will close %d, want 3 (postgres, minio, metrics)", pv.WillClose)
	}
	if !slices.Equal(pv.Take, []string{"web"}) {
		t.Errorf("take %v, want [web] (assigned, not taken)", pv.Take)
	}
	if !strings.HasPrefix(pv.Firewall.Retire, "`ufw disable`") || !strings.Contains(pv.Firewall.Retire, "/etc/ufw") {
		t.Errorf("ufw retired as %q, want `ufw disable` with its configuration kept", pv.Firewall.Retire)
	}
	if len(pv.Token) != 16 {
		t.Errorf("plan token %q, want 16 hex digits", pv.Token)
	}
}

func TestUnitConvergePreviewNothingCloses(t *testing.T) {
	d := previewDecl()
	pv := mark(d, []report.Listener{lst("tcp", "0.0.0.0", 443, "nginx", 1), lst("tcp", "127.0.0.1", 5432, "postgres", 2)}, nil,
		&report.OpeningDetail{Firewall: report.FirewallView{Kind: "nftables", Tables: []string{"inet filter"}}})
	if pv.WillClose != 0 {
		t.Errorf("will close %d, want 0: %+v", pv.WillClose, pv.Listeners)
	}
	if !strings.Contains(pv.Firewall.Retire, "inet filter") || !strings.Contains(pv.Firewall.Retire, "moved aside") {
		t.Errorf("nftables retired as %q, want its table inet filter moved aside", pv.Firewall.Retire)
	}
}

func TestUnitConvergePreviewFromReport(t *testing.T) {
	ls, cr, od := previewSeen()
	rep := &report.Report{Node: "hub", When: time.Now(), Listeners: ls, Kinds: map[string]any{fsm.KindContainer: *cr, fsm.KindOpening: *od}}
	// As a server gets it: through JSON.
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	var decoded report.Report
	if err := json.Unmarshal(b, &decoded); err != nil {
		t.Fatal(err)
	}
	local, err := Converge(rep, previewDecl())
	if err != nil {
		t.Fatal(err)
	}
	carried, err := Converge(&decoded, previewDecl())
	if err != nil {
		t.Fatal(err)
	}
	if local.Token != carried.Token || carried.WillClose != 3 {
		t.Errorf("a report carried as JSON previews differently: token %s vs %s, will close %d", local.Token, carried.Token, carried.WillClose)
	}
	if _, err := Converge(nil, previewDecl()); err == nil || !strings.Contains(err.Error(), "no host report") {
		t.Errorf("no report: %v, want an error saying so", err)
	}
	if _, err := Converge(&report.Report{Node: "hub", When: time.Now()}, previewDecl()); err == nil || !strings.Contains(err.Error(), "listening sockets") {
		t.Errorf("a report without listeners: %v, want an error naming the listening sockets", err)
	}
}

func TestUnitConvergePlanToken(t *testing.T) {
	base := func() (*fsm.Declaration, []report.Listener, *report.ContainerReport, *report.OpeningDetail) {
		ls, cr, od := previewSeen()
		return previewDecl(), ls, cr, od
	}
	d, ls, cr, od := base()
	token := mark(d, ls, cr, od).Token

	// Not changed by the order things were read in, the pids or when.
	d, ls, cr, od = base()
	slices.Reverse(ls)
	slices.Reverse(cr.Published)
	for i := range ls {
		ls[i].PID += 1000
	}
	if got := mark(d, ls, cr, od).Token; got != token {
		t.Errorf("token changed with the order and pids only: %s, was %s", got, token)
	}

	changes := map[string]func(d *fsm.Declaration, ls *[]report.Listener, cr *report.ContainerReport, od *report.OpeningDetail){
		"something new listening": func(_ *fsm.Declaration, ls *[]report.Listener, _ *report.ContainerReport, _ *report.OpeningDetail) {
			*ls = append(*ls, lst("tcp", "0.0.0.0", 2222, "sshd", 9))
		},
		"a new IPv6 socket": func(_ *fsm.Declaration, ls *[]report.Listener, _ *report.ContainerReport, _ *report.OpeningDetail) {
			*ls = append(*ls, lst("tcp", "::", 5432, "postgres", 200))
		},
		"a new published port": func(_ *fsm.Declaration, _ *[]report.Listener, cr *report.ContainerReport, _ *report.OpeningDetail) {
			cr.Published = append(cr.Published, report.PublishedPort{Container: "x", HostIP: "0.0.0.0", HostPort: 7000, Proto: "tcp"})
		},
		"a port declared since": func(d *fsm.Declaration, _ *[]report.Listener, _ *report.ContainerReport, _ *report.OpeningDetail) {
			d.Resources = append(d.Resources, fsm.Resource{Module: "web", Kind: fsm.KindOpening, Opening: &catalogue.PortOpening{Port: 5432, Proto: "tcp", Path: "incoming", From: "private"}})
		},
		"a module assigned since": func(d *fsm.Declaration, _ *[]report.Listener, _ *report.ContainerReport, _ *report.OpeningDetail) {
			d.Assigned = append(d.Assigned, "cache")
		},
		"a module taken since": func(d *fsm.Declaration, _ *[]report.Listener, _ *report.ContainerReport, _ *report.OpeningDetail) {
			d.Taken = append(d.Taken, "web")
		},
		"the found firewall changed": func(_ *fsm.Declaration, _ *[]report.Listener, _ *report.ContainerReport, od *report.OpeningDetail) {
			od.Firewall.Description = strings.Replace(od.Firewall.Description, "3 incoming", "4 incoming", 1)
		},
		"a process replaced": func(_ *fsm.Declaration, ls *[]report.Listener, _ *report.ContainerReport, _ *report.OpeningDetail) {
			(*ls)[2].Process = "nc"
		},
	}
	for name, change := range changes {
		d, ls, cr, od := base()
		change(d, &ls, cr, od)
		if got := mark(d, ls, cr, od).Token; got == token {
			t.Errorf("%s: plan token unchanged (%s)", name, got)
		}
	}
	// Loopback is not seen: a new loopback socket changes nothing.
	d, ls, cr, od = base()
	ls = append(ls, lst("tcp", "127.0.0.1", 9999, "debug", 7))
	if got := mark(d, ls, cr, od).Token; got != token {
		t.Errorf("a loopback socket changed the token")
	}
}

func itoa(p uint16) string {
	b, _ := json.Marshal(p)
	return string(b)
}

// The preview shows the derived filter as an operator reads it: drop by default on both chains,
// established and loopback first, the mesh's own ports from the private network only, every
// declared opening (incoming by port, forwarded by the port the client addressed), one table for
// IPv4 and IPv6; the token digests it, so a change of the filter changes the token.
func TestUnitConvergePreviewFilter(t *testing.T) {
	ls, cr, od := previewSeen()
	d := previewDecl()
	d.Tunnel = fsm.TunnelView{Interface: "wg0", Range: "10.44.0.0/24"}
	d.Resources = append(d.Resources, fsm.Resource{Module: "web", Kind: fsm.KindOpening,
		Opening: &catalogue.PortOpening{Port: 8443, Proto: "tcp", Path: "incoming", From: "2001:db8::/32"}})
	pv := mark(d, ls, cr, od)
	if pv.FilterError != "" {
		t.Fatalf("filter error: %s", pv.FilterError)
	}
	for _, want := range []string{
		"table inet meshd_filter {",
		"chain input {\n\t\ttype filter hook input priority 0; policy drop;",
		"chain forward {\n\t\ttype filter hook forward priority 0; policy drop;",
		"ct state established,related accept",
		`iifname "lo" accept`,
		"meta l4proto ipv6-icmp accept",
		`iifname "wg0" ip saddr 10.44.0.0/24 tcp dport 7400 accept comment "meshd:mesh:incoming:tcp/7400:private"`,
		`iifname "wg0" ip saddr 10.44.0.0/24 udp dport 7402 accept`,
		`tcp dport 443 accept comment "meshd:web:incoming:tcp/443:anywhere"`,
		`meta l4proto tcp ct original proto-dst 8080 accept comment "meshd:notes:forwarded:tcp/8080:anywhere"`,
		`ip6 saddr 2001:db8::/32 tcp dport 8443 accept`,
		// a published port the runtime's proxy serves (IPv6 to an IPv4-only bridge) comes in
		`tcp dport 8080 accept comment "meshd:notes:forwarded:tcp/8080:anywhere:proxy"`,
		`iifname "docker0" accept`,
	} {
		if !strings.Contains(pv.Filter, want) {
			t.Errorf("the derived filter lacks %q:\n%s", want, pv.Filter)
		}
	}
	// Nothing undeclared is let in: 5432 and 9000 listen, and no rule names them.
	for _, port := range []string{"5432", "9000", "9100"} {
		if strings.Contains(pv.Filter, " "+port+" ") {
			t.Errorf("the derived filter lets undeclared port %s in:\n%s", port, pv.Filter)
		}
	}
	token := pv.Token
	d.Resources = d.Resources[:len(d.Resources)-1]
	if got := mark(d, ls, cr, od); got.Token == token || strings.Contains(got.Filter, "8443") {
		t.Errorf("an opening gone did not change the filter and the token: %s", got.Token)
	}
}

// A stale plan token is refused naming what changed: report.PlanChanges between the preview the token
// was made from and the preview of now names a new listener, a module assigned since, the found
// firewall changed; and nothing when nothing changed.
func TestUnitConvergePlanChanges(t *testing.T) {
	ls, cr, od := previewSeen()
	was := mark(previewDecl(), ls, cr, od)
	if got := report.PlanChanges(was, mark(previewDecl(), ls, cr, od)); len(got) != 0 {
		t.Fatalf("nothing changed, yet: %q", got)
	}
	cases := []struct {
		name   string
		change func(d *fsm.Declaration, ls *[]report.Listener, od *report.OpeningDetail)
		want   []string
	}{
		{"new listener", func(_ *fsm.Declaration, ls *[]report.Listener, _ *report.OpeningDetail) {
			*ls = append(*ls, lst("tcp", "0.0.0.0", 2222, "sshd", 9))
		}, []string{"new: listening tcp 0.0.0.0:2222 (sshd): will close"}},
		{"module assigned since", func(d *fsm.Declaration, _ *[]report.Listener, _ *report.OpeningDetail) {
			d.Assigned = append(d.Assigned, "cache")
		}, []string{"new: take cache,web", "gone: take web"}},
		{"found firewall changed", func(_ *fsm.Declaration, _ *[]report.Listener, od *report.OpeningDetail) {
			od.Firewall.Description = strings.Replace(od.Firewall.Description, "3 incoming", "4 incoming", 1)
		}, []string{"new: found firewall ufw: ufw over iptables-nft, active, 4 incoming", "gone: found firewall ufw: ufw over iptables-nft, active, 3 incoming"}},
		{"port declared since", func(d *fsm.Declaration, _ *[]report.Listener, _ *report.OpeningDetail) {
			d.Resources = append(d.Resources, fsm.Resource{Module: "web", Kind: fsm.KindOpening, Opening: &catalogue.PortOpening{Port: 5432, Proto: "tcp", Path: "incoming", From: "anywhere"}})
		}, []string{"new: listening tcp 0.0.0.0:5432 (postgres): declared by web", "gone: listening tcp 0.0.0.0:5432 (postgres): will close",
			`new: filter rule tcp dport 5432 accept comment "meshd:web:incoming:tcp/5432:anywhere"`}},
	}
	for _, c := range cases {
		ls, cr, od := previewSeen()
		d := previewDecl()
		c.change(d, &ls, od)
		got := report.PlanChanges(was, mark(d, ls, cr, od))
		for _, w := range c.want {
			if !slices.ContainsFunc(got, func(g string) bool { return strings.HasPrefix(g, w) }) {
				t.Errorf("%s: changes %q do not name %q", c.name, got, w)
			}
		}
	}
}

// A spoke that still rides its found tunnel: the preview says the flip takes it over, and the
// plan token covers it (a take since the preview changes the plan).
func TestUnitConvergePreviewNamesTheFoundTunnelItTakes(t *testing.T) {
	d := previewDecl()
	ls, cr, od := previewSeen()
	taken := mark(d, ls, cr, od)
	if taken.Tunnel != "" {
		t.Fatalf("a node with no found tunnel: the preview says %q", taken.Tunnel)
	}
	d.Tunnel = fsm.TunnelView{Rides: "wg0", PublicKey: "k", Address: "10.44.0.2/24", ListenPort: 51820}
	pv := mark(d, ls, cr, od)
	if !strings.Contains(pv.Tunnel, "wg0 taken over by the mesh's interface of the same name") || !strings.Contains(pv.Tunnel, "10.44.0.2/24") || !strings.Contains(pv.Tunnel, "51820") {
		t.Errorf("the preview of a spoke on wg0 says %q", pv.Tunnel)
	}
	if pv.Token == taken.Token {
		t.Error("the plan token does not cover the found tunnel the flip takes over")
	}
	if ch := report.PlanChanges(taken, pv); !strings.Contains(strings.Join(ch, "\n"), "wg0") {
		t.Errorf("the plan's changes do not name the tunnel: %q", ch)
	}
}

// A converged node has nothing to flip: its preview says so and gives no plan token, which the
// flip would only refuse as already converged.
func TestUnitConvergePreviewOfAConvergedNode(t *testing.T) {
	d := previewDecl()
	ls, cr, od := previewSeen()
	if pv := mark(d, ls, cr, od); pv.Converged || pv.Token == "" {
		t.Fatalf("adopted: converged %v, token %q", pv.Converged, pv.Token)
	}
	d.Mode = fsm.Converged
	if pv := mark(d, ls, cr, od); !pv.Converged || pv.Token != "" {
		t.Fatalf("converged: converged %v, token %q", pv.Converged, pv.Token)
	}
}
