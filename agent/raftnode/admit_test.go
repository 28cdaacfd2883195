package raftnode

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"meshd/fsm"
	"meshd/internal/testenv"
	"meshd/pki"
)

// admitMesh is a record with servers hub and s2, a client edge, s3 taken out of the group
// (node.server.remove) and gone removed from the record (its key revoked), as the CA issued
// their certificates.
type admitMesh struct {
	ca                      *pki.CA
	f                       *fsm.FSM
	hub, s2, s3, edge, gone member
	behind                  atomic.Bool
	guard                   *recordGuard
}

func newAdmitMesh(t *testing.T) *admitMesh {
	t.Helper()
	ca, err := pki.NewCA("hub", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	m := &admitMesh{ca: ca, f: fsm.NewFSM(), hub: issue(t, ca, "hub", pki.ServerCert), s2: issue(t, ca, "s2", pki.ServerCert),
		s3: issue(t, ca, "s3", pki.ServerCert), edge: issue(t, ca, "edge", pki.ClientCert), gone: issue(t, ca, "gone", pki.ServerCert)}
	m.guard = &recordGuard{f: m.f, behind: m.behind.Load}
	do := func(op fsm.Op, body any) { apply(t, m.f, op, body) }
	do(fsm.OpGenesis, genesisOf(m.hub, 17071))
	enrolment(m.s2, true, do)
	enrolment(m.s3, true, do)
	enrolment(m.edge, false, do)
	enrolment(m.gone, true, do)
	do(fsm.OpServerRemove, fsm.ServerRemove{Node: "s3"})
	do(fsm.OpNodeRemove, fsm.NodeRemove{Node: "gone", Leader: "hub", Until: time.Now().Add(time.Hour).UTC()})
	return m
}

// The attacker holds a server certificate of the mesh CA but is not one of the record's servers:
// minted with a leaked CA key for a name the record does not hold, a server taken out of the
// group, a client machine's own key under a server certificate (root on a client plus the CA
// key), a server's name for a key that is not its own, a removed node's. Each is refused at the
// Raft handshake, the refusal logged naming the node and why, while the record's servers get
// through. Before the record decided, every one of them got in.
func TestRaftAdmitsOnlyTheRecordsServers(t *testing.T) {
	m := newAdmitMesh(t)
	log, logged := testLog()
	l, err := ListenTLS("127.0.0.1:0", nil, m.hub.raftTLS(t, m.ca), m.guard, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	answer(t, l)
	addr := l.Addr().String()

	for _, s := range []member{m.hub, m.s2} {
		if err := handshakeFrom("127.0.0.1", addr, s.raftTLS(t, m.ca), 5*time.Second); err != nil {
			t.Fatalf("the record's server %s is refused: %v", s.name, err)
		}
	}
	attackers := []struct {
		what string
		as   member
		why  string
	}{
		{"a certificate minted with the CA key for a node the record does not hold", issue(t, m.ca, "intruder", pki.ServerCert),
			"node intruder is not in the record"},
		{"a server taken out of the group", m.s3, "node s3 is not a server in the record"},
		{"a client node's key under a server certificate", issueFor(t, m.ca, "edge", m.edge.key, pki.ServerCert),
			"node edge is not a server in the record"},
		{"a server's name for another key", issue(t, m.ca, "s2", pki.ServerCert),
			"the certificate of node s2 is not for the key the record holds for it"},
		{"a removed node's key", m.gone, "node gone was removed"},
	}
	for _, a := range attackers {
		err := handshakeFrom("127.0.0.1", addr, a.as.raftTLS(t, m.ca), 5*time.Second)
		if err == nil {
			t.Errorf("%s (%s) got through to Raft", a.what, a.as.name)
			continue
		}
		t.Logf("%s: refused: %v", a.what, err)
	}
	if t.Failed() {
		return
	}
	// Each refusal is logged by the listener's goroutine after the handshake it refused, which may
	// be after the attacker's dial has returned: poll for them.
	if err := testenv.Poll(t, 5*time.Second, func() error {
		out := logged.String()
		for _, a := range attackers {
			if !strings.Contains(out, a.why) {
				return fmt.Errorf("the refusal of %s does not say %q:\n%s", a.what, a.why, out)
			}
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}

// While the record is behind (a restarted server that has not heard from a leader, a joining
// server's empty record), a server the record does not hold yet gets in, so the leader can bring
// the record up to date; what the record does hold is still refused: a server taken out of the
// group, a client's key, a removed node's.
func TestRaftAdmitsUnknownServersOnlyWhileTheRecordIsBehind(t *testing.T) {
	m := newAdmitMesh(t)
	newcomer := issue(t, m.ca, "s4", pki.ServerCert)
	cert := func(mb member) error { return m.guard.Admit(mb.id.Leaf) }
	if err := cert(newcomer); err == nil || !strings.Contains(err.Error(), "node s4 is not in the record") {
		t.Fatalf("a server the record does not hold, the record current: %v", err)
	}
	m.behind.Store(true)
	if err := cert(newcomer); err != nil {
		t.Fatalf("a server the record does not hold yet, the record behind: %v", err)
	}
	for _, mb := range []member{m.s3, m.gone, issueFor(t, m.ca, "edge", m.edge.key, pki.ServerCert), issue(t, m.ca, "hub", pki.ServerCert)} {
		if err := cert(mb); err == nil {
			t.Fatalf("%s is admitted while the record is behind", mb.name)
		}
	}
	if err := cert(m.s2); err != nil {
		t.Fatalf("the record's server s2: %v", err)
	}

	// A joining server's record is empty until the leader sends it: any server of the CA.
	empty := &recordGuard{f: fsm.NewFSM(), behind: func() bool { return false }}
	if err := empty.Admit(newcomer.id.Leaf); err != nil {
		t.Fatalf("a joining server's empty record: %v", err)
	}
}

// The dialling end asks the same: a server that dials an address where something else answers
// with a server certificate of the CA the record does not hold refuses it.
func TestRaftDialRefusesAServerTheRecordDoesNotHold(t *testing.T) {
	m := newAdmitMesh(t)
	impostor := issue(t, m.ca, "intruder", pki.ServerCert)
	il, err := ListenTLS("127.0.0.1:0", nil, impostor.raftTLS(t, m.ca), nil, discardLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { il.Close() })
	answer(t, il)
	hub, err := ListenTLS("127.0.0.1:0", nil, m.hub.raftTLS(t, m.ca), m.guard, discardLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { hub.Close() })
	if c, err := hub.Dial(raft.ServerAddress(il.Addr().String()), 5*time.Second); err == nil {
		c.Close()
		t.Fatal("the hub dialled a server the record does not hold")
	} else if !strings.Contains(err.Error(), "node intruder is not in the record") {
		t.Fatalf("dial refused, but not saying why: %v", err)
	}
	// The control: s2, the record's, is dialled.
	s2l, err := ListenTLS("127.0.0.1:0", nil, m.s2.raftTLS(t, m.ca), nil, discardLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2l.Close() })
	answer(t, s2l)
	c, err := hub.Dial(raft.ServerAddress(s2l.Addr().String()), 5*time.Second)
	if err != nil {
		t.Fatalf("the hub cannot dial the record's server s2: %v", err)
	}
	c.Close()
}
