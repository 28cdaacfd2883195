package pki

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// An operator credential is a certificate of the mesh CA issued to a person, not a node: it
// names the operator (meshd://operator/NAME) and carries the operator role marker
// (meshd://role/operator), client auth only and no node URI, so nothing that checks for a node
// or a server ever takes it for one. It lives until its expiry; the record lists each credential
// by its serial and revokes one by name.

// operatorNameRe is what an operator credential may be called: a short label such as ops-laptop.
var operatorNameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// MaxOperatorTTL is the longest an operator credential may live.
const MaxOperatorTTL = 366 * 24 * time.Hour

func operatorRoleURI() *url.URL {
	return &url.URL{Scheme: nodeURIScheme, Host: "role", Path: "/operator"}
}

// CheckOperatorName refuses a name an operator credential cannot have.
func CheckOperatorName(name string) error {
	if !operatorNameRe.MatchString(name) {
		return fmt.Errorf("%q is not an operator credential's name (lower-case letters, digits, '.', '_' and '-', up to 63)", name)
	}
	return nil
}

// IssueOperator issues the operator credential name for key pub, valid from now for ttl.
func (ca *CA) IssueOperator(name string, pub ed25519.PublicKey, now time.Time, ttl time.Duration) ([]byte, error) {
	if err := CheckOperatorName(name); err != nil {
		return nil, err
	}
	if ttl <= 0 || ttl > MaxOperatorTTL {
		return nil, fmt.Errorf("operator credential %s: a lifetime of %s is not between 0 and %s", name, ttl, MaxOperatorTTL)
	}
	notAfter := now.Add(ttl)
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name, Organization: []string{"meshd operator"}},
		URIs:         []*url.URL{{Scheme: nodeURIScheme, Host: "operator", Path: "/" + name}, operatorRoleURI()},
		NotBefore:    now.Add(-5 * time.Minute),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, pub, ca.Key)
	if err != nil {
		return nil, fmt.Errorf("operator credential %s: %w", name, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// IsOperator says cert carries the operator role marker.
func IsOperator(cert *x509.Certificate) bool {
	m := operatorRoleURI()
	for _, u := range cert.URIs {
		if u.Scheme == m.Scheme && u.Host == m.Host && u.Path == m.Path {
			return true
		}
	}
	return false
}

// CredentialID is how the record names one operator certificate: its serial, in hex.
func CredentialID(cert *x509.Certificate) string {
	return hex.EncodeToString(cert.SerialNumber.Bytes())
}

// VerifyOperator checks cert is an operator credential of the mesh CA, valid at now, and returns
// the operator's name. Whether the record still lists it is the caller's to ask.
func VerifyOperator(cert, ca *x509.Certificate, now time.Time) (string, error) {
	if !IsOperator(cert) {
		return "", fmt.Errorf("certificate %q is not an operator credential", cert.Subject.CommonName)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return "", fmt.Errorf("operator credential %q is not the mesh CA's, or expired: %w", cert.Subject.CommonName, err)
	}
	for _, u := range cert.URIs {
		if u.Scheme == nodeURIScheme && u.Host == "node" {
			return "", fmt.Errorf("operator credential %q also names a node", cert.Subject.CommonName)
		}
		if u.Scheme == nodeURIScheme && u.Host == "operator" {
			if n := strings.TrimPrefix(u.Path, "/"); n == cert.Subject.CommonName && CheckOperatorName(n) == nil {
				return n, nil
			}
		}
	}
	return "", fmt.Errorf("operator credential %q names no operator", cert.Subject.CommonName)
}

// Credential is an operator credential as its file holds it: the certificate, its key, the mesh
// CA, and the servers' bus addresses to reach.
type Credential struct {
	Name string
	Cert *x509.Certificate
	Key  ed25519.PrivateKey
	CA   *x509.Certificate
	Bus  []string
}

// credentialBus is the PEM header listing the servers' bus addresses.
const credentialBus = "Meshd-Bus"

// EncodeCredential writes a credential file: the certificate (with the bus addresses in its
// header), the key, then the CA. It is a secret: write it 0600.
func EncodeCredential(certPEM []byte, key ed25519.PrivateKey, caPEM []byte, bus []string) ([]byte, error) {
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, errors.New("operator credential: not a PEM certificate")
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("operator credential key: %w", err)
	}
	var out []byte
	out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Headers: map[string]string{credentialBus: strings.Join(bus, ",")}, Bytes: cb.Bytes})...)
	out = append(out, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb})...)
	return append(out, caPEM...), nil
}

// ParseCredential reads a credential file written by EncodeCredential and checks its parts
// belong together: the key is the certificate's and the CA issued it as an operator credential.
func ParseCredential(b []byte) (*Credential, error) {
	c := &Credential{}
	var blocks []*pem.Block
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		blocks = append(blocks, blk)
	}
	if len(blocks) != 3 || blocks[0].Type != "CERTIFICATE" || blocks[1].Type != "PRIVATE KEY" || blocks[2].Type != "CERTIFICATE" {
		return nil, errors.New("an operator credential file holds a certificate, its private key and the mesh CA, in that order")
	}
	var err error
	if c.Cert, err = x509.ParseCertificate(blocks[0].Bytes); err != nil {
		return nil, fmt.Errorf("operator credential certificate: %w", err)
	}
	k, err := x509.ParsePKCS8PrivateKey(blocks[1].Bytes)
	if err != nil {
		return nil, fmt.Errorf("operator credential key: %w", err)
	}
	key, ok := k.(ed25519.PrivateKey)
	if pub, pok := c.Cert.PublicKey.(ed25519.PublicKey); !ok || !pok || !pub.Equal(key.Public()) {
		return nil, errors.New("the operator credential's key is not its certificate's")
	}
	c.Key = key
	if c.CA, err = x509.ParseCertificate(blocks[2].Bytes); err != nil {
		return nil, fmt.Errorf("operator credential CA: %w", err)
	}
	if c.Name, err = VerifyOperator(c.Cert, c.CA, time.Now()); err != nil {
		return nil, err
	}
	for _, a := range strings.Split(blocks[0].Headers[credentialBus], ",") {
		if a = strings.TrimSpace(a); a != "" {
			c.Bus = append(c.Bus, a)
		}
	}
	return c, nil
}

// TLS is the credential's TLS towards a server's bus: it presents the operator certificate and
// takes only a server certificate of the mesh CA for the answer.
func (c *Credential) TLS() *tls.Config {
	id := tls.Certificate{Certificate: [][]byte{c.Cert.Raw}, PrivateKey: c.Key, Leaf: c.Cert}
	return ClientTLS(&id, c.CA)
}

// CredentialDigest is a short fingerprint of an operator certificate, for listings.
func CredentialDigest(cert *x509.Certificate) string {
	sum := sha256.Sum256(cert.Raw)
	return "sha256:" + hex.EncodeToString(sum[:8])
}
