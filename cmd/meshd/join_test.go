package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"meshd/api"
	"meshd/fsm"
	"meshd/host/tunnel"
	"meshd/internal/testenv"
	"meshd/pki"
)

// runIn runs meshd inside the node's network namespace (and its private /etc), as a command on
// that machine would run: join, and an agent expected to refuse.
func (n *node) runIn(args ...string) (string, string, int) {
	n.t.Helper()
	return n.runStdin("", args...)
}

// joinIn runs `meshd join --token-file - ARGS` on the node with token on its standard input,
// as the runbook has an operator do (a token on the command line is readable by every user).
func (n *node) joinIn(token string, args ...string) (string, string, int) {
	n.t.Helper()
	return n.runStdin(token+"\n", append([]string{"join", "--token-file", "-"}, args...)...)
}

// runStdin is runIn with stdin on the command's standard input.
func (n *node) runStdin(stdin string, args ...string) (string, string, int) {
	n.t.Helper()
	cmd := n.inNetns(append([]string{meshdBin}, args...)...)
	cmd.Env = append(cmd.Env, "MESHD_SOCKET="+n.socket)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		n.t.Fatalf("run meshd %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// tokenFile writes token to a file of the test's, 0600, for `join --token-file`.
func tokenFile(t *testing.T, token string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// link joins two nodes' namespaces by a veth pair on TEST-NET-1, with no default route.
func link(t *testing.T, a, b *node, addrA, addrB string) {
	t.Helper()
	suffix := fmt.Sprintf("%d", time.Now().UnixNano()%1e6)
	la, lb := "enra"+suffix, "enrb"+suffix
	cmds := [][]string{
		{"link", "add", la, "netns", a.netns, "type", "veth", "peer", "name", lb, "netns", b.netns},
		{"-n", a.netns, "addr", "add", addrA + "/24", "dev", la},
		{"-n", b.netns, "addr", "add", addrB + "/24", "dev", lb},
		{"-n", a.netns, "link", "set", la, "up"},
		{"-n", b.netns, "link", "set", lb, "up"},
	}
	for _, c := range cmds {
		if out, err := exec.Command("ip", c...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v %s", c, err, out)
		}
	}
	// Deleting either namespace (newNode's cleanup) deletes the pair.
}

// dialIn opens a TCP connection from inside a network namespace: the socket is made on a thread
// that entered it.
func dialIn(netns, addr string) (net.Conn, error) {
	var c net.Conn
	err := testenv.InNetns(netns, func() (err error) {
		c, err = net.DialTimeout("tcp", addr, 5*time.Second)
		return err
	})
	return c, err
}

// busGet reads a bus route from inside netns, with the given client certificate (or none).
func busGet(t *testing.T, netns, addr, path string, cert *tls.Certificate) (int, string) {
	t.Helper()
	cfg := &tls.Config{InsecureSkipVerify: true} // the test looks at what the bus answers, not at who it is
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg,
		DialContext: func(context.Context, string, string) (net.Conn, error) { return dialIn(netns, addr) }}}
	defer client.CloseIdleConnections()
	resp, err := client.Get("https://" + addr + path)
	if err != nil {
		t.Fatalf("bus GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// statusNodes is the record's nodes as `meshd status --json` shows them.
func statusNodes(n *node) string {
	n.t.Helper()
	var st api.StatusView
	n.jsonOf(&st, "status")
	b, _ := json.Marshal(st.Nodes)
	return string(b)
}

var recoveryRe = regexp.MustCompile(`RECOVERY CODE\s+(MESHD-[A-Z2-7-]+)`)

// The enrolment test on two machines joined by an underlay: genesis adopted on one, a
// token, a join on the other, its agent as a client; a module reaches it and its report shows on
// the server; bad tokens refused with the reason, changing nothing; the bus's mTLS; sealing.
func TestProcessEnrolment(t *testing.T) {
	hub, edge := newNode(t), newNode(t)
	link(t, hub, edge, "192.0.2.1", "192.0.2.2")
	const bus = "192.0.2.1:17070"

	// Genesis: the bus port is a setting; the CA key is sealed; the recovery code is shown once.
	gen := hub.genesis("--adopted", "--advertise", "192.0.2.1", "--port", "bus=17070")
	if !recoveryRe.MatchString(gen) {
		t.Fatalf("genesis printed no recovery code:\n%s", gen)
	}
	caKey := pki.Path(hub.dir, pki.CAKeyFile)
	raw, err := os.ReadFile(caKey)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(caKey); st.Mode().Perm() != 0o600 || bytes.Contains(raw, []byte("PRIVATE KEY")) || !bytes.HasPrefix(raw, []byte("MESHD-SEALED-1")) {
		t.Fatalf("CA key file %s is not sealed and 0600: mode %v, starts %q", caKey, st.Mode(), raw[:min(len(raw), 20)])
	}
	hub.startAgent("--docker-host", noDocker, "--reconcile-interval", "200ms")

	edgeJoin := func(token, name string) (string, string, int) {
		return edge.joinIn(token, "--name", name, "--data-dir", edge.dir)
	}
	refused := func(what, token, says string) {
		t.Helper()
		before := statusNodes(hub)
		out, errs, code := edgeJoin(token, "edge")
		if code != 1 || !strings.Contains(errs, says) {
			t.Fatalf("%s token: exit %d, want 1 saying %q:\n%s%s", what, code, says, out, errs)
		}
		t.Logf("%s token: %s", what, strings.TrimSpace(errs))
		if after := statusNodes(hub); after != before {
			t.Fatalf("%s token changed the record:\n%s\n%s", what, before, after)
		}
		if _, err := os.Stat(edge.dir); !os.IsNotExist(err) {
			t.Fatalf("%s token: the joining data dir %s was created", what, edge.dir)
		}
	}

	var tv api.TokenView
	hub.jsonOf(&tv, "token", "create", "--adopted")
	if tv.Mode != fsm.Adopted || len(tv.Bus) != 1 || tv.Bus[0] != bus {
		t.Fatalf("token: mode %s bus %v, want adopted on %s", tv.Mode, tv.Bus, bus)
	}
	tok := tv.Token
	refused("truncated", tok[:len(tok)-12], "truncated")
	head, sig, _ := strings.Cut(tok, ".")
	sb, _ := base64.RawURLEncoding.DecodeString(sig)
	sb[10] ^= 0x55
	refused("forged", head+"."+base64.RawURLEncoding.EncodeToString(sb), "forged")

	out, errs, code := edgeJoin(tok, "edge")
	if code != 0 {
		t.Fatalf("join: exit %d\n%s%s", code, out, errs)
	}
	m := recoveryRe.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("join printed no recovery code:\n%s", out)
	}
	edgeCode := m[1]
	t.Logf("join:\n%s", out)
	var st api.StatusView
	hub.jsonOf(&st, "status")
	var enrolled *api.NodeSummary
	for i := range st.Nodes {
		if st.Nodes[i].Name == "edge" {
			enrolled = &st.Nodes[i]
		}
	}
	if enrolled == nil || enrolled.Mode != fsm.Adopted || enrolled.Server || enrolled.Address != "10.99.0.2" {
		t.Fatalf("status after join: %+v", st.Nodes)
	}
	if text := hub.ok("status"); !regexp.MustCompile(`edge\s+ADOPTED\s+client\s+10\.99\.0\.2`).MatchString(text) {
		t.Fatalf("status does not show edge ADOPTED with its address:\n%s", text)
	}
	for _, f := range []string{pki.NodeKeyFile, pki.GossipKeyFile, pki.NodeCertFile, pki.CACertFile} {
		if st, err := os.Stat(pki.Path(edge.dir, f)); err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("edge %s: %v %v", f, st, err)
		}
	}
	// The node's WireGuard key was made here: sealed in its data dir, only its public key in the
	// record, the one join printed.
	if raw, err := os.ReadFile(tunnel.KeyPath(edge.dir)); err != nil || !bytes.HasPrefix(raw, []byte("MESHD-SEALED-1")) {
		t.Fatalf("edge's WireGuard key %s is not sealed: %v", tunnel.KeyPath(edge.dir), err)
	}
	wk := regexp.MustCompile(`wireguard key\s+(\S+) \(made here`).FindStringSubmatch(out)
	var shown struct{ Node fsm.Node }
	hub.jsonOf(&shown, "node", "show", "edge")
	if wk == nil || shown.Node.WireGuardKey != wk[1] {
		t.Fatalf("the record holds edge's WireGuard key %q, join printed %v", shown.Node.WireGuardKey, wk)
	}

	// The used token, again, for another name and data dir: refused, nothing changes.
	edge2 := filepath.Join(t.TempDir(), "edge2")
	before := statusNodes(hub)
	// Given as the argument (the form join warns about), and as the attacker would: another name.
	if out, errs, code := edge.runIn("join", tok, "--name", "edge2", "--data-dir", edge2); code != 1 ||
		!strings.Contains(errs, "token already used to enrol node edge at") || !strings.Contains(errs, tokenArgWarning) {
		t.Fatalf("used token: exit %d\n%s%s", code, out, errs)
	} else {
		t.Logf("used token: %s", strings.TrimSpace(errs))
	}
	if _, err := os.Stat(edge2); !os.IsNotExist(err) || statusNodes(hub) != before {
		t.Fatal("a used token changed something")
	}
	// An expired token: short ttl, joined after it passed.
	var short api.TokenView
	hub.jsonOf(&short, "token", "create", "--adopted", "--ttl", "1s")
	poll(t, 5*time.Second, "token expiry", func() string {
		if time.Now().After(short.Expires) {
			return ""
		}
		return "not yet expired"
	})
	if out, errs, code := edge.joinIn(short.Token, "--name", "edge2", "--data-dir", edge2); code != 1 || !strings.Contains(errs, "expired") {
		t.Fatalf("expired token: exit %d\n%s%s", code, out, errs)
	} else {
		t.Logf("expired token: %s", strings.TrimSpace(errs))
	}
	if _, err := os.Stat(edge2); !os.IsNotExist(err) || statusNodes(hub) != before {
		t.Fatal("an expired token changed something")
	}

	// The client agent: no Raft; reads through its socket come from the server.
	edge.startAgent("--docker-host", noDocker, "--reconcile-interval", "200ms")
	// It raises the mesh's interface with the key join made and the address the record gave it.
	poll(t, 30*time.Second, "edge's meshd0 up at 10.99.0.2/24", func() string {
		out, err := exec.Command("ip", "-n", edge.netns, "-4", "-o", "addr", "show", "dev", fsm.MeshInterface).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "10.99.0.2/24") {
			return fmt.Sprintf("%v %s", err, out)
		}
		return ""
	})
	// The client's socket answers its own status (issue 36), naming where the whole record is
	// read; it reads nor writes any more of the record (issue 26), naming where to run it.
	poll(t, 30*time.Second, "status on the client names its declaration and the hub", func() string {
		out, errs, code := edge.run("status")
		if code != 0 || !strings.Contains(out, "node: edge (client)") || !strings.Contains(out, "declaration: record index") ||
			!strings.Contains(out, "read on a server (hub)") {
			return fmt.Sprintf("exit %d\n%s%s", code, out, errs)
		}
		return ""
	})
	// Its --json has [] where it has nothing (no nodes, no voters), not null: scripts iterate it.
	var cst struct {
		Nodes  []any            `json:"nodes"`
		Voters []string         `json:"voters"`
		Client api.ClientStatus `json:"client"`
	}
	edge.jsonOf(&cst, "status")
	if cst.Nodes == nil || cst.Voters == nil || cst.Client.Node != "edge" {
		t.Errorf("status --json on the client: nodes %v, voters %v, client %q; want [] and [] and edge", cst.Nodes, cst.Voters, cst.Client.Node)
	}
	if _, errs, code := edge.run("node", "show", "hub"); code != 1 || !strings.Contains(errs, "node edge is a client") || !strings.Contains(errs, "run this on a server (hub)") {
		t.Fatalf("node show on the client: exit %d %s", code, errs)
	}
	// With an operator credential made on the hub, the client's machine reads and writes the
	// record over the bus: a write is answered from the leader once committed.
	cred := filepath.Join(t.TempDir(), "edge-op.credential")
	hub.ok("operator", "credential", "create", "--name", "edge-op", "--out", cred)
	if text, errs, code := edge.runIn("--credential", cred, "status"); code != 0 || !strings.Contains(text, "edge") || !strings.Contains(text, "hub") {
		t.Fatalf("status with a credential on the client's machine: exit %d\n%s%s", code, text, errs)
	} else {
		t.Logf("status with a credential on the client's machine:\n%s", text)
	}
	if out, errs, code := edge.runIn("--credential", cred, "token", "create", "--adopted"); code != 0 || !strings.Contains(errs, "committed and applied at record index") || !strings.Contains(errs, "hub (leader)") {
		t.Fatalf("a write with a credential on the client's machine: exit %d %q %q", code, out, errs)
	} else {
		t.Logf("a write with a credential on the client's machine: %s", strings.TrimSpace(errs))
	}

	// A module assigned to the client reaches its host; the held file shows on the server.
	dir := t.TempDir()
	conf := filepath.Join(dir, "edge-app.conf")
	original := []byte("# the predecessor's\nport = 9000\n")
	if err := os.WriteFile(conf, original, 0o644); err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(dir, "edgeapp.yaml")
	os.WriteFile(manifest, []byte(fmt.Sprintf("name: edgeapp\nprivileged: true\nfiles:\n  - path: %s\n    content: |\n      port = 9100\n    mode: \"0644\"\n", conf)), 0o644)
	hub.ok("module", "add", "--privileged", manifest)
	hub.ok("module", "assign", "edge", "edgeapp")
	poll(t, 15*time.Second, "the client's held file in node show on the server", func() string {
		var v api.NodeView
		hub.jsonOf(&v, "node", "show", "edge")
		if v.Report == nil {
			return "no report from edge yet"
		}
		for _, h := range v.Report.Held {
			if h.Path == conf && h.Module == "edgeapp" && !h.Changed {
				return ""
			}
		}
		return fmt.Sprintf("held = %+v", v.Report.Held)
	})
	if b, _ := os.ReadFile(conf); !bytes.Equal(b, original) {
		t.Fatalf("the held file changed on the adopted client: %q", b)
	}
	if text := hub.ok("node", "show", "edge"); !strings.Contains(text, conf) || !strings.Contains(text, "held, unchanged") {
		t.Fatalf("node show on the server lacks the client's held file:\n%s", text)
	} else {
		t.Logf("node show edge on the server:\n%s", text)
	}

	// The bus: no client certificate, no declaration; a node reads only its own.
	if code, body := busGet(t, edge.netns, bus, "/v1/declaration/edge", nil); code != http.StatusUnauthorized || !strings.Contains(body, "client certificate") {
		t.Fatalf("declaration without a client certificate: %d %s", code, body)
	}
	sec, err := pki.OpenNodeSecrets(edge.dir, edge.sealKey)
	if err != nil {
		t.Fatal(err)
	}
	id, err := pki.Identity(sec.NodeCertPEM, sec.CACertPEM, sec.NodeKey)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := busGet(t, edge.netns, bus, "/v1/declaration/hub", &id); code != http.StatusForbidden || !strings.Contains(body, "only its own") {
		t.Fatalf("edge reading hub's declaration: %d %s", code, body)
	}
	if code, body := busGet(t, edge.netns, bus, "/v1/declaration/edge", &id); code != http.StatusOK || !strings.Contains(body, "edgeapp") {
		t.Fatalf("edge reading its own declaration: %d %s", code, body)
	}

	// Sealing: with a wrong seal key the agent refuses to start, naming the file and the recovery
	// command; the recovery code restores the key and the agent starts.
	edge.kill(syscall.SIGTERM)
	good, _ := os.ReadFile(edge.sealKey)
	if err := pki.NewSealKey(edge.sealKey).Write(); err != nil {
		t.Fatal(err)
	}
	out, errs, code = edge.runIn("agent", "--data-dir", edge.dir, "--socket", edge.socket, "--docker-host", noDocker)
	if code != 1 || !strings.Contains(errs, edge.sealKey) || !strings.Contains(errs, "meshd operator seal-key restore") {
		t.Fatalf("agent with a wrong seal key: exit %d\n%s%s", code, out, errs)
	}
	t.Logf("agent with a wrong seal key: %s", strings.TrimSpace(errs))
	var restored any
	edge.jsonOf(&restored, "operator", "seal-key", "restore", "--recovery-code", edgeCode, "--data-dir", edge.dir)
	if now, _ := os.ReadFile(edge.sealKey); !bytes.Equal(now, good) {
		t.Fatal("the restored seal key is not the original")
	}
	edge.startAgent("--docker-host", noDocker)
	if text := hub.ok("node", "show", "edge"); !strings.Contains(text, "ADOPTED") {
		t.Fatalf("node show of the restored client:\n%s", text)
	}
}

// listensIn polls until something in netns listens on tcp port.
func listensIn(t *testing.T, netns string, port int) {
	t.Helper()
	poll(t, 20*time.Second, fmt.Sprintf("a listener on tcp port %d in %s", port, netns), func() string {
		out, _ := exec.Command("ip", "netns", "exec", netns, "ss", "-Hltn", fmt.Sprintf("sport = :%d", port)).Output()
		if len(strings.TrimSpace(string(out))) == 0 {
			return "nothing listens yet"
		}
		return ""
	})
}

// Issue 11: join runs genesis's preflight before anything is sent. token create says the mode or
// is refused; a converged token on a machine in use (a service listening, an active firewall) is
// refused naming both, in join's words, with nothing sent and nothing written on either side;
// --dry-run shows the findings, also without a token; once the machine is idle the same token
// joins (so it was never spent), its --port values are the node's settings, and its agent binds them. A firewall meshd does
// not speak (firewalld) refuses an adopted join too.
func TestProcessJoinPreflight(t *testing.T) {
	hub, edge := newNode(t), newNode(t)
	link(t, hub, edge, "192.0.2.1", "192.0.2.2")
	hub.genesis("--adopted", "--advertise", "192.0.2.1", "--port", "bus=17070")
	hub.startAgent("--docker-host", noDocker, "--reconcile-interval", "200ms")

	if out, errs, code := hub.run("token", "create"); code != 1 || !strings.Contains(errs, "--adopted") || !strings.Contains(errs, "--converged") {
		t.Fatalf("token create without a mode: exit %d, want 1 naming --adopted and --converged:\n%s%s", code, out, errs)
	} else {
		t.Logf("token create without a mode: %s", strings.TrimSpace(errs))
	}
	var tv api.TokenView
	hub.jsonOf(&tv, "token", "create", "--converged")
	if tv.Mode != fsm.Converged {
		t.Fatalf("token create --converged made a %s token", tv.Mode)
	}

	// The edge is in use: a service on every address, and a firewall that lets only it in.
	svc := edge.serve(t, "0.0.0.0:8088")
	nft := exec.Command("ip", "netns", "exec", edge.netns, "nft", "-f", "-")
	nft.Stdin = strings.NewReader("table inet found {\n chain input {\n type filter hook input priority 0; policy drop;\n tcp dport 8088 accept\n }\n}\n")
	if out, err := nft.CombinedOutput(); err != nil {
		t.Fatalf("nft: %v %s", err, out)
	}
	join := []string{"join", "--token-file", tokenFile(t, tv.Token), "--name", "edge", "--data-dir", edge.dir, "--docker-host", noDocker,
		"--port", "gossip=17946", "--port", "bus=17170"}
	unchanged := func(what, before string) {
		t.Helper()
		if after := statusNodes(hub); after != before {
			t.Fatalf("%s changed the record:\n%s\n%s", what, before, after)
		}
		for _, p := range []string{edge.dir, edge.sealKey} {
			if _, err := os.Stat(p); !os.IsNotExist(err) {
				t.Fatalf("%s wrote %s on the joining machine", what, p)
			}
		}
	}
	before := statusNodes(hub)
	out, errs, code := edge.runIn(join...)
	if code != 1 {
		t.Fatalf("a converged join on a machine in use: exit %d\n%s%s", code, out, errs)
	}
	for _, says := range []string{"join refused, nothing was sent", "machine.listeners", ":8088 (labsvc", "machine.firewall", "nftables",
		"a converged join would close it", "meshd token create --adopted"} {
		if !strings.Contains(errs, says) {
			t.Errorf("the refusal does not say %q:\n%s", says, errs)
		}
	}
	if strings.Contains(errs, "genesis") {
		t.Errorf("a refused join speaks of genesis:\n%s", errs)
	}
	t.Logf("converged join on a machine in use:\n%s", strings.TrimSpace(errs))
	unchanged("a refused join", before)

	// --dry-run shows the same findings, for scripts, and changes nothing.
	out, _, code = edge.runIn(append(join, "--dry-run", "--json")...)
	var f findings
	if err := json.Unmarshal([]byte(out), &f); err != nil || code != 1 || f.OK {
		t.Fatalf("join --dry-run --json on a machine in use: exit %d ok %v %v\n%s", code, f.OK, err, out)
	}
	if !f.has("machine.listeners", "error", ":8088") || !f.has("machine.firewall", "error", "token create --adopted") {
		t.Errorf("the dry run's findings do not name the listener and the firewall: %+v", f.Findings)
	}
	unchanged("a dry run", before)

	// A port the node would bind, held: named with its holder and a join's remedy, adopted or not.
	holder := edge.serve(t, "0.0.0.0:17946")
	out, _, _ = edge.runIn(append(join, "--dry-run", "--json")...)
	if err := json.Unmarshal([]byte(out), &f); err != nil || !f.has("port.mesh.gossip", "error", fmt.Sprintf("labsvc (pid %d)", holder.Process.Pid)) ||
		!f.has("port.mesh.gossip", "error", "give join another: --port gossip=N") {
		t.Errorf("the held gossip port is not named with its holder: %v %+v", err, f.Findings)
	}

	// A firewall meshd does not speak refuses an adopted join too, in genesis's words.
	var adopted api.TokenView
	hub.jsonOf(&adopted, "token", "create", "--adopted")
	fwd := exec.Command("ip", "netns", "exec", edge.netns, "nft", "add", "table", "inet", "firewalld")
	if out, err := fwd.CombinedOutput(); err != nil {
		t.Fatalf("nft add table inet firewalld: %v %s", err, out)
	}
	out, errs, code = edge.joinIn(adopted.Token, "--name", "edge", "--data-dir", edge.dir, "--docker-host", noDocker)
	if code != 1 || !strings.Contains(errs, "firewall.kind: firewalld is active") || !strings.Contains(errs, "meshd will not adopt a machine whose firewall it cannot speak") {
		t.Fatalf("an adopted join on a firewalld machine: exit %d\n%s%s", code, out, errs)
	}
	t.Logf("adopted join on a firewalld machine: %s", strings.TrimSpace(errs))
	unchanged("a join refused for firewalld", before)
	if out, err := exec.Command("ip", "netns", "exec", edge.netns, "nft", "delete", "table", "inet", "firewalld").CombinedOutput(); err != nil {
		t.Fatalf("nft delete: %v %s", err, out)
	}

	// Idle: the service and the held port stopped, the firewall gone. The same token joins.
	for _, c := range []*exec.Cmd{svc, holder} {
		_ = c.Process.Kill()
		_ = c.Wait()
	}
	if out, err := exec.Command("ip", "netns", "exec", edge.netns, "nft", "delete", "table", "inet", "found").CombinedOutput(); err != nil {
		t.Fatalf("nft delete: %v %s", err, out)
	}
	// Issue 36: a dry run needs no token; told the mode one would carry, it spends none.
	tokenless := []string{"join", "--name", "edge", "--converged", "--dry-run", "--data-dir", edge.dir, "--docker-host", noDocker,
		"--port", "gossip=17946", "--port", "bus=17170"}
	out, errs, code = edge.runIn(tokenless...)
	if code != 0 || !strings.Contains(out, "preflight passed for a converged join") || !strings.Contains(out, "no token spent") ||
		!strings.Contains(out, "mesh.bus=17170 mesh.gossip=17946") {
		t.Fatalf("join --dry-run without a token on the idle machine: exit %d\n%s%s", code, out, errs)
	}
	unchanged("a dry run without a token", before)
	out, errs, code = edge.runIn(append(join, "--dry-run")...)
	if code != 0 || !strings.Contains(out, "preflight passed for a converged join") {
		t.Fatalf("join --dry-run on the idle machine: exit %d\n%s%s", code, out, errs)
	}
	unchanged("a passing dry run", before)
	out, errs, code = edge.runIn(join...)
	if code != 0 || !strings.Contains(out, "mesh.bus=17170 mesh.gossip=17946") {
		t.Fatalf("the same token on the idle machine: exit %d\n%s%s", code, out, errs)
	}
	t.Logf("join on the idle machine, with the token refused before:\n%s", out)
	var v api.NodeView
	hub.jsonOf(&v, "node", "show", "edge")
	if v.Node.Mode != fsm.Converged || v.Node.Settings["mesh.gossip"] != "17946" || v.Node.Settings["mesh.bus"] != "17170" {
		t.Fatalf("edge in the record: mode %s settings %v", v.Node.Mode, v.Node.Settings)
	}
	// Its agent binds the ports the record gives it: gossip, and its bus once gossip knows it.
	edge.startAgent("--docker-host", noDocker, "--reconcile-interval", "200ms")
	listensIn(t, edge.netns, 17946)
	listensIn(t, edge.netns, 17170)
}
