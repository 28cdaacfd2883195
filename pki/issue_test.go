package pki

import (
	"bytes"
	"crypto/ed25519"
	"testing"
	"time"
)

// The same node, key, role and time give the same certificate byte for byte (an enrolment answered
// again is the lost answer); another time or role gives another.
func TestIssueNodeIsDeterministic(t *testing.T) {
	ca, err := NewCA("mesh", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pub, _, _ := ed25519.GenerateKey(nil)
	at := time.Date(2026, 12, 1, 8, 0, 0, 123, time.UTC)
	a, err := ca.IssueNode("edge", pub, ClientCert, at)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := ca.IssueNode("edge", pub, ClientCert, at)
	if !bytes.Equal(a, b) {
		t.Fatal("the same enrolment issued two different certificates")
	}
	for _, c := range [][]byte{mustIssue(t, ca, "edge", pub, ClientCert, at.Add(time.Nanosecond)), mustIssue(t, ca, "edge", pub, ServerCert, at)} {
		if bytes.Equal(a, c) {
			t.Fatal("another time or role issued the same certificate")
		}
	}
}

func mustIssue(t *testing.T, ca *CA, node string, pub ed25519.PublicKey, role CertRole, at time.Time) []byte {
	t.Helper()
	c, err := ca.IssueNode(node, pub, role, at)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
