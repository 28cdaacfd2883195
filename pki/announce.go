package pki

// A node's overlay key (its WireGuard public key) is recorded beside its identity. When the key
// moves on a running mesh — a hub that enrolled before takes the found tunnel's key over (ADR
// 0105) — the node says so in a KeyAnnouncement signed with its identity key, and the record
// moves the key only if the signature verifies against the identity the record holds for the
// node: a forged announcement (unsigned, signed by another node, or with a key changed after it
// was signed) moves nothing (invariant 8).

import (
	"crypto/ed25519"
	"encoding/binary"
	"fmt"
)

// KeyAnnouncement is a node's signed word that its overlay key moves from Previous to Key.
// Previous pins the key the record holds when the node signs, so an old announcement replayed
// later moves nothing once the key has moved on.
type KeyAnnouncement struct {
	Node string `json:"node"`
	// Previous is the overlay key the record held for the node when it signed ("" for none).
	Previous string `json:"previous,omitempty"`
	// Key is the new overlay key (a WireGuard public key, base64).
	Key string `json:"key"`
	// Sig is the ed25519 signature of the node's identity key over signedBytes.
	Sig []byte `json:"sig"`
}

// signedBytes is the canonical byte string an announcement's signature covers: a domain tag (so
// no other signed message of the node can be taken for one), then node, previous and key, each
// length-prefixed.
func (a *KeyAnnouncement) signedBytes() []byte {
	const tag = "meshd/overlay-key/v1\x00"
	b := make([]byte, 0, len(tag)+12+len(a.Node)+len(a.Previous)+len(a.Key))
	b = append(b, tag...)
	for _, f := range []string{a.Node, a.Previous, a.Key} {
		b = binary.BigEndian.AppendUint32(b, uint32(len(f)))
		b = append(b, f...)
	}
	return b
}

// AnnounceKey is node's announcement, signed with its identity key id, that its overlay key moves
// from previous to key.
func AnnounceKey(id ed25519.PrivateKey, node, previous, key string) *KeyAnnouncement {
	a := &KeyAnnouncement{Node: node, Previous: previous, Key: key}
	a.Sig = ed25519.Sign(id, a.signedBytes())
	return a
}

// Verify checks that identity (the node's recorded ed25519 public key, base64 as the record
// keeps it) signed a. The error names the node and says what did not hold.
func (a *KeyAnnouncement) Verify(identity string) error {
	if identity == "" {
		return fmt.Errorf("node %s has no recorded identity to check the announcement of overlay key %s against", a.Node, a.Key)
	}
	pub, err := ParsePublicKey(identity)
	if err != nil {
		return fmt.Errorf("node %s's recorded identity: %w", a.Node, err)
	}
	if len(a.Sig) != ed25519.SignatureSize || !ed25519.Verify(pub, a.signedBytes(), a.Sig) {
		return fmt.Errorf("the announcement of overlay key %s is not signed by node %s's identity", a.Key, a.Node)
	}
	return nil
}
