package fsm

import (
	"strings"
	"testing"
	"time"
)

// A removed node leaves the record, its key is revoked (it cannot enrol again with it, under any
// name) and its address is given to no enrolment before the quarantine ends, then to the next one.
func TestUnitNodeRemoveRevokesAndQuarantines(t *testing.T) {
	r := NewRecord()
	mustApply(t, r, genesisCmd(t, Adopted))
	for _, h := range []string{"t1", "t2", "t3", "t4"} {
		mustApply(t, r, cmd(t, OpTokenCreate, t0, TokenCreate{Hash: h, Mode: Adopted, Expires: t0.Add(24 * time.Hour)}))
	}
	mustApply(t, r, cmd(t, OpNodeEnrol, t0.Add(time.Minute), Enrol{Node: "peer1", ID: "id-p1", TokenHash: "t1", PublicKey: "k1"}))
	addr := r.Nodes["peer1"].Address
	if addr == "" {
		t.Fatal("peer1 got no address")
	}
	until := t0.Add(2*time.Minute + time.Hour)
	v, err := Apply(r, cmd(t, OpNodeRemove, t0.Add(2*time.Minute), NodeRemove{Node: "peer1", Until: until, Leader: "hub"}))
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := v.(*Node); !ok || n.Name != "peer1" {
		t.Fatalf("node.remove answered %#v, want the removed node", v)
	}
	if r.Nodes["peer1"] != nil || !r.IsRevoked("k1") {
		t.Fatalf("after node.remove: in the record %v, key revoked %v", r.Nodes["peer1"] != nil, r.IsRevoked("k1"))
	}
	// The removed key does not come back, under its own name or another.
	if _, err := Apply(r, cmd(t, OpNodeEnrol, t0.Add(3*time.Minute), Enrol{Node: "peer9", ID: "id-p9", TokenHash: "t2", PublicKey: "k1"})); err == nil || !strings.Contains(err.Error(), "revoked") {
		t.Fatalf("enrolling with a removed node's key: %v", err)
	}
	// Within the quarantine a new node gets another address.
	mustApply(t, r, cmd(t, OpNodeEnrol, t0.Add(4*time.Minute), Enrol{Node: "peer2", ID: "id-p2", TokenHash: "t2", PublicKey: "k2"}))
	if got := r.Nodes["peer2"].Address; got == addr {
		t.Fatalf("peer2 got %s, the removed node's address, within its quarantine", got)
	}
	// After it, the address is free again.
	mustApply(t, r, cmd(t, OpNodeEnrol, until.Add(time.Second), Enrol{Node: "peer3", ID: "id-p3", TokenHash: "t3", PublicKey: "k3"}))
	if got := r.Nodes["peer3"].Address; got != addr {
		t.Fatalf("peer3 got %s after the quarantine ended, want the freed %s", got, addr)
	}
}

// node.remove refuses, naming why: an unknown node, the leader itself, the control-node, the last
// server; the record is unchanged by each.
func TestUnitNodeRemoveRefusals(t *testing.T) {
	r := NewRecord()
	mustApply(t, r, genesisCmd(t, Adopted))
	mustApply(t, r, cmd(t, OpTokenCreate, t0, TokenCreate{Hash: "srv", Mode: Adopted, Expires: t0.Add(time.Hour), Server: true}))
	mustApply(t, r, cmd(t, OpNodeEnrol, t0.Add(time.Minute), Enrol{Node: "s2", ID: "id-s2", TokenHash: "srv", Server: true, PublicKey: "ks2", Advertise: "198.51.100.2"}))
	at := t0.Add(2 * time.Minute)
	before := string(marshal(t, r))
	for _, c := range []struct {
		body NodeRemove
		want string
	}{
		{NodeRemove{Node: "nosuch", Until: at, Leader: "hub"}, "no such node"},
		{NodeRemove{Node: "s2", Until: at, Leader: "s2"}, "leads the Raft group"},
		{NodeRemove{Node: "hub", Until: at, Leader: "s2"}, "control-node"},
		{NodeRemove{Node: "s2", Until: at.Add(-time.Hour), Leader: "hub"}, "quarantine"},
	} {
		if _, err := Apply(r, cmd(t, OpNodeRemove, at, c.body)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("node.remove %+v: %v, want a refusal saying %q", c.body, err, c.want)
		}
	}
	if after := string(marshal(t, r)); after != before {
		t.Fatal("a refused node.remove changed the record")
	}
	// The control-node made a client by hand (a record restored from elsewhere): s2 is then the
	// last server and stays.
	r.Nodes["hub"].Server = false
	if _, err := Apply(r, cmd(t, OpNodeRemove, at, NodeRemove{Node: "s2", Until: at, Leader: "hub"})); err == nil || !strings.Contains(err.Error(), "last server") {
		t.Errorf("removing the last server: %v", err)
	}
}

// A lost enrolment answer does not burn the name: the same enrolment again (same token, name and
// key) gets the recorded node back, unchanged; a different key with the spent token is refused.
func TestUnitEnrolAgainWithTheSameKey(t *testing.T) {
	r := NewRecord()
	mustApply(t, r, genesisCmd(t, Adopted))
	mustApply(t, r, cmd(t, OpTokenCreate, t0, TokenCreate{Hash: "t1", Mode: Adopted, Expires: t0.Add(time.Hour)}))
	first, err := Apply(r, cmd(t, OpNodeEnrol, t0.Add(time.Minute), Enrol{Node: "peer1", ID: "id-p1", TokenHash: "t1", PublicKey: "k1"}))
	if err != nil {
		t.Fatal(err)
	}
	before := string(marshal(t, r))
	again, err := Apply(r, cmd(t, OpNodeEnrol, t0.Add(2*time.Minute), Enrol{Node: "peer1", ID: "id-p1", TokenHash: "t1", PublicKey: "k1"}))
	if err != nil {
		t.Fatalf("the same enrolment again: %v", err)
	}
	a, b := first.(*Node), again.(*Node)
	if a.Address != b.Address || a.ID != b.ID || !a.EnrolledAt.Equal(b.EnrolledAt) {
		t.Fatalf("the same enrolment again answered %+v, the first %+v", b, a)
	}
	if string(marshal(t, r)) != before {
		t.Fatal("the same enrolment again changed the record")
	}
	if _, err := Apply(r, cmd(t, OpNodeEnrol, t0.Add(3*time.Minute), Enrol{Node: "peer1", ID: "id-p1", TokenHash: "t1", PublicKey: "other"})); err == nil || !strings.Contains(err.Error(), "already enrolled") {
		t.Fatalf("the spent token with another key: %v", err)
	}
	if _, err := Apply(r, cmd(t, OpNodeEnrol, t0.Add(3*time.Minute), Enrol{Node: "peer2", ID: "id-p2", TokenHash: "t1", PublicKey: "k1"})); err == nil || !strings.Contains(err.Error(), "already used") {
		t.Fatalf("the spent token for another name: %v", err)
	}
}
