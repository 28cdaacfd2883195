package pki

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// TokenVersion is the token payload's version.
const TokenVersion = 1

// TokenPayload is what an enrolment token says. Everything in it is public: the token's secret is
// the CA's signature over it, and single use is the record's (it keeps the token's hash).
type TokenPayload struct {
	V  int    `json:"v"`
	ID string `json:"id"`
	// Mode is the joining node's mode: "adopted" or "converged".
	Mode string `json:"mode"`
	// Exp is when the token expires, in Unix seconds.
	Exp int64 `json:"exp"`
	// Bus lists the servers' bus addresses, host:port.
	Bus []string `json:"bus"`
	// CA is the mesh CA certificate's fingerprint (Fingerprint), so a joining node trusts only
	// that mesh's servers.
	CA string `json:"ca"`
	// Range is the private network's range, so a joining machine's preflight can check that no
	// tunnel on it overlaps the mesh's; empty in tokens made before it was carried.
	Range string `json:"range,omitempty"`
	// Server says the token enrols a server: the joining machine runs Raft and holds the CA key.
	Server bool `json:"server,omitempty"`
}

// Expires is Exp as a time.
func (p *TokenPayload) Expires() time.Time { return time.Unix(p.Exp, 0).UTC() }

// TokenReason says why a token is refused.
type TokenReason string

// The reasons a token is refused.
const (
	TokenTruncated TokenReason = "truncated"
	TokenMalformed TokenReason = "malformed"
	TokenForged    TokenReason = "forged"
	TokenExpired   TokenReason = "expired"
	TokenWrongCA   TokenReason = "wrong mesh"
)

// TokenError is a refused token, with the reason and what was seen.
type TokenError struct {
	Reason TokenReason
	Detail string
}

func (e *TokenError) Error() string { return "the token is " + string(e.Reason) + ": " + e.Detail }

func tokenErr(r TokenReason, format string, args ...any) *TokenError {
	return &TokenError{Reason: r, Detail: fmt.Sprintf(format, args...)}
}

// NewTokenID returns a token's random ID.
func NewTokenID() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// SignToken signs a payload with the CA key.
func SignToken(ca *CA, p TokenPayload) (string, error) {
	if p.V == 0 {
		p.V = TokenVersion
	}
	if p.CA == "" {
		p.CA = Fingerprint(ca.Cert)
	}
	b, err := json.Marshal(p)
	if err != nil {
		return "", err
	}
	head := base64.RawURLEncoding.EncodeToString(b)
	sig := ed25519.Sign(ca.Key, []byte(head))
	return head + "." + base64.RawURLEncoding.EncodeToString(sig), nil
}

// TokenHash is what the record keeps of a token: the hex SHA-256 of its text.
func TokenHash(token string) string {
	sum := sha256.Sum256([]byte(strings.TrimSpace(token)))
	return hex.EncodeToString(sum[:])
}

// ParseToken checks a token's form and reads its payload, without the CA: a joining node does this
// before it reaches any server. It tells a truncated token (a part or part of the signature
// missing) from a malformed one.
func ParseToken(token string) (*TokenPayload, []byte, error) {
	token = strings.TrimSpace(token)
	if token == "" {
		return nil, nil, tokenErr(TokenTruncated, "it is empty")
	}
	head, sigPart, ok := strings.Cut(token, ".")
	if !ok {
		return nil, nil, tokenErr(TokenTruncated, "it has no signature part (no '.' after the payload)")
	}
	if strings.Contains(sigPart, ".") {
		return nil, nil, tokenErr(TokenMalformed, "it has more than two parts")
	}
	raw, err := base64.RawURLEncoding.DecodeString(head)
	if err != nil {
		return nil, nil, tokenErr(TokenMalformed, "its payload is not base64url: %v", err)
	}
	var p TokenPayload
	if err := json.Unmarshal(raw, &p); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) && int(se.Offset) >= len(raw) || strings.Contains(err.Error(), "unexpected end") {
			return nil, nil, tokenErr(TokenTruncated, "its payload ends part way")
		}
		return nil, nil, tokenErr(TokenMalformed, "its payload is not a token's: %v", err)
	}
	sig, err := base64.RawURLEncoding.DecodeString(sigPart)
	if err != nil {
		// A cut in the middle of a base64 quantum leaves one character over.
		if len(sigPart)%4 == 1 {
			return nil, nil, tokenErr(TokenTruncated, "its signature is cut short (%d characters)", len(sigPart))
		}
		return nil, nil, tokenErr(TokenMalformed, "its signature is not base64url: %v", err)
	}
	if len(sig) < ed25519.SignatureSize {
		return nil, nil, tokenErr(TokenTruncated, "its signature is %d bytes, want %d", len(sig), ed25519.SignatureSize)
	}
	if len(sig) > ed25519.SignatureSize {
		return nil, nil, tokenErr(TokenMalformed, "its signature is %d bytes, want %d", len(sig), ed25519.SignatureSize)
	}
	switch {
	case p.V != TokenVersion:
		return nil, nil, tokenErr(TokenMalformed, "version %d is not %d", p.V, TokenVersion)
	case p.ID == "" || p.Exp == 0 || p.CA == "":
		return nil, nil, tokenErr(TokenMalformed, "it lacks its id, expiry or CA fingerprint")
	case p.Mode != "adopted" && p.Mode != "converged":
		return nil, nil, tokenErr(TokenMalformed, "mode %q is not adopted or converged", p.Mode)
	case len(p.Bus) == 0:
		return nil, nil, tokenErr(TokenMalformed, "it names no bus address")
	}
	return &p, sig, nil
}

// CheckExpiry refuses a payload whose expiry has passed at now.
func CheckExpiry(p *TokenPayload, now time.Time) error {
	if !now.Before(p.Expires()) {
		return tokenErr(TokenExpired, "it expired at %s", p.Expires().Format(time.RFC3339))
	}
	return nil
}

// VerifyToken checks a token fully against the mesh CA: its form, that it names this CA, the CA's
// signature, and its expiry at now.
func VerifyToken(token string, ca *x509.Certificate, now time.Time) (*TokenPayload, error) {
	p, sig, err := ParseToken(token)
	if err != nil {
		return nil, err
	}
	if fp := Fingerprint(ca); p.CA != fp {
		return nil, tokenErr(TokenWrongCA, "it was made for the mesh whose CA is %s, not this one's (%s)", p.CA, fp)
	}
	pub, ok := ca.PublicKey.(ed25519.PublicKey)
	if !ok {
		return nil, errors.New("the mesh CA's key is not ed25519")
	}
	head, _, _ := strings.Cut(strings.TrimSpace(token), ".")
	if !ed25519.Verify(pub, []byte(head), sig) {
		return nil, tokenErr(TokenForged, "its signature is not the mesh CA's")
	}
	if err := CheckExpiry(p, now); err != nil {
		return nil, err
	}
	return p, nil
}
