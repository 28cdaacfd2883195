package agent

import (
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"meshd/agent/raftnode"
	"meshd/fsm"
	"meshd/internal/testenv"
	"meshd/pki"
)

// appendToken is an attacker at the Raft port: through trans it sends the server an AppendEntries
// from a "leader" of a newer term carrying a token.create for hash, committed at once, the way a
// forged leader would mint itself an enrolment token.
func appendToken(ts *testServer, trans raft.Transport, hash string) error {
	st := ts.s.rec.Stats()
	term, _ := strconv.ParseUint(st["term"], 10, 64)
	last, _ := strconv.ParseUint(st["last_log_index"], 10, 64)
	lastTerm, _ := strconv.ParseUint(st["last_log_term"], 10, 64)
	data, err := fsm.Encode(fsm.OpTokenCreate, time.Now(), fsm.TokenCreate{Hash: hash, Mode: fsm.Converged, Expires: time.Now().Add(time.Hour).UTC()})
	if err != nil {
		return err
	}
	req := &raft.AppendEntriesRequest{
		RPCHeader:         raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("intruder"), Addr: []byte(trans.LocalAddr())},
		Term:              term + 1,
		PrevLogEntry:      last,
		PrevLogTerm:       lastTerm,
		Entries:           []*raft.Log{{Index: last + 1, Term: term + 1, Type: raft.LogCommand, Data: data}},
		LeaderCommitIndex: last + 1,
	}
	var resp raft.AppendEntriesResponse
	if err := trans.AppendEntries("hub-id", raft.ServerAddress(ts.raftAddr), req, &resp); err != nil {
		return err
	}
	if !resp.Success {
		return fmt.Errorf("append refused by raft itself (term %d, last log %d)", resp.Term, resp.LastLog)
	}
	return nil
}

