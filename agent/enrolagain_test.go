package agent

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"meshd/api"
	"meshd/fsm"
	"meshd/pki"
	"meshd/setup"
)

// Issue 14: a lost enrolment answer burned the name. The same enrolment sent again (same token,
// name and key) gets the same answer, the same address and the very same certificate, and the
// record holds the node once; the spent token with another key is still refused.
func TestEnrolAgainWithTheSameKeyGetsTheSameAnswer(t *testing.T) {
	ts := startTestServer(t)
	ts.startBus(t)
	tok, err := pki.SignToken(ts.ca, pki.TokenPayload{ID: pki.NewTokenID(), Mode: string(fsm.Adopted), Exp: time.Now().Add(time.Hour).Unix(), Bus: []string{ts.busAddr}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := propose(ts.s.rec, fsm.OpTokenCreate, fsm.TokenCreate{Hash: pki.TokenHash(tok), Mode: fsm.Adopted, Expires: time.Now().Add(time.Hour).UTC()}); err != nil {
		t.Fatal(err)
	}
	enrol := func(key ed25519.PrivateKey) (*api.EnrolResponse, error) {
		in := api.EnrolRequest{Token: tok, Node: "edge", ID: "edge-id", Advertise: "127.0.0.3"}
		setup.SignEnrolment(&in, key, time.Now())
		body, _ := json.Marshal(in)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return setup.EnrolOnce(ctx, ts.busAddr, tok, pki.Fingerprint(ts.ca.Cert), body)
	}
	key, _ := pki.NewNodeKey()
	first, err := enrol(key)
	if err != nil {
		t.Fatal(err)
	}
	again, err := enrol(key)
	if err != nil {
		t.Fatalf("the same enrolment again: %v", err)
	}
	if again.CertPEM != first.CertPEM || again.Node.Address != first.Node.Address || again.Node.ID != first.Node.ID {
		t.Fatalf("the same enrolment again answered address %s id %s (cert equal %v); the first: address %s id %s",
			again.Node.Address, again.Node.ID, again.CertPEM == first.CertPEM, first.Node.Address, first.Node.ID)
	}
	if _, err := pki.Identity([]byte(again.CertPEM), []byte(again.CACertPEM), key); err != nil {
		t.Fatalf("the answer's certificate is not for the node's key: %v", err)
	}
	n := 0
	ts.s.rec.Read(func(r *fsm.Record, _ uint64) {
		for _, node := range r.Nodes {
			if node.Name == "edge" {
				n++
			}
		}
	})
	if n != 1 {
		t.Fatalf("the record holds edge %d times", n)
	}
	other, _ := pki.NewNodeKey()
	_, err = enrol(other)
	var je *setup.JoinError
	if !errors.As(err, &je) || !strings.Contains(err.Error(), "already enrolled") {
		t.Fatalf("the spent token with another key: %v", err)
	}
}
