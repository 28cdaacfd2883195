package agent

import (
	"bytes"
	"crypto/ed25519"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"meshd/api"
	"meshd/catalogue"
	"meshd/fsm"
	"meshd/pki"
	"meshd/setup"
)

// enrolNode puts node in ts's record with a certificate of role for a key the test holds, as a
// join would, and returns the node's TLS client on the bus.
func (ts *testServer) enrolNode(t *testing.T, node string, role pki.CertRole) *http.Client {
	t.Helper()
	id, _, key := nodeIdentity(t, ts.ca, node, role)
	hash := "tok-" + node
	server := role == pki.ServerCert
	if _, err := propose(ts.s.rec, fsm.OpTokenCreate, fsm.TokenCreate{Hash: hash, Mode: fsm.Adopted, Expires: time.Now().Add(time.Hour).UTC(), Server: server}); err != nil {
		t.Fatal(err)
	}
	if _, err := propose(ts.s.rec, fsm.OpNodeEnrol, fsm.Enrol{Node: node, ID: node + "-id", TokenHash: hash, Server: server,
		PublicKey: pki.PublicKeyString(key.Public().(ed25519.PublicKey)), Advertise: "127.0.0.5"}); err != nil {
		t.Fatal(err)
	}
	return tlsClient(pki.ClientTLS(&id, ts.ca.Cert))
}

func tlsClient(cfg *tls.Config) *http.Client {
	return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}

// call sends method path (with a JSON body when in is not nil) and returns the status, the body
// and the record index the answer names.
func call(t *testing.T, c *http.Client, method, url string, in any, hdr ...string) (int, string, uint64) {
	t.Helper()
	var body io.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, url, body)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error(), 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	idx, _ := strconv.ParseUint(resp.Header.Get(api.HeaderIndex), 10, 64)
	return resp.StatusCode, string(b), idx
}

// onSocket serves one request as the server's operator socket does (root's).
func (ts *testServer) onSocket(t *testing.T, method, path string, in any, out any) {
	t.Helper()
	b, _ := json.Marshal(in)
	rec := httptest.NewRecorder()
	withSocketAsker("hub", ts.s.operatorAPI()).ServeHTTP(rec, httptest.NewRequest(method, path, bytes.NewReader(b)))
	if rec.Code != http.StatusOK {
		t.Fatalf("%s %s on the socket: %d %s", method, path, rec.Code, rec.Body.String())
	}
	if out != nil {
		if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
			t.Fatal(err)
		}
	}
}

// Issue 26, finding 2 and 3: root on a client node, with the node's certificate, was an operator
// of the whole mesh through the bus's /v1/op (a module writing /etc/cron.d/evil assigned to the
// control-node, tokens minted, any node's declaration and a snapshot read) and could stop a
// server (POST /v1/op/v1/leave). Every one is refused now, naming where to run the command, and
// the server keeps running.
func TestClientCertificateIsNoOperator(t *testing.T) {
	ts := startTestServer(t)
	ts.startBus(t)
	web1 := ts.enrolNode(t, "web1", pki.ClientCert)
	stopped := make(chan struct{})
	ts.a.gs.stop = func() { close(stopped) }
	evil := catalogue.Source{File: "evil.yaml", Data: "name: evil\nfiles:\n  - path: /etc/cron.d/evil\n    content: \"* * * * * root id\\n\"\n"}
	base := "https://" + ts.busAddr + "/v1/op"
	for _, tc := range []struct {
		method, path string
		body         any
	}{
		{"POST", "/v1/modules", api.ModuleAddRequest{Source: evil}},
		{"POST", "/v1/nodes/hub/modules/store/assign", nil},
		{"POST", "/v1/tokens", api.TokenRequest{Mode: fsm.Adopted, TTL: "1h"}},
		{"GET", "/v1/declaration/hub", nil},
		{"GET", "/v1/snapshot", nil},
		{"GET", "/v1/status", nil},
		{"POST", "/v1/leave", nil},
		{"POST", "/v1/keyring", api.KeyringRequest{Op: "install"}},
		{"GET", "/v1/nodes/hub/original?path=/etc/shadow", nil},
	} {
		code, body, _ := call(t, web1, tc.method, base+tc.path, tc.body)
		if code != http.StatusForbidden || !strings.Contains(body, "node web1 is a client") || !strings.Contains(body, "run this on a server (hub)") ||
			!strings.Contains(body, "meshd operator credential create") {
			t.Errorf("%s /v1/op%s with a client's certificate: %d %s", tc.method, tc.path, code, body)
		}
	}
	ts.s.rec.Read(func(r *fsm.Record, _ uint64) {
		if r.Catalogue["evil"] != nil || len(r.Nodes["hub"].Assigned) != 0 || len(r.Tokens) != 1 {
			t.Errorf("the record changed: catalogue evil %v, hub assigned %v, %d tokens", r.Catalogue["evil"] != nil, r.Nodes["hub"].Assigned, len(r.Tokens))
		}
	})
	select {
	case <-stopped:
		t.Fatal("the server was made to stop by a client's certificate")
	default:
	}
	// Its own routes still serve it.
	if code, body, _ := call(t, web1, "GET", "https://"+ts.busAddr+"/v1/gossip", nil); code != http.StatusOK {
		t.Errorf("a client's own gossip view: %d %s", code, body)
	}
	if code, body, _ := call(t, web1, "GET", "https://"+ts.busAddr+"/v1/declaration/hub", nil); code != http.StatusForbidden {
		t.Errorf("another node's declaration on the direct route: %d %s", code, body)
	}
}

