package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"meshd/api"
	"meshd/pki"
)

// busPost is busGet's POST: path on the bus at addr from netns, with cert.
func busPost(t *testing.T, netns, addr, path string, cert *tls.Certificate) (int, string) {
	t.Helper()
	cfg := &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{*cert}}
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg,
		DialContext: func(context.Context, string, string) (net.Conn, error) { return dialIn(netns, addr) }}}
	defer client.CloseIdleConnections()
	resp, err := client.Post("https://"+addr+path, "application/json", bytes.NewReader([]byte("{}")))
	if err != nil {
		t.Fatalf("bus POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Issue 26, findings 2 and 3, with real agents on two machines: root on a client, with its
// node's certificate, can neither write the record (its socket refuses, naming the servers; the
// bus's /v1/op refuses) nor stop the server (POST /v1/op/v1/leave). An operator credential made
// on the hub drives the mesh from the client's machine over the bus (--credential and
// MESHD_CREDENTIAL), the record keeping who gave each command; revoked, it is refused at once.
func TestProcessOperatorCredential(t *testing.T) {
	hub, edge := newNode(t), newNode(t)
	link(t, hub, edge, "192.0.2.1", "192.0.2.2")
	const bus = "192.0.2.1:17072"
	hub.genesis("--adopted", "--advertise", "192.0.2.1", "--port", "bus=17072")
	hub.startAgent("--docker-host", noDocker, "--reconcile-interval", "200ms")
	var tv api.TokenView
	hub.jsonOf(&tv, "token", "create", "--adopted")
	if out, errs, code := edge.runIn("join", tv.Token, "--name", "edge", "--data-dir", edge.dir); code != 0 {
		t.Fatalf("join: exit %d\n%s%s", code, out, errs)
	}
	edge.startAgent("--reconcile-interval", "200ms")
	sec, err := pki.OpenNodeSecrets(edge.dir, edge.sealKey)
	if err != nil {
		t.Fatal(err)
	}
	id, err := pki.Identity(sec.NodeCertPEM, sec.CACertPEM, sec.NodeKey)
	if err != nil {
		t.Fatal(err)
	}

	// The attacker: root on edge, adding a module that writes a cron file and assigning it to
	// the control-node.
	dir := t.TempDir()
	evil := filepath.Join(dir, "evil.yaml")
	if err := os.WriteFile(evil, []byte("name: evil\nprivileged: true\nfiles:\n  - path: /etc/cron.d/evil\n    content: \"* * * * * root id\\n\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"module", "add", "--privileged", evil}, {"module", "assign", "hub", "evil"}, {"token", "create", "--adopted"}} {
		_, errs, code := edge.run(args...)
		if code != 1 || !strings.Contains(errs, "node edge is a client") || !strings.Contains(errs, "run this on a server (hub) or with an operator credential") {
			t.Errorf("meshd %s on the client's socket: exit %d: %s", strings.Join(args, " "), code, errs)
		}
	}
	for _, p := range []string{"/v1/op/v1/leave", "/v1/op/v1/nodes/hub/modules/store/assign", "/v1/op/v1/tokens"} {
		if code, body := busPost(t, edge.netns, bus, p, &id); code != http.StatusForbidden {
			t.Errorf("POST %s with the client's certificate: %d %s", p, code, body)
		}
	}
	if code, body := busGet(t, edge.netns, bus, "/v1/op/v1/snapshot", &id); code != http.StatusForbidden {
		t.Errorf("snapshot save with the client's certificate: %d %s", code, body)
	}
	time.Sleep(time.Second) // the leave's stop would have come by now: the hub still answers
	hub.ok("status")

	// The operator: a credential made on the hub, used from edge's machine.
	file := filepath.Join(dir, "ops.credential")
	out := hub.ok("operator", "credential", "create", "--name", "ops-laptop", "--ttl", "1h", "--out", file)
	if !strings.Contains(out, "wrote operator credential ops-laptop") || !strings.Contains(out, "--credential "+file) {
		t.Errorf("create said:\n%s", out)
	}
	if st, err := os.Stat(file); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("credential file: %v %v", st, err)
	}
	if _, errs, code := hub.run("operator", "credential", "create", "--name", "other", "--out", file); code != 1 || !strings.Contains(errs, "never overwritten") {
		t.Errorf("create over an existing file: exit %d: %s", code, errs)
	}
	var st api.StatusView
	sout, serrs, code := edge.runIn("--credential", file, "status", "--json")
	if code != 0 || json.Unmarshal([]byte(sout), &st) != nil || st.Leader.Node != "hub" {
		t.Fatalf("status with the credential from edge: exit %d\n%s%s", code, sout, serrs)
	}
	if out, errs, code := edge.runIn("--credential", file, "module", "assign", "edge", "store"); code != 0 {
		t.Fatalf("module assign with the credential from edge: exit %d\n%s%s", code, out, errs)
	}
	cmd := edge.inNetns(meshdBin, "operator", "credential", "create", "--name", "ci", "--out", filepath.Join(dir, "ci.credential"))
	cmd.Env = append(cmd.Env, "MESHD_CREDENTIAL="+file, "MESHD_SOCKET="+edge.socket)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("credential create with MESHD_CREDENTIAL from edge: %v\n%s", err, b)
	}
	var creds []api.CredentialView
	hub.jsonOf(&creds, "operator", "credential", "list")
	by := map[string]string{}
	for _, c := range creds {
		by[c.Name] = c.CreatedBy
	}
	if by["ops-laptop"] != "root on hub's socket" || by["ci"] != "operator ops-laptop" {
		t.Errorf("credentials created by: %v", by)
	}
	if err := os.Chmod(file, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, errs, code := edge.runIn("--credential", file, "status"); code != 1 || !strings.Contains(errs, "readable by others") {
		t.Errorf("a credential others may read: exit %d: %s", code, errs)
	}
	_ = os.Chmod(file, 0o600)

	// Revoked: refused from the next command on, naming it.
	var revoked any
	hub.jsonOf(&revoked, "operator", "credential", "revoke", "ops-laptop")
	if _, errs, code := edge.runIn("--credential", file, "status"); code != 1 || !strings.Contains(errs, "operator credential ops-laptop was revoked") {
		t.Errorf("status with the revoked credential: exit %d: %s", code, errs)
	}
}
