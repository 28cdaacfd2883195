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

// Issue 26, finding 11: a joining node pins the mesh CA by the token's fingerprint and must take
// only a server's certificate for the server's answer. An old-style certificate (server auth, no
// role marker), held by a client enrolled before servers and clients differed, is refused at the
// handshake; a server's own is taken and yields the CA.
func TestPinnedTLSRefusesACertificateWithoutTheServerMarker(t *testing.T) {
	ca := newCA(t)
	fp := Fingerprint(ca.Cert)
	old := oldStyle(t, ca, "edge")
	var found *x509.Certificate
	evil := &tls.Config{Certificates: []tls.Certificate{old}, MinVersion: tls.VersionTLS13}
	if _, cerr := handshake(evil, PinnedTLS(fp, &found)); cerr == nil || !strings.Contains(cerr.Error(), "no server role marker") {
		t.Fatalf("a joining node took an old-style certificate for the server's: %v", cerr)
	}
	if found != nil {
		t.Fatal("the refused handshake still handed over a CA")
	}
	srv := identity(t, ca, "hub", ServerCert)
	good := &tls.Config{Certificates: []tls.Certificate{srv}, MinVersion: tls.VersionTLS13}
	if _, cerr := handshake(good, PinnedTLS(fp, &found)); cerr != nil {
		t.Fatalf("a joining node refused the server's own certificate: %v", cerr)
	}
	if found == nil || !found.Equal(ca.Cert) {
		t.Fatal("the server's handshake did not yield the pinned CA")
	}
}
