package raftnode

import (
	"crypto/ed25519"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"meshd/catalogue"
	"meshd/fsm"
	"meshd/pki"
)

// testSeal is the seal key this package's tests seal their Raft data dirs under.
var testSeal = pki.NewSealKey("")

// oneServer is a server of a group of one on loopback: its Raft identity and TLS.
type oneServer struct {
	self Self
	tls  *tls.Config
	key  ed25519.PrivateKey
}

func newOneServer(t *testing.T) oneServer {
	t.Helper()
	ca, err := pki.NewCA("hub", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	key, err := pki.NewNodeKey()
	if err != nil {
		t.Fatal(err)
	}
	certPEM, err := ca.IssueNode("hub", key.Public().(ed25519.PublicKey), pki.ServerCert, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	id, err := pki.Identity(certPEM, ca.CertPEM, key)
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg, err := pki.RaftTLS(id, ca.Cert)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	return oneServer{self: Self{Name: "hub", ID: "hub-id", Server: true, Advertise: "127.0.0.1", Port: port}, tls: tlsCfg, key: key}
}

// open opens o's Raft on dataDir over record f, sealed under testSeal; it is shut down when the
// test ends, if not before.
func (o oneServer) open(t *testing.T, dataDir string, f *fsm.FSM) *Node {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	rn, err := Open(dataDir, o.self, f, testSeal, o.tls, log, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rn.Shutdown(log) })
	return rn
}

// openOne opens a group of one on loopback in dataDir, as genesis does, and records its genesis.
func openOne(t *testing.T, dataDir string) *Node {
	t.Helper()
	o := newOneServer(t)
	rn := o.open(t, dataDir, fsm.NewFSM())
	o.bootstrap(t, rn)
	return rn
}

// bootstrap makes rn, o's Raft on an empty data dir, a group of one and records its genesis.
func (o oneServer) bootstrap(t *testing.T, rn *Node) {
	t.Helper()
	if err := rn.Bootstrap([]raft.Server{{ID: raft.ServerID(o.self.ID), Address: rn.LocalAddr()}}); err != nil {
		t.Fatal(err)
	}
	if err := rn.WaitLeader(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := rn.Apply(fsm.OpGenesis, o.genesis(), 10*time.Second); err != nil {
		t.Fatal(err)
	}
}

// genesis is the first command of o's group.
func (o oneServer) genesis() fsm.Genesis {
	return fsm.Genesis{Node: "hub", ID: o.self.ID, Mode: fsm.Adopted, Advertise: "127.0.0.1",
		PublicKey: pki.PublicKeyString(o.key.Public().(ed25519.PublicKey)), Catalogue: catalogue.DefaultSources(),
		Settings: map[string]string{"mesh.raft": strconv.Itoa(int(o.self.Port))}}
}

// A group of one answers what callers ask through the Node: it leads, its configuration holds
// it as the one voter, the record has applied the command it committed.
func TestNodeAnswersForItsGroup(t *testing.T) {
	t.Parallel()
	rn := openOne(t, t.TempDir())
	if !rn.IsLeader() || rn.State() != raft.Leader {
		t.Fatalf("a group of one does not lead: %s", rn.State())
	}
	if _, id := rn.Leader(); id != "hub-id" {
		t.Fatalf("leader %q, want hub-id", id)
	}
	servers, err := rn.Configuration()
	if err != nil || len(servers) != 1 || servers[0].Suffrage != raft.Voter || servers[0].ID != "hub-id" {
		t.Fatalf("configuration %+v %v", servers, err)
	}
	if err := rn.Barrier(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if rn.Applied() == 0 || rn.CommitIndex() < rn.Applied() || rn.Term() == 0 {
		t.Fatalf("applied %d, commit %d, term %d", rn.Applied(), rn.CommitIndex(), rn.Term())
	}
}

// Recover rewrites the configuration of a stopped server's log, and refuses a client node and a
// keep that leaves out the server it runs on.
func TestRecover(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rn := openOne(t, dir)
	if _, err := Recover(dir, Self{Name: "hub", ID: "hub-id", Server: true}, testSeal, nil, nil); err == nil ||
		!strings.Contains(err.Error(), "is locked") {
		t.Fatalf("recover beside a running server: %v, want the log locked", err)
	}
	rn.Shutdown(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if _, err := Recover(dir, Self{Name: "edge", ID: "edge-id"}, testSeal, nil, nil); err == nil || !strings.Contains(err.Error(), "is a client") {
		t.Fatalf("recover on a client: %v", err)
	}
	if _, err := Recover(dir, Self{Name: "hub", ID: "hub-id", Server: true}, testSeal, []string{"s2"}, nil); err == nil ||
		!strings.Contains(err.Error(), "leaves out this server") {
		t.Fatalf("recover keeping only another server: %v", err)
	}
	res, err := Recover(dir, Self{Name: "hub", ID: "hub-id", Server: true, Advertise: "127.0.0.1"}, testSeal, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Voters, []string{"hub"}) || len(res.Dropped) != 0 || res.Nodes != 1 || res.RecordIndex == 0 {
		t.Fatalf("recover: %+v", res)
	}
}
