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

	"meshd/agent"
	"meshd/host"
)

// The peers' table says, for each peer, carried or enrolled as which node, when the hub last
// heard it and the bytes moved; a peer never heard says never.
func TestTunnelShowText(t *testing.T) {
	now := time.Date(2026, 12, 1, 5, 0, 0, 0, time.UTC)
	v := agent.TunnelView{Range: "10.44.0.0/24", Hub: "hub", HubAddress: "10.44.0.1", Port: 51820, Taken: "wg0",
		State: host.TunnelMeshUp, Says: "the mesh's interface is up in the found one's place", ReportAt: now.Add(-3 * time.Second), ReportFrom: "gossip",
		Peers: []agent.TunnelPeer{
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
func fakeAgent(t *testing.T, v agent.TunnelView) string {
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
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/tunnel", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	})
	srv := &http.Server{Handler: mux}
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
	}{{host.TunnelFoundUp, 0}, {host.TunnelMeshUp, 0}, {"", 0}, {host.TunnelDark, 1}} {
		v := agent.TunnelView{Range: "10.44.0.0/24", Hub: "hub", State: c.state, Peers: []agent.TunnelPeer{{PublicKey: "P1=", Address: "10.44.0.2"}}}
		sock := fakeAgent(t, v)
		for _, asJSON := range []bool{false, true} {
			args := []string{"--socket", sock, "tunnel", "show"}
			if asJSON {
				args = append(args, "--json")
			}
			cmd := exec.Command(meshdBin, args...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != c.code {
				t.Errorf("state %q (json %v): exit %d, want %d\n%s%s", c.state, asJSON, code, c.code, stdout.String(), stderr.String())
			}
			if asJSON {
				var got agent.TunnelView
				if err := json.Unmarshal(stdout.Bytes(), &got); err != nil || got.State != c.state {
					t.Errorf("state %q: --json printed %q (%v)", c.state, stdout.String(), err)
				}
			} else if !strings.Contains(stdout.String(), "10.44.0.2") {
				t.Errorf("state %q: the peers were not printed: %s", c.state, stdout.String())
			}
			if c.code != 0 && !strings.Contains(stderr.String(), "reach nothing") {
				t.Errorf("state %q: stderr says %q", c.state, stderr.String())
			}
		}
	}
}
