package pki

import (
	"crypto/ed25519"
	"strings"
	"testing"
	"time"
)

// An enrolment's signature holds only for the key it names, over the fields as signed, within
// EnrolSkew of the server's clock.
func TestEnrolmentProof(t *testing.T) {
	key, _ := NewNodeKey()
	other, _ := NewNodeKey()
	now := time.Now()
	c := EnrolClaim{TokenHash: "h", Node: "edge", ID: "id", PublicKey: PublicKeyString(key.Public().(ed25519.PublicKey)),
		Settings: map[string]string{"mesh.bus": "1", "mesh.gossip": "2"}, At: now.Unix()}
	sig := SignEnrolment(key, c)
	if err := VerifyEnrolment(c, sig, now); err != nil {
		t.Fatal(err)
	}
	changed := c
	changed.Server = true
	stale := c
	stale.At = now.Add(-EnrolSkew - time.Minute).Unix()
	for _, tc := range []struct {
		name string
		c    EnrolClaim
		sig  []byte
		says string
	}{
		{"unsigned", c, nil, "not signed"},
		{"another key's", c, SignEnrolment(other, c), "not the key's"},
		{"a field changed", changed, sig, "not the key's"},
		{"signed too long ago", stale, SignEnrolment(key, stale), "check the joining machine's clock"},
	} {
		if err := VerifyEnrolment(tc.c, tc.sig, now); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.says)
		}
	}
}
