package pki

import (
	"crypto/tls"
	"net"
	"strings"
	"testing"
	"time"
)

// identity is a node certificate of ca in role, with its key.
func identity(t *testing.T, ca *CA, node string, role CertRole) tls.Certificate {
	t.Helper()
	key, err := NewNodeKey()
	if err != nil {
		t.Fatal(err)
	}
	pemb, err := ca.IssueNode(node, key.Public().(ed25519Pub), role, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	id, err := Identity(pemb, ca.CertPEM, key)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// handshake runs one TLS handshake over a pipe and returns each end's error.
func handshake(server, client *tls.Config) (serr, cerr error) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	done := make(chan error, 1)
	go func() {
		s := tls.Server(a, server)
		err := s.Handshake()
		if err == nil {
			// TLS 1.3: the client's certificate is checked after the client's handshake returned;
			// read once so a refusal reaches the client as an error.
			_ = s.SetReadDeadline(time.Now().Add(2 * time.Second))
			_, _ = s.Write([]byte{1})
		}
		a.Close()
		done <- err
	}()
	c := tls.Client(b, client)
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	cerr = c.Handshake()
	if cerr == nil {
		_, cerr = c.Read(make([]byte, 1))
	}
	b.Close()
	return <-done, cerr
}

// Raft's TLS takes a server certificate of the mesh CA on both ends, and nothing else: a client
// node's certificate is refused whether it dials or listens, and so is no certificate or another
// mesh's.
func TestRaftTLSAcceptsOnlyServerCertificates(t *testing.T) {
	ca := newCA(t)
	srv := identity(t, ca, "hub", ServerCert)
	other := identity(t, ca, "hub-2", ServerCert)
	cli := identity(t, ca, "edge", ClientCert)
	foreign := identity(t, newCA(t), "hub", ServerCert)

	raftCfg := func(id tls.Certificate) *tls.Config {
		// A client's certificate is refused by RaftTLS itself; build the config it would have
		// had, to see that the other end refuses it too.
		cfg, err := RaftTLS(other, ca.Cert)
		if err != nil {
			t.Fatal(err)
		}
		cfg = cfg.Clone()
		cfg.Certificates = []tls.Certificate{id}
		return cfg
	}
	good, err := RaftTLS(srv, ca.Cert)
	if err != nil {
		t.Fatal(err)
	}
	if serr, cerr := handshake(good, raftCfg(other)); serr != nil || cerr != nil {
		t.Fatalf("two servers: listener %v, dialler %v", serr, cerr)
	}
	for what, id := range map[string]tls.Certificate{"a client node's certificate": cli, "another mesh's certificate": foreign} {
		if serr, _ := handshake(good, raftCfg(id)); serr == nil {
			t.Errorf("raft listener accepted %s", what)
		}
		if _, cerr := handshake(raftCfg(id), good); cerr == nil {
			t.Errorf("raft dialler accepted %s from the listener", what)
		}
	}
	if serr, _ := handshake(good, &tls.Config{InsecureSkipVerify: true}); serr == nil {
		t.Error("raft listener accepted a peer with no certificate")
	}
	if _, err := RaftTLS(cli, ca.Cert); err == nil || !strings.Contains(err.Error(), "client node's") {
		t.Errorf("RaftTLS with a client node's certificate: %v", err)
	}
}

// A client node's certificate cannot serve the servers' bus: ServerTLS refuses it, and a node
// calling the bus with ClientTLS refuses a listener presenting it. PeerTLS, for one node's own
// bus, takes that node's certificate (client or server) and no other node's.
func TestBusTLSServerCertificatesOnly(t *testing.T) {
	ca := newCA(t)
	srv := identity(t, ca, "hub", ServerCert)
	cli := identity(t, ca, "edge", ClientCert)
	cli2 := identity(t, ca, "edge-2", ClientCert)
	if _, err := ServerTLS(cli, ca.Cert); err == nil {
		t.Fatal("ServerTLS served with a client node's certificate")
	}
	good, err := ServerTLS(srv, ca.Cert)
	if err != nil {
		t.Fatal(err)
	}
	if serr, cerr := handshake(good, ClientTLS(&cli, ca.Cert)); serr != nil || cerr != nil {
		t.Fatalf("client to server bus: server %v, client %v", serr, cerr)
	}
	if _, cerr := handshake(PeerServerTLS(cli2, ca.Cert), ClientTLS(&cli, ca.Cert)); cerr == nil || !strings.Contains(cerr.Error(), "client node's") {
		t.Fatalf("a client node's certificate served the bus to a client: %v", cerr)
	}
	// One node's own bus: its certificate, for the key the caller knows.
	edge2Pub := cli2.Leaf.PublicKey.(ed25519Pub)
	if serr, cerr := handshake(PeerServerTLS(cli2, ca.Cert), PeerTLS(&srv, ca.Cert, "edge-2", edge2Pub)); serr != nil || cerr != nil {
		t.Fatalf("server to edge-2's bus: %v %v", serr, cerr)
	}
	if _, cerr := handshake(PeerServerTLS(cli, ca.Cert), PeerTLS(&srv, ca.Cert, "edge-2", edge2Pub)); cerr == nil {
		t.Fatal("edge answered as edge-2")
	}
}
