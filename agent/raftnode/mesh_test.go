package raftnode

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"meshd/catalogue"
	"meshd/fsm"
	"meshd/pki"
)

// member is a node's identity issued by a test mesh's CA.
type member struct {
	name string
	id   tls.Certificate
	key  ed25519.PrivateKey
	pub  string // as the record writes it
}

// issue gives node a certificate of ca in role, for a new key.
func issue(t testing.TB, ca *pki.CA, node string, role pki.CertRole) member {
	t.Helper()
	key, err := pki.NewNodeKey()
	if err != nil {
		t.Fatal(err)
	}
	return issueFor(t, ca, node, key, role)
}

// issueFor gives node a certificate of ca in role for key.
func issueFor(t testing.TB, ca *pki.CA, node string, key ed25519.PrivateKey, role pki.CertRole) member {
	t.Helper()
	pub := key.Public().(ed25519.PublicKey)
	certPEM, err := ca.IssueNode(node, pub, role, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	id, err := pki.Identity(certPEM, ca.CertPEM, key)
	if err != nil {
		t.Fatal(err)
	}
	return member{name: node, id: id, key: key, pub: pki.PublicKeyString(pub)}
}

// raftTLS is m's Raft TLS configuration (pki.RaftTLS) in mesh ca.
func (m member) raftTLS(t testing.TB, ca *pki.CA) *tls.Config {
	t.Helper()
	cfg, err := pki.RaftTLS(m.id, ca.Cert)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// apply applies a command to f directly, as Raft would once it is committed, and fails the test
// if the record refuses it.
func apply(t testing.TB, f *fsm.FSM, op fsm.Op, body any) {
	t.Helper()
	data, err := fsm.Encode(op, time.Now(), body)
	if err != nil {
		t.Fatal(err)
	}
	if res := f.Apply(&raft.Log{Index: f.Applied() + 1, Type: raft.LogCommand, Data: data}).(fsm.Result); res.Err != nil {
		t.Fatalf("%s: %v", op, res.Err)
	}
}

// genesisOf is the genesis of a mesh whose control-node is hub, at 127.0.0.1.
func genesisOf(hub member, raftPort uint16) fsm.Genesis {
	return fsm.Genesis{Node: hub.name, ID: hub.name + "-id", Mode: fsm.Adopted, Advertise: "127.0.0.1", PublicKey: hub.pub,
		Catalogue: catalogue.DefaultSources(), Settings: map[string]string{"mesh.raft": strconv.Itoa(int(raftPort))}}
}

// enrolment spends a new token on m's enrolment, a server's or a client's; do applies each
// command (to an FSM, or through a leader).
func enrolment(m member, server bool, do func(op fsm.Op, body any)) {
	hash := "sha256:token-" + m.name
	do(fsm.OpTokenCreate, fsm.TokenCreate{Hash: hash, Mode: fsm.Adopted, Expires: time.Now().Add(time.Hour).UTC(), Server: server})
	do(fsm.OpNodeEnrol, fsm.Enrol{Node: m.name, ID: m.name + "-id", TokenHash: hash, PublicKey: m.pub, Advertise: "127.0.0.1",
		Server: server})
}

// syncBuffer is a log's output read while it is written.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testLog is a logger writing into a buffer the test reads.
func testLog() (*slog.Logger, *syncBuffer) {
	buf := &syncBuffer{}
	return slog.New(slog.NewTextHandler(buf, nil)), buf
}

// answer serves l: each connection Raft would get is answered "ok\n" and closed, so a dialling
// test knows its connection got through.
func answer(t testing.TB, l net.Listener) {
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.SetDeadline(time.Now().Add(5 * time.Second))
			c.Write([]byte("ok\n"))
			c.Close()
		}
	}()
}

// handshakeFrom connects from local (an address on lo) to addr with cfg and waits for the "ok"
// of a connection that got through to Raft; the error says why it did not.
func handshakeFrom(local, addr string, cfg *tls.Config, within time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(within))
	tc := tls.Client(c, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	line, err := bufio.NewReader(tc).ReadString('\n')
	if err != nil {
		return fmt.Errorf("no answer from raft: %w", err)
	}
	if line != "ok\n" {
		return errors.New("answered " + strconv.Quote(line))
	}
	return nil
}

// discardLog is a logger writing nowhere.
func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
