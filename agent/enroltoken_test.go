package agent

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"meshd/pki"
)

// replayToken plays the attacker of issue 26 finding 1: it holds a used token and the enrolled
// node's public key (read from the certificate the node shows on its bus port), and sends the
// enrolment again as that node, unsigned, from a machine of its own. It returns the status and
// the body.
func (ts *testServer) replayToken(t *testing.T, tok, node, certPEM string, server bool) (int, []byte) {
	t.Helper()
	cert, err := pki.ParseCert([]byte(certPEM))
	if err != nil {
		t.Fatal(err)
	}
	pub := pki.PublicKeyString(cert.PublicKey.(ed25519.PublicKey))
	body, _ := json.Marshal(map[string]any{"token": tok, "node": node, "id": node + "-id", "public_key": pub,
		"advertise": "127.0.0.4", "server": server})
	resp, err := fromAddr("127.0.0.4").Post("https://"+ts.busAddr+"/v1/enrol", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// Issue 26 finding 1: a used server token and the node's public key got the mesh CA's private
// key back. Now the replay is refused as a used token, naming the node it enrolled, and carries
// no CA key.
func TestUsedServerTokenReplayedWithThePublicKeyIsRefused(t *testing.T) {
	ts := startTestServer(t)
	ts.startBus(t)
	tok := ts.newToken(t, true)
	key, _ := pki.NewNodeKey()
	first, err := ts.enrolWith(t, tok, "s2", key, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.CAKey) != ed25519.PrivateKeySize {
		t.Fatalf("the first server enrolment brought %d bytes of CA key", len(first.CAKey))
	}
	code, body := ts.replayToken(t, tok, "s2", first.CertPEM, true)
	caKey := base64.StdEncoding.EncodeToString(ts.ca.Key)
	if code < 400 || bytes.Contains(body, []byte("ca_key")) || bytes.Contains(body, []byte(caKey)) {
		t.Fatalf("the replayed server token got %d, CA key in the answer %v:\n%.300s", code, bytes.Contains(body, []byte(caKey)), body)
	}
	for _, want := range []string{"token already used to enrol node s2 at", "a retried join must come from that machine"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("the refusal does not say %q:\n%s", want, body)
		}
	}
}

// The same with a used client token: the replay gets neither the gossip keyring nor the node's
// declaration.
func TestUsedClientTokenReplayedWithThePublicKeyIsRefused(t *testing.T) {
	ts := startTestServer(t)
	ts.startBus(t)
	tok := ts.newToken(t, false)
	key, _ := pki.NewNodeKey()
	first, err := ts.enrolWith(t, tok, "edge", key, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Keyring) == 0 {
		t.Fatal("the first enrolment brought no gossip keyring")
	}
	code, body := ts.replayToken(t, tok, "edge", first.CertPEM, false)
	if code < 400 || bytes.Contains(body, []byte("gossip_keyring")) || bytes.Contains(body, []byte("declaration")) ||
		bytes.Contains(body, []byte(base64.StdEncoding.EncodeToString(first.Keyring[0]))) {
		t.Fatalf("the replayed client token got %d:\n%.300s", code, body)
	}
	if !strings.Contains(string(body), "token already used to enrol node edge at") {
		t.Errorf("the refusal does not say the token was used:\n%s", body)
	}
}

// The legitimate retry (the machine whose answer was lost, with its key) still gets its answer,
// the same certificate, marked as the same enrolment again; a server's carries no CA key.
func TestRetriedServerEnrolmentGetsNoCAKey(t *testing.T) {
	ts := startTestServer(t)
	ts.startBus(t)
	tok := ts.newToken(t, true)
	key, _ := pki.NewNodeKey()
	first, err := ts.enrolWith(t, tok, "s2", key, true)
	if err != nil {
		t.Fatal(err)
	}
	again, err := ts.enrolWith(t, tok, "s2", key, true)
	if err != nil {
		t.Fatalf("the retry from the same machine: %v", err)
	}
	if !again.Again || len(again.CAKey) != 0 || first.Again {
		t.Fatalf("the retry: again %v, %d bytes of CA key; the first: again %v", again.Again, len(again.CAKey), first.Again)
	}
	if again.CertPEM != first.CertPEM || again.Node.Address != first.Node.Address || len(again.Keyring) == 0 {
		t.Fatalf("the retry's answer is not the first's: cert equal %v, address %s (first %s)", again.CertPEM == first.CertPEM,
			again.Node.Address, first.Node.Address)
	}
}
