package agent

import (
	"bytes"
	"crypto/ed25519"
	"crypto/tls"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"meshd/agent/record"
	"meshd/catalogue"
	"meshd/fsm"
	"meshd/host"
	"meshd/pki"
	"meshd/setup"
)

// syncBuffer is a log destination tests read while the server writes to it.
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

// testServer is a real server role on loopback: the mesh CA, the server's certificate, Raft over
// its real transport with the record after an adopted genesis, and (started by the test) its bus.
// Nothing but the host reconciler and gossip is missing.
type testServer struct {
	s        *serverRole
	a        *Agent
	ca       *pki.CA
	raftAddr string
	busAddr  string
	log      *syncBuffer
}

// freeLoopbackPort is a port free on every address now, below the kernel's ephemeral range
// (32768 up on Linux): a port the kernel handed out at random is also what it hands an outgoing
// connection for its source, and a flood test opening hundreds of them took the bus's port
// between this check and the agent's bind.
func freeLoopbackPort(t testing.TB) uint16 {
	t.Helper()
	for range 200 {
		port := 20000 + rand.IntN(12000)
		ln, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		ln.Close()
		return uint16(port)
	}
	t.Fatal("no free port in 20000-31999")
	return 0
}

// nodeIdentity issues node a certificate of ca in role, and returns it with its TLS identity.
func nodeIdentity(t testing.TB, ca *pki.CA, node string, role pki.CertRole) (tls.Certificate, []byte, ed25519.PrivateKey) {
	t.Helper()
	key, err := pki.NewNodeKey()
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := ca.IssueNode(node, key.Public().(ed25519.PublicKey), role, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	id, err := pki.Identity(certPEM, ca.CertPEM, key)
	if err != nil {
		t.Fatal(err)
	}
	return id, certPEM, key
}

// startTestServer starts a server role over an in-memory Raft group of one (record.OpenInmem):
// the real algorithm with no disk, its bus on loopback. Tests of the Raft port itself use
// startTestServerOnDisk.
// Each prep runs on the agent before its role is made, as Start sets it up: its log, its
// metrics, its host (a host of its own in a temporary root unless a prep opens one).
func startTestServer(t *testing.T, prep ...func(*Agent)) *testServer {
	return startServer(t, false, prep...)
}

// startTestServerOnDisk starts a server role whose Raft is on disk behind its mTLS transport,
// as the agent runs it.
func startTestServerOnDisk(t *testing.T) *testServer { return startServer(t, true) }

func startServer(t *testing.T, onDisk bool, prep ...func(*Agent)) *testServer {
	t.Helper()
	ca, err := pki.NewCA("hub", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	id, certPEM, key := nodeIdentity(t, ca, "hub", pki.ServerCert)
	ts := &testServer{ca: ca, log: &syncBuffer{}}
	log := slog.New(slog.NewTextHandler(ts.log, &slog.HandlerOptions{Level: slog.LevelInfo}))
	raftPort, busPort := freeLoopbackPort(t), freeLoopbackPort(t)
	ts.raftAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(int(raftPort)))
	ts.busAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(int(busPort)))
	nf := &setup.NodeFile{Name: "hub", ID: "hub-id", Server: true, Advertise: "127.0.0.1", RaftPort: raftPort}
	a := &Agent{cfg: Config{DataDir: t.TempDir(), LogOutput: ts.log}, node: nf, log: log.With("node", "hub"), identity: id,
		caCert: ca.Cert, declarations: make(chan *fsm.Declaration, 1),
		secrets: &pki.NodeSecrets{NodeKey: key, NodeCertPEM: certPEM, CACertPEM: ca.CertPEM, Keyring: pki.NewKeyring(), CA: ca, Seal: pki.NewSealKey("")}}
	a.keys = a.newKeyrings()
	for _, p := range prep {
		p(a)
	}
	if a.host == nil {
		a.host = openTestHost(t, host.Config{})
	}
	s, err := newServerRole(a.core())
	if err != nil {
		t.Fatal(err)
	}
	a.setKind(s)
	ts.a = a
	if onDisk {
		err = s.open()
	} else if err = s.rec.OpenInmem(nf.RaftSelf(), ts.log); err == nil {
		s.started()
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.close() })
	if err := s.rec.BootstrapSelf(nf.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.rec.WaitLeader(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := propose(s.rec, fsm.OpGenesis, fsm.Genesis{Node: "hub", ID: nf.ID, Mode: fsm.Adopted, Advertise: "127.0.0.1",
		PublicKey: pki.PublicKeyString(key.Public().(ed25519.PublicKey)), Catalogue: catalogue.DefaultSources(),
		Settings: map[string]string{"mesh.raft": strconv.Itoa(int(raftPort)), "mesh.bus": strconv.Itoa(int(busPort))}}); err != nil {
		t.Fatal(err)
	}
	ts.s = s
	return ts
}

// hasToken says whether the record holds a token with this hash.
func (ts *testServer) hasToken(hash string) bool {
	var ok bool
	ts.s.rec.Read(func(r *fsm.Record, _ uint64) { ok = r.Tokens[hash] != nil })
	return ok
}

// propose proposes a command as the agent itself and waits for its apply.
func propose(rec *record.Service, op fsm.Op, body any) (any, error) {
	v, _, err := rec.Propose("", op, body)
	return v, err
}

// openTestHost opens a host with cfg in temporary directories (its data dir, and its root
// unless cfg gives one); it closes with the test.
func openTestHost(t testing.TB, cfg host.Config) *host.Host {
	t.Helper()
	cfg.DataDir = t.TempDir()
	cfg.Seal = pki.NewSealKey("")
	if cfg.Root == "" {
		cfg.Root = t.TempDir()
	}
	h, err := host.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}
