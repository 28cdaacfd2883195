package pki

import (
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"net/url"
	"strings"
	"testing"
	"time"
)

// oldStyle is a node certificate as meshd issued every one before servers and clients differed:
// client and server auth, no server role marker.
func oldStyle(t *testing.T, ca *CA, node string) tls.Certificate {
	t.Helper()
	key, err := NewNodeKey()
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: node, Organization: []string{"meshd"}},
		DNSNames:     []string{NodeDNSName(node)},
		URIs:         []*url.URL{{Scheme: nodeURIScheme, Host: "node", Path: "/" + node}},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     ca.Cert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		t.Fatal(err)
	}
	id, err := Identity(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), ca.CertPEM, key)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// Issue 14: certificates issued before the role change carried server auth for clients too, so a
// client enrolled then still passed for a server. A bus client and Raft now refuse a certificate
// with server auth but without the server role marker; a server's new certificate has it.
func TestOldStyleCertificateIsNoServer(t *testing.T) {
	ca := newCA(t)
	old := oldStyle(t, ca, "edge")
	cli := identity(t, ca, "hub", ClientCert)
	if !LegacyServer(old.Leaf) || RoleOf(old.Leaf) != ClientCert {
		t.Fatalf("an old-style certificate reads as legacy %v, role %s", LegacyServer(old.Leaf), RoleOf(old.Leaf))
	}
	if srv := identity(t, ca, "hub", ServerCert); LegacyServer(srv.Leaf) || RoleOf(srv.Leaf) != ServerCert {
		t.Fatal("a new server certificate does not read as a server's")
	}
	// Serving the bus with it, as a compromised old client in the path would.
	evil := &tls.Config{Certificates: []tls.Certificate{old}, MinVersion: tls.VersionTLS13}
	if _, cerr := handshake(evil, ClientTLS(&cli, ca.Cert)); cerr == nil || !strings.Contains(cerr.Error(), "no server role marker") {
		t.Fatalf("a bus client took an old-style certificate for a server's: %v", cerr)
	}
	if _, err := ServerTLS(old, ca.Cert); err == nil || !strings.Contains(err.Error(), "re-issues") {
		t.Fatalf("ServerTLS with an old-style certificate: %v", err)
	}
	if _, err := RaftTLS(old, ca.Cert); err == nil {
		t.Fatal("RaftTLS took an old-style certificate for a server's")
	}
}
