package pki

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"strings"
	"time"
)

// CAValidity is how long the mesh CA is valid; node certificates live as long (no renewal yet).
const CAValidity = 20 * 365 * 24 * time.Hour

// nodeURIScheme names a node in its certificate's URI SAN: meshd://node/NAME.
const nodeURIScheme = "meshd"

// CA is the mesh's certificate authority: a self-signed ed25519 certificate and its key.
type CA struct {
	Cert *x509.Certificate
	// CertPEM is Cert as PEM, what every node keeps to verify the others.
	CertPEM []byte
	Key     ed25519.PrivateKey
}

// NewCA makes a new mesh CA named for the mesh's control-node.
func NewCA(controlNode string, now time.Time) (*CA, error) {
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("mesh CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "meshd CA (" + controlNode + ")", Organization: []string{"meshd"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(CAValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		return nil, fmt.Errorf("mesh CA certificate: %w", err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &CA{Cert: cert, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), Key: key}, nil
}

// LoadCA puts a CA back together from its certificate and its (unsealed) key, refusing a key that
// is not the certificate's.
func LoadCA(certPEM []byte, key ed25519.PrivateKey) (*CA, error) {
	cert, err := ParseCert(certPEM)
	if err != nil {
		return nil, fmt.Errorf("mesh CA certificate: %w", err)
	}
	pub, ok := cert.PublicKey.(ed25519.PublicKey)
	if !ok || len(key) != ed25519.PrivateKeySize || !pub.Equal(key.Public()) {
		return nil, errors.New("the mesh CA key is not the CA certificate's key")
	}
	return &CA{Cert: cert, CertPEM: certPEM, Key: key}, nil
}

// ParseCert reads one PEM certificate.
func ParseCert(certPEM []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(certPEM)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, errors.New("not a PEM certificate")
	}
	return x509.ParseCertificate(b.Bytes)
}

// Fingerprint is a certificate's SHA-256 as "sha256:HEX", how a token pins the CA.
func Fingerprint(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.Raw)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// NewNodeKey makes a node's identity key.
func NewNodeKey() (ed25519.PrivateKey, error) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("node identity key: %w", err)
	}
	return key, nil
}

// PublicKeyString is how the record keeps a node's public key (fsm.Node.PublicKey): base64, std
// encoding.
func PublicKeyString(pub ed25519.PublicKey) string { return base64.StdEncoding.EncodeToString(pub) }

// ParsePublicKey reads a key written by PublicKeyString.
func ParsePublicKey(s string) (ed25519.PublicKey, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("public key %q is not a base64 ed25519 public key", s)
	}
	return ed25519.PublicKey(b), nil
}

// NodeDNSName is the DNS SAN a node's certificate carries.
func NodeDNSName(node string) string { return node + ".node.meshd" }

// CertRole is what a node certificate may do. A server's certificate carries both TLS usages: it
// serves the bus and Raft, and calls other servers' Raft and the nodes' buses. A client's carries
// client auth only, so a client node (or whoever steals its key) can never pass for a server:
// Raft refuses it and clients refuse it as a bus (invariant 12).
type CertRole int

const (
	// ClientCert is a client node's certificate: TLS client auth only.
	ClientCert CertRole = iota
	// ServerCert is a server node's certificate: TLS server and client auth.
	ServerCert
)

func (r CertRole) String() string {
	if r == ServerCert {
		return "server"
	}
	return "client"
}

