package main

import (
	"fmt"
	"io"
	"regexp"
	"strings"
	"testing"
	"time"

	"meshd/api"
	"meshd/fsm"
	"meshd/report"
)

// The tables the CLI prints most, as a new user sees them: tunnel show, status, node show.
func cliTables() map[string]func(io.Writer) {
	now := time.Now()
	var peers []api.TunnelPeer
	for i := range 3 {
		peers = append(peers, api.TunnelPeer{PublicKey: fmt.Sprintf("kX9w3Qm7Rt2LpB8vNc4ZsYe1UaHdGfJo6Ki5%dPqWxE=", i),
			Address: fmt.Sprintf("10.99.0.%d/32", 20+i), Enrolled: i > 0, Node: "web-frontend-0" + fmt.Sprint(i),
			Endpoint: fmt.Sprintf("10.0.0.%d:51820", 10+i), LastHeard: now.Add(-90 * time.Second),
			ReceiveBytes: 123456789, TransmitBytes: 987654})
	}
	tv := api.TunnelView{Range: "10.99.0.0/24", Hub: "hub", HubAddress: "10.99.0.1", Port: 51820, Taken: "wg0",
		State: report.TunnelMeshUp, Says: "the mesh's interface is up", ReportAt: now.Add(-4 * time.Second),
		ReportFrom: "local", Interface: "wg0", Peers: peers,
		Fields: []report.TunnelField{{Field: "listen port", Found: "51820", Mesh: "51820", Same: true},
			{Field: "address", Found: "10.99.0.1/24", Mesh: "10.99.0.1/24", Same: true}}}
	var nodes []api.NodeSummary
	for i, name := range []string{"hub", "registry-eu-west-1", "web1"} {
		nodes = append(nodes, api.NodeSummary{Name: name, Mode: fsm.Converged, Server: i < 2, Address: fmt.Sprintf("10.99.0.%d", 10+i),
			Liveness: "alive", ReportFrom: "gossip", HeldFiles: 2 * i, Assigned: 3, Taken: 3})
	}
	st := api.StatusView{Leader: api.LeaderView{Node: "hub", Address: "10.0.0.1:7946"}, Index: 1234,
		Voters: []string{"hub", "registry-eu-west-1"}, ServedBy: "hub", Nodes: nodes}
	rep := &report.Report{Node: "web1", When: now,
		Held:    []report.HeldFile{{Path: "/etc/nginx/sites-enabled/default", Module: "webapp", RecordedHash: "abcdef0123456789", CurrentHash: "abcdef0123456789"}},
		Written: []report.WrittenFile{{Path: "/etc/webapp/app.conf", Module: "webapp", Hash: "0123456789abcdef"}},
		Kinds: map[string]any{fsm.KindContainer: report.ContainerReport{Engine: "unix:///var/run/docker.sock", Reachable: true,
			Containers: []report.ContainerView{{Name: "webapp", Module: "webapp", State: "created", ID: "c0ffee", Image: "registry.local:5000/webapp:1.4.2",
				Running: true, Ports: []string{"10.0.0.1:8080->80/tcp", "10.0.0.1:8443->443/tcp"}}}}}}
	nv := api.NodeView{Node: &fsm.Node{Name: "web1", ID: "3f2a9c0d-1e4b-4c6d-9e8f-0a1b2c3d4e5f", Mode: fsm.Converged,
		Address: "10.99.0.12", Advertise: "10.0.0.1:51820", Assigned: []string{"mesh", "webapp", "node-exporter"}},
		Taken: []string{"mesh", "webapp", "node-exporter"}, Report: rep}
	return map[string]func(io.Writer){
		"tunnel show": func(w io.Writer) { printTunnelView(w, tv, now) },
		"status":      func(w io.Writer) { writeStatus(w, st) },
		"node show":   func(w io.Writer) { writeNodeView(w, nv) },
	}
}

// tokenRE matches what must never be broken across lines: an address with a port or a prefix,
// a WireGuard key, a hash.
var tokenRE = regexp.MustCompile(`[0-9a-fA-F:.\[\]]*[0-9]\.[0-9]+[:/][0-9]+|[A-Za-z0-9+/]{43}=|[0-9a-f]{12,}`)

// At every width from 40 to 200, no line of a CLI table is wider than the terminal, and no
// address, key or hash the table holds is split over two lines.
func TestTablesFitEveryWidth(t *testing.T) {
	for name, text := range cliTables() {
		var raw strings.Builder
		text(&raw)
		tokens := tokenRE.FindAllString(raw.String(), -1)
		for width := 40; width <= 200; width++ {
			out := rendered(t, width, text)
			for _, l := range strings.Split(out, "\n") {
				// Only a token wider than the terminal (a key at 40 columns) may overflow it.
				if runes(l) > width && (len(strings.Fields(l)) > 1 || longestToken(l) < width-2) {
					t.Errorf("%s at %d columns: a line of %d:\n%s", name, width, runes(l), out)
				}
			}
			for _, tok := range tokens {
				if !strings.Contains(out, tok) {
					t.Errorf("%s at %d columns: %q split:\n%s", name, width, tok, out)
					break
				}
			}
		}
	}
}

// node show with no containers wrote the CONTAINER header over nothing; an empty table says "-",
// as HELD FILE and WRITTEN FILE do.
func TestNodeShowEmptyTablesSayDash(t *testing.T) {
	rep := &report.Report{Node: "web1", Kinds: map[string]any{fsm.KindContainer: report.ContainerReport{Engine: "unix:///var/run/docker.sock", Reachable: true}}}
	var b strings.Builder
	writeNodeView(&b, api.NodeView{Node: &fsm.Node{Name: "web1"}, Report: rep})
	for _, head := range []string{"HELD FILE\t", "WRITTEN FILE\t", "CONTAINER\t"} {
		i := strings.Index(b.String(), head)
		if i < 0 {
			t.Fatalf("no %q table:\n%s", head, b.String())
		}
		if rows := strings.SplitN(b.String()[i:], "\n", 3); rows[1] != "-" {
			t.Errorf("empty %s table: its row is %q, want -", strings.TrimSpace(head), rows[1])
		}
	}
}

// A table too narrow for its columns that is a header alone still says its header.
func TestRecordsKeepAHeaderAlone(t *testing.T) {
	out := rendered(t, 40, func(w io.Writer) {
		fmt.Fprintln(w, "PEER\tADDRESS\tENROLLED\tENDPOINT\tLAST HEARD\tRX\tTX")
	})
	if !strings.Contains(out, "PEER") || !strings.Contains(out, "TX") {
		t.Errorf("the header alone at 40 columns: %q", out)
	}
}
