package pki

import (
	"bytes"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func newCA(t *testing.T) *CA {
	t.Helper()
	ca, err := NewCA("hub", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func token(t *testing.T, ca *CA, exp time.Time) string {
	t.Helper()
	tok, err := SignToken(ca, TokenPayload{ID: NewTokenID(), Mode: "adopted", Exp: exp.Unix(), Bus: []string{"192.0.2.1:7070"}})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func wantReason(t *testing.T, what string, err error, r TokenReason) {
	t.Helper()
	var te *TokenError
	if !errors.As(err, &te) || te.Reason != r {
		t.Fatalf("%s: got %v, want a token refused as %s", what, err, r)
	}
	if !strings.Contains(err.Error(), string(r)) {
		t.Fatalf("%s: message %q does not say %s", what, err, r)
	}
}

func TestTokenRoundTripAndRefusals(t *testing.T) {
	ca := newCA(t)
	now := time.Now()
	tok := token(t, ca, now.Add(time.Hour))
	p, err := VerifyToken(tok, ca.Cert, now)
	if err != nil {
		t.Fatal(err)
	}
	if p.Mode != "adopted" || p.Bus[0] != "192.0.2.1:7070" || p.CA != Fingerprint(ca.Cert) || p.Expires().Unix() != now.Add(time.Hour).Unix() {
		t.Fatalf("payload = %+v", p)
	}
	if TokenHash(tok) == TokenHash(token(t, ca, now.Add(time.Hour))) {
		t.Fatal("two tokens share a hash")
	}

	// Truncated: at every cut point, never accepted; cuts inside the signature say truncated.
	for _, n := range []int{0, 10, strings.Index(tok, "."), strings.Index(tok, ".") + 1, len(tok) - 20, len(tok) - 1} {
		_, err := VerifyToken(tok[:n], ca.Cert, now)
		if err == nil {
			t.Fatalf("token cut to %d characters accepted", n)
		}
		if n >= strings.Index(tok, ".") {
			wantReason(t, "truncated", err, TokenTruncated)
		}
	}
	// Forged: a signature byte changed; a payload changed under the old signature.
	head, sig, _ := strings.Cut(tok, ".")
	raw, _ := base64.RawURLEncoding.DecodeString(sig)
	raw[5] ^= 0xff
	_, err = VerifyToken(head+"."+base64.RawURLEncoding.EncodeToString(raw), ca.Cert, now)
	wantReason(t, "signature changed", err, TokenForged)
	p2 := *p
	p2.Mode = "converged"
	other, _ := SignToken(newCA(t), p2) // signed by another key, claiming this CA
	oh, _, _ := strings.Cut(other, ".")
	_, err = VerifyToken(oh+"."+sig, ca.Cert, now)
	wantReason(t, "payload changed", err, TokenForged)
	// Expired.
	_, err = VerifyToken(token(t, ca, now.Add(-time.Second)), ca.Cert, now)
	wantReason(t, "expired", err, TokenExpired)
	// Another mesh's token.
	_, err = VerifyToken(token(t, newCA(t), now.Add(time.Hour)), ca.Cert, now)
	wantReason(t, "wrong CA", err, TokenWrongCA)
	// Malformed.
	_, err = VerifyToken("not a token.at all", ca.Cert, now)
	wantReason(t, "garbage", err, TokenMalformed)
}

func TestNodeCertificate(t *testing.T) {
	ca := newCA(t)
	key, _ := NewNodeKey()
	pemb, err := ca.IssueNode("edge-1", key.Public().(ed25519Pub), ServerCert, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := ParseCert(pemb)
	for _, use := range []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth} {
		if n, err := VerifyNode(cert, ca.Cert, use, time.Now()); err != nil || n != "edge-1" {
			t.Fatalf("verify %v: %q %v", use, n, err)
		}
	}
	// A client node's certificate is for client auth only.
	cpem, _ := ca.IssueNode("edge-2", key.Public().(ed25519Pub), ClientCert, time.Now())
	ccert, _ := ParseCert(cpem)
	if RoleOf(ccert) != ClientCert || RoleOf(cert) != ServerCert {
		t.Fatalf("roles: client cert reads %s, server cert reads %s", RoleOf(ccert), RoleOf(cert))
	}
	if _, err := VerifyNode(ccert, ca.Cert, x509.ExtKeyUsageServerAuth, time.Now()); err == nil {
		t.Fatal("a client node's certificate verified for server auth")
	}
	if cert.Subject.CommonName != "edge-1" || cert.DNSNames[0] != "edge-1.node.meshd" {
		t.Fatalf("names: %s %v", cert.Subject.CommonName, cert.DNSNames)
	}
	if _, err := VerifyNode(cert, newCA(t).Cert, x509.ExtKeyUsageClientAuth, time.Now()); err == nil {
		t.Fatal("a certificate verified against another CA")
	}
	if _, err := Identity(pemb, ca.CertPEM, key); err != nil {
		t.Fatal(err)
	}
	other, _ := NewNodeKey()
	if _, err := Identity(pemb, ca.CertPEM, other); err == nil {
		t.Fatal("identity accepted a certificate for another key")
	}
}

func TestSealAndRecovery(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	keyFile := filepath.Join(dir, "etc", "seal.key")
	k := NewSealKey(keyFile)
	if err := k.Write(); err != nil {
		t.Fatal(err)
	}
	ca := newCA(t)
	nodeKey, _ := NewNodeKey()
	cert, _ := ca.IssueNode("hub", nodeKey.Public().(ed25519Pub), ServerCert, time.Now())
	s := &NodeSecrets{NodeKey: nodeKey, NodeCertPEM: cert, CACertPEM: ca.CertPEM, Keyring: NewKeyring(), CA: ca}
	if err := WriteNodeSecrets(data, k, s); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{CAKeyFile, NodeKeyFile, GossipKeyFile, CACertFile, NodeCertFile} {
		st, err := os.Stat(Path(data, f))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v", f, st, err)
		}
	}
	raw, _ := os.ReadFile(Path(data, CAKeyFile))
	if bytes.Contains(raw, []byte("PRIVATE KEY")) || bytes.Contains(raw, ca.Key) || !bytes.HasPrefix(raw, sealMagic) {
		t.Fatal("the CA key is not sealed on disk")
	}
	got, err := OpenNodeSecrets(data, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if !got.CA.Key.Equal(ca.Key) || !got.NodeKey.Equal(nodeKey) || !bytes.Equal(got.Keyring.Keys[0], s.Keyring.Keys[0]) {
		t.Fatal("unsealed secrets differ")
	}
	// A sealed file is bound to its purpose.
	if _, err := k.Open(purposeNodeKey, raw); err == nil {
		t.Fatal("the CA key opened as the node key")
	}

	// Wrong key: refused naming the key file and the recovery command.
	code := k.RecoveryCode()
	if err := NewSealKey(keyFile).Write(); err != nil {
		t.Fatal(err)
	}
	_, err = OpenNodeSecrets(data, keyFile)
	var se *SealError
	if !errors.As(err, &se) || !errors.Is(err, ErrWrongSealKey) || !strings.Contains(err.Error(), keyFile) || !strings.Contains(err.Error(), "seal-key restore") {
		t.Fatalf("wrong seal key: %v", err)
	}
	// Missing key: likewise.
	os.Remove(keyFile)
	if _, err := OpenNodeSecrets(data, keyFile); !errors.As(err, &se) || !strings.Contains(err.Error(), "recovery code") {
		t.Fatalf("missing seal key: %v", err)
	}
	// A mistyped or foreign code is refused; the right one restores the key.
	bad := []byte(code)
	if bad[10] == 'A' {
		bad[10] = 'B'
	} else {
		bad[10] = 'A'
	}
	if err := RestoreSealKey(string(bad), keyFile, data); err == nil {
		t.Fatal("a mistyped recovery code was taken")
	}
	if err := RestoreSealKey(NewSealKey("").RecoveryCode(), keyFile, data); err == nil || !strings.Contains(err.Error(), "not the one") {
		t.Fatalf("a foreign recovery code: %v", err)
	}
	if err := RestoreSealKey(strings.ToLower(code), keyFile, data); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Stat(keyFile); st.Mode().Perm() != 0o600 {
		t.Fatalf("restored key file mode %v", st.Mode())
	}
	if _, err := OpenNodeSecrets(data, keyFile); err != nil {
		t.Fatalf("after restore: %v", err)
	}
	// A keyring rotation is written sealed and read back.
	ring := Keyring{Keys: [][]byte{NewKeyring().Keys[0], s.Keyring.Keys[0]}}
	if err := WriteKeyring(data, keyFile, ring); err != nil {
		t.Fatal(err)
	}
	if got, err := OpenNodeSecrets(data, keyFile); err != nil || len(got.Keyring.Keys) != 2 || !bytes.Equal(got.Keyring.Keys[0], ring.Keys[0]) {
		t.Fatalf("rotated keyring: %v", err)
	}
}

type ed25519Pub = ed25519.PublicKey
