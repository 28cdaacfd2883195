package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"meshd/api"
	"meshd/fsm"
	"meshd/report"
)

// The peers' table says, for each peer, carried or enrolled as which node, when the hub last
// heard it and the bytes moved; a peer never heard says never.
func TestTunnelShowText(t *testing.T) {
	now := time.Date(2026, 12, 1, 5, 0, 0, 0, time.UTC)
	v := api.TunnelView{Range: "10.44.0.0/24", Hub: "hub", HubAddress: "10.44.0.1", Port: 51820, Taken: "wg0",
		State: report.TunnelMeshUp, Says: "the mesh's interface is up in the found one's place", ReportAt: now.Add(-3 * time.Second), ReportFrom: "gossip",
		Peers: []api.TunnelPeer{
			{PublicKey: "P1=", Address: "10.44.0.2", Endpoint: "198.51.100.11:51820", LastHeard: now.Add(-7 * time.Second), ReceiveBytes: 4096, TransmitBytes: 300},
			{PublicKey: "P2=", Address: "10.44.0.3", Enrolled: true, Node: "peer2", LastHeard: now.Add(-2 * time.Minute), ReceiveBytes: 3 << 20, TransmitBytes: 5 << 30},
			{PublicKey: "P3=", Address: "10.44.0.4"},
		}}
	var b bytes.Buffer
	printTunnelView(&b, v, now)
	out := b.String()
	for _, want := range []string{
		"state\tmesh-up (the mesh's interface is up in the found one's place)",
		"hub's report\t3s ago (gossip)",
		"PEER\tADDRESS\tENROLLED\tENDPOINT\tLAST HEARD\tRX\tTX",
		"P1=\t10.44.0.2\tno (carried)\t198.51.100.11:51820\t7s ago\t4.0 KiB\t300 B",
		"P2=\t10.44.0.3\tyes, node peer2\t-\t2m0s ago\t3.0 MiB\t5.0 GiB",
		"P3=\t10.44.0.4\tno (carried)\t-\tnever\t0 B\t0 B",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("tunnel show lacks %q:\n%s", want, out)
		}
	}
}

// fakeAgent answers GET /v1/tunnel on a unix socket with v, as an agent would.
func fakeAgent(t *testing.T, v api.TunnelView) string {
	return fakeAgentAnswering(t, map[string]any{"GET /v1/tunnel": v})
}

// fakeAgentAnswering answers each "METHOD PATH" of answers with its value as JSON.
func fakeAgentAnswering(t *testing.T, answers map[string]any) string {
	t.Helper()
	mux := http.NewServeMux()
	for route, v := range answers {
		mux.HandleFunc(route, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(v)
		})
	}
	return fakeAgentServing(t, mux)
}

// fakeAgentServing serves h on a fresh operator socket for the test's length and returns its path.
func fakeAgentServing(t *testing.T, h http.Handler) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mt") // a short path: a unix socket's is at most 107 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return sock
}

// `meshd tunnel show` exits 1 when the hub's found tunnel is down and the mesh's not up (its
// output printed first, --json too), 0 in the two other states and before any report.
func TestProcessTunnelShowExitStatus(t *testing.T) {
	for _, c := range []struct {
		state string
		code  int
	}{{report.TunnelFoundUp, 0}, {report.TunnelMeshUp, 0}, {"", 0}, {report.TunnelDark, 1}} {
		v := api.TunnelView{Range: "10.44.0.0/24", Hub: "hub", State: c.state, Peers: []api.TunnelPeer{{PublicKey: "P1=", Address: "10.44.0.2"}}}
		sock := fakeAgent(t, v)
		for _, asJSON := range []bool{false, true} {
			args := []string{"--socket", sock, "tunnel", "show"}
			if asJSON {
				args = append(args, "--json")
			}
			stdout, stderr, code := run(t, args...)
			if code != c.code {
				t.Errorf("state %q (json %v): exit %d, want %d\n%s%s", c.state, asJSON, code, c.code, stdout, stderr)
			}
			if asJSON {
				var got api.TunnelView
				if err := json.Unmarshal([]byte(stdout), &got); err != nil || got.State != c.state {
					t.Errorf("state %q: --json printed %q (%v)", c.state, stdout, err)
				}
			} else if !strings.Contains(stdout, "10.44.0.2") {
				t.Errorf("state %q: the peers were not printed: %s", c.state, stdout)
			}
			if c.code != 0 && !strings.Contains(stderr, "reach nothing") {
				t.Errorf("state %q: stderr says %q", c.state, stderr)
			}
		}
	}
}

// run runs the meshd binary with args and returns its stdout, stderr and exit code.
func run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(meshdBin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return stdout.String(), stderr.String(), ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return stdout.String(), stderr.String(), 0
}

