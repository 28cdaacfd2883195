package pki

// A joining machine proves it holds the identity key it enrols: its enrolment request carries
// the key's signature over the request's fields and the time it signed. Anyone can read a node's
// public key (its certificate is shown on its bus port), so a request naming a key proves
// nothing; one signed with it does. A server refuses an enrolment whose signature does not
// verify, or whose time is further than EnrolSkew from its own clock.

import (
	"crypto/ed25519"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// EnrolSkew is how far an enrolment's signing time may be from the server's clock, either way.
// The request travels only inside a TLS session pinned to the mesh CA, so the bound is against a
// body kept and sent again later, and is wide enough for machines whose clocks drift.
const EnrolSkew = 10 * time.Minute

// EnrolClaim is what an enrolment's signature covers: every field of the request that the record
// takes, the token by its hash, and the signing time.
type EnrolClaim struct {
	TokenHash    string
	Node         string
	ID           string
	PublicKey    string
	Advertise    string
	WireGuardKey string
	FoundTunnel  string
	Settings     map[string]string
	Server       bool
	// At is when the machine signed, in Unix seconds.
	At int64
}

// signedBytes is the canonical byte string the signature covers: a domain tag (no other signed
// message of the node can be taken for one), then each field length-prefixed, the settings
// sorted by key.
func (c *EnrolClaim) signedBytes() []byte {
	const tag = "meshd/enrol/v1\x00"
	fields := []string{c.TokenHash, c.Node, c.ID, c.PublicKey, c.Advertise, c.WireGuardKey,
		c.FoundTunnel, strconv.FormatBool(c.Server), strconv.FormatInt(c.At, 10)}
	keys := make([]string, 0, len(c.Settings))
	for k := range c.Settings {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fields = append(fields, k, c.Settings[k])
	}
	b := append([]byte(nil), tag...)
	for _, f := range fields {
		b = binary.BigEndian.AppendUint32(b, uint32(len(f)))
		b = append(b, f...)
	}
	return b
}

// SignEnrolment signs c with the node's identity key.
func SignEnrolment(key ed25519.PrivateKey, c EnrolClaim) []byte {
	return ed25519.Sign(key, c.signedBytes())
}

// VerifyEnrolment checks that sig is c.PublicKey's signature over c, made within EnrolSkew of
// now. The error says what did not hold.
func VerifyEnrolment(c EnrolClaim, sig []byte, now time.Time) error {
	pub, err := ParsePublicKey(c.PublicKey)
	if err != nil {
		return err
	}
	if len(sig) == 0 {
		return fmt.Errorf("the request is not signed with the key it names " +
			"(a meshd join older than this server's?)")
	}
	if len(sig) != ed25519.SignatureSize || !ed25519.Verify(pub, c.signedBytes(), sig) {
		return fmt.Errorf("the request's signature is not the key's it names")
	}
	at := time.Unix(c.At, 0)
	if d := now.Sub(at); d > EnrolSkew || d < -EnrolSkew {
		return fmt.Errorf("the request was signed at %s, more than %s from this server's clock "+
			"(%s): check the joining machine's clock",
			at.UTC().Format(time.RFC3339), EnrolSkew, now.UTC().Format(time.RFC3339))
	}
	return nil
}