// enrolServer records node as a server with key, through the test server's Raft, as a server
// token's enrolment does.
func (ts *testServer) enrolServer(t *testing.T, node string, key ed25519.PrivateKey) {
	t.Helper()
	hash := "sha256:token-" + node
	if _, err := propose(ts.s.rec, fsm.OpTokenCreate, fsm.TokenCreate{Hash: hash, Mode: fsm.Adopted, Server: true,
		Expires: time.Now().Add(time.Hour).UTC()}); err != nil {
		t.Fatal(err)
	}
	if _, err := propose(ts.s.rec, fsm.OpNodeEnrol, fsm.Enrol{Node: node, ID: node + "-id", TokenHash: hash, Server: true,
		PublicKey: pki.PublicKeyString(key.Public().(ed25519.PublicKey)), Advertise: "127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
}

// tlsTransport is a Raft transport on loopback whose TLS presents id and checks the other end as
// pki.RaftTLS does (a client node's id is put in by hand: RaftTLS itself refuses it).
func tlsTransport(t *testing.T, ca *pki.CA, id tls.Certificate) raft.Transport {
	t.Helper()
	srvID, _, _ := nodeIdentity(t, ca, "carrier", pki.ServerCert)
	cfg, err := pki.RaftTLS(srvID, ca.Cert)
	if err != nil {
		t.Fatal(err)
	}
	cfg = cfg.Clone()
	cfg.Certificates = []tls.Certificate{id}
	stream, err := raftnode.ListenTLS("127.0.0.1:0", nil, cfg, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	trans := raft.NewNetworkTransport(stream, 1, 5*time.Second, io.Discard)
	t.Cleanup(func() { trans.Close() })
	return trans
}

// Issue 14's critical hole: whoever reached the Raft port could append to the log. Now neither a
// peer with no certificate (plain TCP Raft), nor one with a client node's certificate, nor (issue
// 26) one with a server certificate of the CA for a node that is not one of the record's servers
// gets an entry in: the record is unchanged. A server of the record does (the control that the
// attack itself works), and a refusal is logged, a bounded number of times.
func TestRaftRefusesAnyoneButAServer(t *testing.T) {
	ts := startTestServerOnDisk(t)

	plain, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, 5*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { plain.Close() })
	cliID, _, _ := nodeIdentity(t, ts.ca, "edge", pki.ClientCert)
	otherCA, _ := pki.NewCA("elsewhere", time.Now())
	foreignID, _, _ := nodeIdentity(t, otherCA, "hub", pki.ServerCert)
	// Issue 26's finding 9: a server certificate of this very CA is not enough. One minted with
	// the CA key for a node the record does not hold, and a server the record took out of the
	// group (its certificate unrevoked), are refused like the rest.
	mintedID, _, _ := nodeIdentity(t, ts.ca, "intruder", pki.ServerCert)
	removedID, _, removedKey := nodeIdentity(t, ts.ca, "hub-3", pki.ServerCert)
	ts.enrolServer(t, "hub-3", removedKey)
	if _, err := propose(ts.s.rec, fsm.OpServerRemove, fsm.ServerRemove{Node: "hub-3"}); err != nil {
		t.Fatal(err)
	}
	attackers := []struct {
		name  string
		trans raft.Transport
	}{
		{"no certificate (plain TCP raft)", plain},
		{"a client node's certificate", tlsTransport(t, ts.ca, cliID)},
		{"another mesh's server certificate", tlsTransport(t, otherCA, foreignID)},
		{"a server certificate minted with the CA key for a node the record does not hold", tlsTransport(t, ts.ca, mintedID)},
		{"a server taken out of the group", tlsTransport(t, ts.ca, removedID)},
	}
	for i, a := range attackers {
		hash := fmt.Sprintf("sha256:intruder-%d", i)
		// Several tries: a refusal must not depend on a pooled connection or a first attempt.
		for try := 0; try < 3; try++ {
			if err := appendToken(ts, a.trans, hash); err == nil {
				t.Fatalf("%s: AppendEntries was accepted", a.name)
			} else if try == 0 {
				t.Logf("%s: refused: %v", a.name, err)
			}
		}
		// A command through the real leader after the attempt: once it is applied, anything the
		// attempt had got in would be too.
		legit := fmt.Sprintf("sha256:legit-%d", i)
		if _, err := propose(ts.s.rec, fsm.OpTokenCreate, fsm.TokenCreate{Hash: legit, Mode: fsm.Adopted, Expires: time.Now().Add(time.Hour).UTC()}); err != nil {
			t.Fatalf("after %s: the leader cannot commit: %v", a.name, err)
		}
		if !ts.hasToken(legit) || ts.hasToken(hash) {
			t.Fatalf("%s: the record holds the intruder's token %v, the leader's %v", a.name, ts.hasToken(hash), ts.hasToken(legit))
		}
	}
	if log := ts.log.String(); !strings.Contains(log, "raft connection refused") {
		t.Fatalf("no refusal logged:\n%s", log)
	}

	for _, why := range []string{"node intruder is not in the record", "node hub-3 is not a server in the record"} {
		if !strings.Contains(ts.log.String(), why) {
			t.Fatalf("the refusal does not say %q:\n%s", why, ts.log.String())
		}
	}

	// The control: a server of the record is let in, and its entry is applied. This is what a
	// peer with no certificate could do before (raft.NewTCPTransport).
	srvID, _, srvKey := nodeIdentity(t, ts.ca, "hub-2", pki.ServerCert)
	ts.enrolServer(t, "hub-2", srvKey)
	server := tlsTransport(t, ts.ca, srvID)
	if err := appendToken(ts, server, "sha256:server"); err != nil {
		t.Fatalf("a server of the mesh could not append: %v", err)
	}
	if err := testenv.Poll(t, 10*time.Second, func() error {
		if !ts.hasToken("sha256:server") {
			return errors.New("the server's entry is not applied")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// On an adopted control-node the store stays guarded (from the private network only), while the
// Raft port is open to the servers' underlay addresses: a server joining has no private address
// yet and the group must outlive the hub, so servers reach each other at their advertise
// addresses. What keeps everyone else out of Raft is its transport, mutual TLS that accepts only
// server certificates of the mesh CA (TestRaftRefusesAnyoneButAServer).
func TestRaftOpeningOnAdoptedNode(t *testing.T) {
	r := settingsRecord(t, map[string]string{"mesh.raft": "17071"})
	d, err := fsm.Compose(r, "hub")
	if err != nil {
		t.Fatal(err)
	}
	var store, raftPort bool
	for _, res := range d.Resources {
		o := res.Opening
		if o == nil {
			continue
		}
		switch {
		case res.Module == "mesh" && o.Port == 17071 && o.Proto == "tcp":
			raftPort = o.From == "anywhere"
		case res.Module == "store" && o.Guarded && o.From == "private":
			store = true
		}
	}
	if d.Mode != fsm.Adopted || !store || !raftPort {
		t.Fatalf("adopted hub's declaration: mode %s, store guarded %v, raft 17071/tcp open to the servers %v: %+v", d.Mode, store, raftPort, d.Resources)
	}
}