// The third state — the found interface down and the mesh's not up — is an error in status (TUNNEL
// DOWN, naming the node) and in node show (the failed resource tunnel:meshd0, with why); status
// lists the tunnel's peers with when the hub last heard them.
func TestProcessTunnelDownInStatusAndNodeShow(t *testing.T) {
	now := time.Now()
	reason := "the found interface wg0 is down and the mesh's meshd0 is not up: binding port 51820: address in use"
	tv := api.TunnelView{Range: "10.44.0.0/24", Hub: "hub", State: report.TunnelDark, Peers: []api.TunnelPeer{
		{PublicKey: "P1=", Address: "10.44.0.2", LastHeard: now.Add(-40 * time.Second), ReceiveBytes: 2048},
		{PublicKey: "P2=", Address: "10.44.0.3", Enrolled: true, Node: "peer2"},
	}}
	st := api.StatusView{Leader: api.LeaderView{Node: "hub"}, Tunnel: &tv, Nodes: []api.NodeSummary{
		{Name: "hub", Mode: "adopted", Server: true, ControlNode: true, Address: "10.44.0.1", Liveness: "alive", ReportFrom: "local", Tunnel: report.TunnelDark},
		{Name: "peer2", Mode: "adopted", Address: "10.44.0.3", Liveness: "alive"},
	}}
	rep := report.Report{When: now, Kinds: map[string]any{"tunnel": report.TunnelDetail{State: report.TunnelDark, Says: "found down, mesh not up",
		Interface: "meshd0", Found: "wg0", Address: "10.44.0.1/24", Port: 51820, Reason: reason}},
		Errors: []report.ResourceError{{Resource: "tunnel:meshd0", Module: "mesh", Reason: reason}}}
	nv := api.NodeView{Node: &fsm.Node{Name: "hub", Mode: "adopted", Address: "10.44.0.1"}, Report: &rep}
	sock := fakeAgentAnswering(t, map[string]any{"GET /v1/status": st, "GET /v1/nodes/{node}": nv})

	out, errOut, code := run(t, "--socket", sock, "status")
	for _, want := range []string{"node hub: TUNNEL DOWN", "10.44.0.2  ", "no (carried)", "40s ago", "2.0 KiB", "yes, node peer2", "never"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q (exit %d):\n%s%s", want, code, out, errOut)
		}
	}
	out, errOut, _ = run(t, "--socket", sock, "node", "show", "hub")
	for _, want := range []string{"found-down-mesh-not-up", "FAILED RESOURCE", "tunnel:meshd0", "address in use"} {
		if !strings.Contains(out, want) {
			t.Errorf("node show lacks %q:\n%s%s", want, out, errOut)
		}
	}
}

// `meshd tunnel take` follows the node once the record holds the take: it exits 0 once the
// node's report has meshd0 up in the found interface's place (its answer saying so, --json the
// record's answer), and 1 when the report says the takeover failed, naming the node, the tunnel
// resource and the node's reason; a report of a pass from before the take (no takeover declared)
// is waited past, and --wait bounds that.
func TestProcessTunnelTakeFollowsTheNode(t *testing.T) {
	now := time.Now().UTC()
	taken := fsm.TunnelTaken{Node: &fsm.Node{Name: "hub", Settings: map[string]string{"mesh.tunnel": "51820"}},
		Tunnel: fsm.Tunnel{Range: "10.44.0.0/24", Hub: "hub", HubAddress: "10.44.0.1", Taken: "wg0"}}
	nodeWith := func(det report.TunnelDetail, errs ...report.ResourceError) api.NodeView {
		return api.NodeView{Node: &fsm.Node{Name: "hub", Mode: fsm.Adopted},
			Report: &report.Report{Node: "hub", When: now, Errors: errs, Kinds: map[string]any{fsm.KindTunnel: det}}}
	}
	reason := "not taking wg0 over: its key is A=, the record took B="
	for _, c := range []struct {
		name  string
		nv    api.NodeView
		args  []string
		code  int
		out   []string
		error []string
	}{
		{"carried out", nodeWith(report.TunnelDetail{Interface: fsm.MeshInterface, Found: "wg0", State: report.TunnelMeshUp, TakenAt: now}),
			nil, 0, []string{"node hub takes tunnel wg0 over", "carried out", "the mesh's wg0 up in its place"}, nil},
		{"carried out, --json", nodeWith(report.TunnelDetail{Interface: fsm.MeshInterface, Found: "wg0", State: report.TunnelMeshUp, TakenAt: now}),
			[]string{"--json"}, 0, []string{`"taken": "wg0"`}, nil},
		{"failed", nodeWith(report.TunnelDetail{Interface: fsm.MeshInterface, Found: "wg0", State: report.TunnelFoundUp, Reason: reason},
			report.ResourceError{Resource: "tunnel:" + fsm.MeshInterface, Module: "mesh", Reason: reason}),
			nil, 1, nil, []string{"node hub could not carry out the takeover of tunnel wg0", "tunnel:" + fsm.MeshInterface, reason}},
		{"a report from before the take", nodeWith(report.TunnelDetail{Interface: fsm.MeshInterface, State: report.TunnelMeshUp},
			report.ResourceError{Resource: "tunnel:" + fsm.MeshInterface, Module: "mesh", Reason: "an old failure"}),
			[]string{"--wait", "1s"}, 1, nil, []string{"has not carried out the takeover of tunnel wg0 after 1s", "of a pass from before the act"}},
	} {
		sock := fakeAgentAnswering(t, map[string]any{"POST /v1/tunnel/take": taken, "GET /v1/nodes/{node}": c.nv})
		out, errOut, code := run(t, append([]string{"--socket", sock, "tunnel", "take", "hub", "wg0"}, c.args...)...)
		if code != c.code {
			t.Errorf("%s: exit %d, want %d\n%s%s", c.name, code, c.code, out, errOut)
			continue
		}
		for _, want := range c.out {
			if !strings.Contains(out, want) {
				t.Errorf("%s: stdout lacks %q:\n%s", c.name, want, out)
			}
		}
		for _, want := range c.error {
			if !strings.Contains(errOut, want) {
				t.Errorf("%s: stderr lacks %q:\n%s", c.name, want, errOut)
			}
		}
		if c.code != 0 && out != "" {
			t.Errorf("%s: a failed take printed an answer: %q", c.name, out)
		}
	}
}
