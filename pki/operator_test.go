package pki

import (
	"crypto/ed25519"
	"crypto/x509"
	"strings"
	"testing"
	"time"
)

// An operator credential is the CA's word that a person may drive the mesh: it verifies as an
// operator's, round-trips through its file, and is nothing else: not a node's (no node URI), not
// a server's; a node's certificate is not an operator's; an expired one is refused.
func TestOperatorCredential(t *testing.T) {
	ca := newCA(t)
	key, _ := NewNodeKey()
	now := time.Now()
	certPEM, err := ca.IssueOperator("ops-laptop", key.Public().(ed25519.PublicKey), now, 720*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	file, err := EncodeCredential(certPEM, key, ca.CertPEM, []string{"192.0.2.1:7070", "192.0.2.2:7070"})
	if err != nil {
		t.Fatal(err)
	}
	cred, err := ParseCredential(file)
	if err != nil {
		t.Fatal(err)
	}
	if cred.Name != "ops-laptop" || strings.Join(cred.Bus, " ") != "192.0.2.1:7070 192.0.2.2:7070" || !cred.CA.Equal(ca.Cert) {
		t.Fatalf("the credential file read back as %q %q", cred.Name, cred.Bus)
	}
	if d := cred.Cert.NotAfter.Sub(now); d < 719*time.Hour || d > 721*time.Hour {
		t.Fatalf("a 720h credential is valid for %s", d)
	}
	if _, err := NodeName(cred.Cert); err == nil {
		t.Fatal("an operator credential names a node")
	}
	if _, err := verifyServer(cred.Cert, ca.Cert); err == nil {
		t.Fatal("an operator credential verifies as a server's")
	}
	if _, err := VerifyNode(cred.Cert, ca.Cert, x509.ExtKeyUsageClientAuth, now); err == nil {
		t.Fatal("an operator credential verifies as a node's")
	}
	if _, err := VerifyOperator(cred.Cert, ca.Cert, now.Add(721*time.Hour)); err == nil {
		t.Fatal("an expired operator credential verifies")
	}
	node := identity(t, ca, "edge", ClientCert)
	if _, err := VerifyOperator(node.Leaf, ca.Cert, now); err == nil || !strings.Contains(err.Error(), "not an operator credential") {
		t.Fatalf("a client node's certificate as an operator's: %v", err)
	}
	other := newCA(t)
	if _, err := VerifyOperator(cred.Cert, other.Cert, now); err == nil {
		t.Fatal("another mesh's CA takes the credential")
	}
	for _, bad := range []string{"", "Ops", "a/b", strings.Repeat("x", 64)} {
		if _, err := ca.IssueOperator(bad, key.Public().(ed25519.PublicKey), now, time.Hour); err == nil {
			t.Errorf("an operator credential named %q was issued", bad)
		}
	}
	if _, err := ca.IssueOperator("ops", key.Public().(ed25519.PublicKey), now, 2*MaxOperatorTTL); err == nil {
		t.Error("a credential beyond the longest lifetime was issued")
	}
	// A file whose key is another's is refused.
	other2, _ := NewNodeKey()
	bad, _ := EncodeCredential(certPEM, other2, ca.CertPEM, nil)
	if _, err := ParseCredential(bad); err == nil {
		t.Fatal("a credential file with another key was read")
	}
}