// IssueNode issues node's certificate for its identity key in the given role, its CN the node's
// name, its SANs meshd://node/NAME and NAME.node.meshd. The same node, key, role and time give the
// same certificate, byte for byte (its serial is derived from them and ed25519 signs
// deterministically): an enrolment answered again, from the record's enrolment time, is the
// answer that was lost.
func (ca *CA) IssueNode(node string, pub ed25519.PublicKey, role CertRole, now time.Time) ([]byte, error) {
	if len(pub) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("node %s: public key is %d bytes, want ed25519 (%d)", node, len(pub), ed25519.PublicKeySize)
	}
	usages := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if role == ServerCert {
		usages = append(usages, x509.ExtKeyUsageServerAuth)
	}
	uris := []*url.URL{{Scheme: nodeURIScheme, Host: "node", Path: "/" + node}}
	if role == ServerCert {
		uris = append(uris, serverRoleURI())
	}
	tmpl := &x509.Certificate{
		SerialNumber: nodeSerial(node, pub, role, now),
		Subject:      pkix.Name{CommonName: node, Organization: []string{"meshd"}},
		DNSNames:     []string{NodeDNSName(node)},
		URIs:         uris,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     ca.Cert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usages,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("node %s certificate: %w", node, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// serverRoleURI is the marker a server's certificate carries beside the server-auth usage: the
// URI SAN meshd://role/server. Certificates issued before servers and clients differed gave every
// node server auth; only the marker tells a server's from such a client's.
func serverRoleURI() *url.URL { return &url.URL{Scheme: nodeURIScheme, Host: "role", Path: "/server"} }

// RoleOf is the role a node certificate was issued for: a server's carries the server-auth usage
// and the server role marker; anything else is a client's (LegacyServer says whether it is an
// old certificate with the usage and no marker).
func RoleOf(cert *x509.Certificate) CertRole {
	if hasServerAuth(cert) && hasServerMarker(cert) {
		return ServerCert
	}
	return ClientCert
}

// LegacyServer says cert carries server auth without the server role marker: issued before the
// marker, to a server or to a client alike. It serves as nothing until re-issued.
func LegacyServer(cert *x509.Certificate) bool { return hasServerAuth(cert) && !hasServerMarker(cert) }

func hasServerAuth(cert *x509.Certificate) bool {
	for _, u := range cert.ExtKeyUsage {
		if u == x509.ExtKeyUsageServerAuth {
			return true
		}
	}
	return false
}

func hasServerMarker(cert *x509.Certificate) bool {
	m := serverRoleURI()
	for _, u := range cert.URIs {
		if u.Scheme == m.Scheme && u.Host == m.Host && u.Path == m.Path {
			return true
		}
	}
	return false
}

// NodeName returns the node a certificate names (its meshd://node/ URI SAN).
func NodeName(cert *x509.Certificate) (string, error) {
	for _, u := range cert.URIs {
		if u.Scheme == nodeURIScheme && u.Host == "node" {
			if n := strings.TrimPrefix(u.Path, "/"); n != "" {
				return n, nil
			}
		}
	}
	return "", fmt.Errorf("certificate %q names no meshd node", cert.Subject.CommonName)
}

// VerifyNode checks that cert was issued by the mesh CA for the given use and returns the node it
// names.
func VerifyNode(cert *x509.Certificate, ca *x509.Certificate, usage x509.ExtKeyUsage, now time.Time) (string, error) {
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return "", fmt.Errorf("certificate %q is not the mesh CA's: %w", cert.Subject.CommonName, err)
	}
	return NodeName(cert)
}

// Identity is a node's TLS identity: its certificate (and the CA's, sent along so a joining node
// can pin the CA by fingerprint) with its key.
func Identity(nodeCertPEM, caCertPEM []byte, key ed25519.PrivateKey) (tls.Certificate, error) {
	leaf, err := ParseCert(nodeCertPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("node certificate: %w", err)
	}
	if pub, ok := leaf.PublicKey.(ed25519.PublicKey); !ok || !pub.Equal(key.Public()) {
		return tls.Certificate{}, fmt.Errorf("node certificate %q is not for this node's key", leaf.Subject.CommonName)
	}
	ca, err := ParseCert(caCertPEM)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("CA certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{leaf.Raw, ca.Raw}, PrivateKey: key, Leaf: leaf}, nil
}

// ServerTLS is the servers' bus: the server's own certificate, which must be a server
// certificate; a client certificate is asked for and, when given, must be the mesh CA's
// (enrolment comes without one).
func ServerTLS(id tls.Certificate, ca *x509.Certificate) (*tls.Config, error) {
	if err := ownServerCert(id); err != nil {
		return nil, fmt.Errorf("serve the bus: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &tls.Config{Certificates: []tls.Certificate{id}, ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: pool, MinVersion: tls.VersionTLS13}, nil
}

// PeerServerTLS is a client node's own bus (the few routes other nodes ask of it): it serves with
// the node's certificate, whatever its role, and asks for the caller's, from the mesh CA.
func PeerServerTLS(id tls.Certificate, ca *x509.Certificate) *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &tls.Config{Certificates: []tls.Certificate{id}, ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: pool, MinVersion: tls.VersionTLS13}
}

// ClientTLS is a node's TLS towards the servers' bus: its own certificate, and the server's
// verified against the mesh CA (by the CA, not by host name: servers are reached by address) as
// a server certificate, so a client node in the path cannot answer as a server.
func ClientTLS(id *tls.Certificate, ca *x509.Certificate) *tls.Config {
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the server sent no certificate")
			}
			_, err := verifyServer(cs.PeerCertificates[0], ca)
			return err
		}}
	if id != nil {
		cfg.Certificates = []tls.Certificate{*id}
	}
	return cfg
}

