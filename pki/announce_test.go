package pki

import (
	"crypto/ed25519"
	"strings"
	"testing"
)

// An announcement verifies only against the identity that signed it, and only as signed: a
// changed node, previous key or key, or another identity, fails naming the node.
func TestKeyAnnouncement(t *testing.T) {
	id, err := NewNodeKey()
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewNodeKey()
	if err != nil {
		t.Fatal(err)
	}
	pub := PublicKeyString(id.Public().(ed25519.PublicKey))
	a := AnnounceKey(id, "hub", "OLD=", "NEW=")
	if err := a.Verify(pub); err != nil {
		t.Fatalf("a good announcement: %v", err)
	}
	for what, bad := range map[string]func(a *KeyAnnouncement){
		"node":     func(a *KeyAnnouncement) { a.Node = "hub2" },
		"previous": func(a *KeyAnnouncement) { a.Previous = "" },
		"key":      func(a *KeyAnnouncement) { a.Key = "OTHER=" },
		"sig":      func(a *KeyAnnouncement) { a.Sig = a.Sig[:10] },
		"signer":   func(a *KeyAnnouncement) { *a = *AnnounceKey(other, "hub", "OLD=", "NEW=") },
	} {
		c := *a
		c.Sig = append([]byte{}, a.Sig...)
		bad(&c)
		if err := c.Verify(pub); err == nil || !strings.Contains(err.Error(), "node "+c.Node) {
			t.Errorf("%s changed: %v", what, err)
		}
	}
	if err := a.Verify(""); err == nil || !strings.Contains(err.Error(), "no recorded identity") {
		t.Errorf("no identity: %v", err)
	}
}