// An operator credential created on a server's socket drives the mesh over the bus: the record
// keeps "operator NAME" as who gave each command; it cannot use a node's own routes, nor stop the
// server; revoked, it is refused at once, naming it revoked; one the record does not list, or
// expired, is refused too.
func TestOperatorCredentialOnTheBus(t *testing.T) {
	ts := startTestServer(t)
	ts.startBus(t)
	var made api.CredentialIssued
	ts.onSocket(t, "POST", "/v1/operator/credentials", api.CredentialRequest{Name: "ops-laptop", TTL: "1h"}, &made)
	if made.Credential.CreatedBy != "root on hub's socket" || made.Credential.State != "active" || len(made.Bus) != 1 || made.Bus[0] != ts.busAddr {
		t.Fatalf("credential made: %+v", made)
	}
	cred, err := pki.ParseCredential([]byte(made.File))
	if err != nil {
		t.Fatal(err)
	}
	if cred.Name != "ops-laptop" || cred.Bus[0] != ts.busAddr {
		t.Fatalf("credential file: %s, bus %v", cred.Name, cred.Bus)
	}
	ops := tlsClient(cred.TLS())
	base := "https://" + ts.busAddr + "/v1/op"
	if code, body, _ := call(t, ops, "GET", base+"/v1/modules", nil); code != http.StatusOK {
		t.Fatalf("modules with the credential: %d %s\n%s", code, body, ts.log.String())
	}
	code, body, idx := call(t, ops, "POST", base+"/v1/nodes/hub/modules/store/assign", nil,
		api.HeaderAskedBy, "root on hub's socket") // what the caller says of itself is not kept
	if code != http.StatusOK {
		t.Fatalf("assign with the credential: %d %s", code, body)
	}
	if c, err := ts.s.rec.Entry(idx); err != nil || c.By != "operator ops-laptop" || c.Op != fsm.OpModuleAssign {
		t.Fatalf("the log's entry %d: %+v %v", idx, c, err)
	}
	var tv api.TokenView
	code, body, _ = call(t, ops, "POST", base+"/v1/tokens", api.TokenRequest{Mode: fsm.Adopted, TTL: "1h"})
	if code != http.StatusOK || json.Unmarshal([]byte(body), &tv) != nil {
		t.Fatalf("token with the credential: %d %s", code, body)
	}
	ts.s.rec.Read(func(r *fsm.Record, _ uint64) {
		if tok := r.Tokens[tv.Hash]; tok == nil || tok.CreatedBy != "operator ops-laptop" {
			t.Errorf("token as recorded: %+v", tok)
		}
	})
	// A node's own routes are a node's, and a server's stop is its own socket's.
	for _, p := range []string{"/v1/declaration/hub", "/v1/gossip"} {
		if code, body, _ := call(t, ops, "GET", "https://"+ts.busAddr+p, nil); code != http.StatusForbidden {
			t.Errorf("GET %s with the credential: %d %s", p, code, body)
		}
	}
	if code, body, _ := call(t, ops, "POST", "https://"+ts.busAddr+"/v1/report", map[string]string{"node": "hub"}); code != http.StatusForbidden {
		t.Errorf("a report with the credential: %d %s", code, body)
	}
	if code, body, _ := call(t, ops, "POST", base+"/v1/leave", nil); code != http.StatusForbidden || !strings.Contains(body, "own operator socket") {
		t.Errorf("leave with the credential: %d %s", code, body)
	}
	// Revoked: refused from the next request on.
	var rv api.CredentialView
	ts.onSocket(t, "POST", "/v1/operator/credentials/ops-laptop/revoke", nil, &rv)
	if rv.State != "revoked" || rv.RevokedBy != "root on hub's socket" {
		t.Fatalf("revoked: %+v", rv)
	}
	if code, body, _ := call(t, tlsClient(cred.TLS()), "GET", base+"/v1/modules", nil); code != http.StatusForbidden || !strings.Contains(body, "operator credential ops-laptop was revoked") {
		t.Errorf("modules with a revoked credential: %d %s", code, body)
	}
	// Issued by the CA but never listed: refused.
	key, _ := pki.NewNodeKey()
	certPEM, err := ts.ca.IssueOperator("stray", key.Public().(ed25519.PublicKey), time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	file, _ := pki.EncodeCredential(certPEM, key, ts.ca.CertPEM, []string{ts.busAddr})
	stray, err := pki.ParseCredential(file)
	if err != nil {
		t.Fatal(err)
	}
	if code, body, _ := call(t, tlsClient(stray.TLS()), "GET", base+"/v1/modules", nil); code != http.StatusForbidden || !strings.Contains(body, "not in the record") {
		t.Errorf("modules with an unlisted credential: %d %s", code, body)
	}
	// Expired: the certificate no longer verifies, nor does the record take it.
	ts.s.rec.Read(func(r *fsm.Record, _ uint64) {
		if err := r.CheckCredential("ops-laptop", made.Credential.ID, made.Credential.Expires); err == nil {
			t.Error("the record takes the credential past its expiry")
		}
	})
	old, err := ts.ca.IssueOperator("old", key.Public().(ed25519.PublicKey), time.Now().Add(-2*time.Hour), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	blk := tls.Certificate{Certificate: [][]byte{pemBody(t, old)}, PrivateKey: key}
	if code, body, _ := call(t, tlsClient(pki.ClientTLS(&blk, ts.ca.Cert)), "GET", base+"/v1/modules", nil); code == http.StatusOK {
		t.Errorf("modules with an expired credential: %d %s", code, body)
	}
}

// A server forwarding passes on who asked; only a server's certificate may say it.
func TestServerForwardKeepsWhoAsked(t *testing.T) {
	ts := startTestServer(t)
	ts.startBus(t)
	hub2 := ts.enrolNode(t, "hub2", pki.ServerCert)
	code, body, idx := call(t, hub2, "POST", "https://"+ts.busAddr+"/v1/op/v1/nodes/hub/modules/store/assign", nil,
		api.HeaderAskedBy, "root on hub2's socket", api.HeaderForwardedBy, "hub2")
	if code != http.StatusOK {
		t.Fatalf("a server's forwarded assign: %d %s", code, body)
	}
	if c, err := ts.s.rec.Entry(idx); err != nil || c.By != "root on hub2's socket" {
		t.Fatalf("the log's entry %d: %+v %v", idx, c, err)
	}
}

func pemBody(t *testing.T, certPEM []byte) []byte {
	t.Helper()
	c, err := pki.ParseCert(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c.Raw
}

// A client's own socket answers its own status (issue 36: the README's `meshd status` after a
// join): the node, its declaration, the servers it follows, where the whole record is read. The
// rest of the record is refused, naming where to run it, and nothing is sent to a server with the
// node's certificate.
func TestClientSocketAnswersItsStatusAndRefusesTheRecord(t *testing.T) {
	ca, err := pki.NewCA("hub", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	id, _, _ := nodeIdentity(t, ca, "web1", pki.ClientCert)
	a := &Agent{node: &setup.NodeFile{Name: "web1", ID: "web1-id", Servers: []string{"127.0.0.1:1"}}, identity: id, caCert: ca.Cert}
	c, err := newClientRole(a.core())
	if err != nil {
		t.Fatal(err)
	}
	c.view = api.GossipView{Node: "web1", Nodes: []api.GossipPeer{{Name: "hub", Server: true}, {Name: "s2", Server: true}, {Name: "web1"}}}
	c.decl, c.declIndex = &fsm.Declaration{Node: "web1", Mode: fsm.Adopted, Assigned: []string{"mesh"}, Taken: []string{}, Address: "10.99.0.2"}, 42
	c.answered = "127.0.0.1:1"
	rec := httptest.NewRecorder()
	withSocketAsker("web1", c.operatorAPI()).ServeHTTP(rec, httptest.NewRequest("GET", "/v1/status", nil))
	var st api.StatusView
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &st) != nil || st.Client == nil {
		t.Fatalf("status on the client's socket: %d %s", rec.Code, rec.Body.String())
	}
	cs := st.Client
	if cs.Node != "web1" || cs.Mode != fsm.Adopted || cs.Index != 42 || cs.Address != "10.99.0.2" || len(cs.Assigned) != 1 ||
		len(cs.Servers) != 1 || cs.Answered != "127.0.0.1:1" || !strings.Contains(cs.Record, "read on a server (hub, s2) or with an operator credential") {
		t.Errorf("status on the client's socket: %+v", cs)
	}
	if st.Gossip.Node != "web1" || st.Gossip.Rejected == nil { // its own gossip, not a blank server's
		t.Errorf("status on the client's socket: gossip %+v", st.Gossip)
	}
	for _, p := range []string{"GET /v1/nodes/hub", "POST /v1/nodes/hub/modules/evil/assign", "POST /v1/tokens", "GET /v1/snapshot", "POST /v1/keyring"} {
		method, path, _ := strings.Cut(p, " ")
		rec := httptest.NewRecorder()
		withSocketAsker("web1", c.operatorAPI()).ServeHTTP(rec, httptest.NewRequest(method, path, nil))
		if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "node web1 is a client") || !strings.Contains(rec.Body.String(), "run this on a server (hub, s2)") {
			t.Errorf("%s on the client's socket: %d %s", p, rec.Code, rec.Body.String())
		}
	}
}