// PeerTLS is a node's TLS towards one named node's bus (a server's or a client's): the answer
// must come with that node's certificate from the mesh CA, for the key pub the caller knows it by.
func PeerTLS(id *tls.Certificate, ca *x509.Certificate, node string, pub ed25519.PublicKey) *tls.Config {
	cfg := &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return fmt.Errorf("node %s sent no certificate", node)
			}
			cert := cs.PeerCertificates[0]
			name, err := VerifyNode(cert, ca, x509.ExtKeyUsageClientAuth, time.Now())
			if err != nil {
				return err
			}
			if key, ok := cert.PublicKey.(ed25519.PublicKey); name != node || !ok || !key.Equal(pub) {
				return fmt.Errorf("the bus answered with node %s's certificate, not node %s's with the key the mesh knows", name, node)
			}
			return nil
		}}
	if id != nil {
		cfg.Certificates = []tls.Certificate{*id}
	}
	return cfg
}

// RaftTLS is both ends of a Raft connection between servers: each side presents its own server
// certificate and accepts only a server certificate from the mesh CA. No certificate, another
// CA's, or a client node's is refused in the handshake, before a byte of Raft is read.
func RaftTLS(id tls.Certificate, ca *x509.Certificate) (*tls.Config, error) {
	if err := ownServerCert(id); err != nil {
		return nil, fmt.Errorf("raft: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{id}, MinVersion: tls.VersionTLS13,
		// The handshake's own checks are replaced by VerifyConnection, the same on either end:
		// ClientAuth only makes the listening end ask for the certificate, InsecureSkipVerify only
		// stops the dialling end checking a host name (servers are reached by address).
		ClientAuth: tls.RequireAnyClientCert, InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("raft peer sent no certificate")
			}
			_, err := verifyServer(cs.PeerCertificates[0], ca)
			return err
		}}, nil
}

// verifyServer checks cert is a server certificate of the mesh CA and returns the node it names.
// Every end that takes an answer for a server's (a bus client, Raft, a joining node) asks this.
func verifyServer(cert *x509.Certificate, ca *x509.Certificate) (string, error) {
	name, err := VerifyNode(cert, ca, x509.ExtKeyUsageClientAuth, time.Now())
	if err != nil {
		return "", err
	}
	if LegacyServer(cert) {
		return "", fmt.Errorf("certificate of node %s carries server auth but no server role marker (issued before servers and clients differed): not accepted as a server's", name)
	}
	if RoleOf(cert) != ServerCert {
		return "", fmt.Errorf("certificate of node %s is a client node's, not a server's", name)
	}
	return name, nil
}

func ownServerCert(id tls.Certificate) error {
	if id.Leaf == nil {
		return errors.New("the node's certificate is not loaded")
	}
	if LegacyServer(id.Leaf) {
		return fmt.Errorf("certificate of node %s has no server role marker (issued before servers and clients differed): a server re-issues its own at its agent's start; a client re-enrols", id.Leaf.Subject.CommonName)
	}
	if RoleOf(id.Leaf) != ServerCert {
		return fmt.Errorf("certificate of node %s is a client node's: only a server's may serve", id.Leaf.Subject.CommonName)
	}
	return nil
}

// PinnedTLS is a joining node's TLS: it has no CA yet, only the token's fingerprint of it. The
// server must present a chain holding a CA with that fingerprint that issued its certificate, a
// server's certificate as every other end checks one (a client's, or one issued before the
// server role marker, is refused); found is set to that CA.
func PinnedTLS(fingerprint string, found **x509.Certificate) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the server sent no certificate")
			}
			for _, c := range cs.PeerCertificates[1:] {
				if Fingerprint(c) == fingerprint {
					if _, err := verifyServer(cs.PeerCertificates[0], c); err != nil {
						return err
					}
					*found = c
					return nil
				}
			}
			return fmt.Errorf("the server is not of the mesh the token names: it presents no CA with fingerprint %s", fingerprint)
		}}
}

// nodeSerial is a node certificate's serial: 127 bits of a hash of what the certificate says.
func nodeSerial(node string, pub ed25519.PublicKey, role CertRole, now time.Time) *big.Int {
	h := sha256.New()
	fmt.Fprintf(h, "meshd node certificate\x00%s\x00%d\x00%d\x00", node, role, now.UnixNano())
	h.Write(pub)
	sum := h.Sum(nil)
	sum[0] &= 0x7f
	return new(big.Int).SetBytes(sum[:16])
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err)
	}
	return n
}
