package raftnode

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"meshd/catalogue"
	"meshd/fsm"
	"meshd/internal/testenv"
	"meshd/pki"
)

// secretModule is a catalogue entry whose file content is secret: a module's 0600 file.
func secretModule(secret string) fsm.CatalogueAdd {
	return fsm.CatalogueAdd{Source: catalogue.Source{File: "vault.yaml",
		Data: "name: vault\nfiles:\n  - {path: /etc/vault/token, mode: \"0600\", content: " + secret + "}\n"}}
}

// catalogueHolds says whether f's record holds the catalogue entry of secretModule.
func catalogueHolds(f *fsm.FSM, secret string) bool {
	held := false
	f.Read(func(r *fsm.Record, _ uint64) {
		b, _ := json.Marshal(r)
		held = strings.Contains(string(b), secret)
	})
	return held
}

// A module's secret file content, committed and snapshotted, is in no file of the Raft data
// dir (the attack: a copy of the data dir read the record); the record holds it again after a
// restart, and another seal key opens nothing.
func TestRaftLogAndSnapshotsAreSealedAtRest(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const secret = "s3cretRaftToken4f1d"
	o := newOneServer(t)
	rn := o.open(t, dir, fsm.NewFSM())
	o.bootstrap(t, rn)
	if _, err := rn.Apply(fsm.OpCatalogueAdd, secretModule(secret), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := rn.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if _, err := rn.Apply(fsm.OpCatalogueAdd, secretModule(secret+"2"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	rn.Shutdown(discardLog())
	if held := testenv.FilesHolding(t, dir, secret); len(held) > 0 {
		t.Fatalf("the secret is in clear in %v", held)
	}
	snaps, _ := filepath.Glob(filepath.Join(dir, "raft", "snapshots", "*", "state.bin"))
	if len(snaps) == 0 {
		t.Fatal("no snapshot was written")
	}

	f := fsm.NewFSM()
	rn = o.open(t, dir, f)
	if err := rn.WaitLeader(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := rn.Barrier(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if !catalogueHolds(f, secret+"2") {
		t.Fatal("the record reopened does not hold the module committed before the restart")
	}
	rn.Shutdown(discardLog())

	_, err := Open(dir, o.self, fsm.NewFSM(), pki.NewSealKey(""), o.tls, discardLog(), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "wrong seal key") {
		t.Fatalf("raft opened under another seal key: %v", err)
	}
}

// A Raft data dir written before the seal (raft-boltdb and raft's file snapshot store, as
// meshd kept them, in clear) opens: the record replays from its plain snapshot and log, and
// from then on no file holds the secret; a plain entry slipped into the sealed log is refused.
func TestRaftDataDirFromBeforeTheSealIsSealedOnOpen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const secret = "oldPlainToken9c2e"
	o := newOneServer(t)
	writePlainRaft(t, Dir(dir), o, secret)
	if len(testenv.FilesHolding(t, dir, secret)) < 2 {
		t.Fatalf("the plain data dir does not hold the secret in its log and its snapshot: %v", testenv.FilesHolding(t, dir, secret))
	}

	f := fsm.NewFSM()
	rn := o.open(t, dir, f)
	if err := rn.WaitLeader(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := rn.Barrier(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if !catalogueHolds(f, secret) || !catalogueHolds(f, secret+"2") {
		t.Fatal("the record does not hold what the plain snapshot and log held")
	}
	if _, err := rn.Apply(fsm.OpCatalogueAdd, secretModule(secret+"3"), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	rn.Shutdown(discardLog())
	if held := testenv.FilesHolding(t, dir, secret); len(held) > 0 {
		t.Fatalf("after the upgrade the secret is still in clear in %v", held)
	}

	// A plain entry written into the sealed log (someone editing raft.db) does not open.
	store, err := raftboltdb.NewBoltStore(filepath.Join(Dir(dir), "raft.db"))
	if err != nil {
		t.Fatal(err)
	}
	last, _ := store.LastIndex()
	if err := store.StoreLog(&raft.Log{Index: last + 1, Term: 1, Type: raft.LogCommand, Data: []byte(`{"op":"x"}`)}); err != nil {
		t.Fatal(err)
	}
	store.Close()
	log, err := openLog(filepath.Join(Dir(dir), "raft.db"), testSeal, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	var l raft.Log
	if err := log.GetLog(last+1, &l); err == nil {
		t.Fatalf("a plain entry in the sealed log opened: %s", l.Data)
	}
}

// writePlainRaft writes a Raft data dir as meshd wrote it before the seal: a group of one
// (o) on raft-boltdb and raft's file snapshot store, its genesis and a module holding secret
// committed and snapshotted, and another committed after the snapshot.
func writePlainRaft(t *testing.T, dir string, o oneServer, secret string) {
	id := o.self.ID
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	store, err := raftboltdb.NewBoltStore(filepath.Join(dir, "raft.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	snaps, err := raft.NewFileSnapshotStore(dir, 3, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	addr, trans := raft.NewInmemTransport("")
	cfg := raftConfig(Self{ID: id}, io.Discard)
	r, err := raft.NewRaft(cfg, fsm.NewFSM(), store, store, snaps, trans)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Shutdown().Error() }()
	if err := r.BootstrapCluster(raft.Configuration{Servers: []raft.Server{{ID: raft.ServerID(id), Address: addr}}}).Error(); err != nil {
		t.Fatal(err)
	}
	apply := func(op fsm.Op, body any) {
		b, err := fsm.EncodeBy(op, time.Now(), "", body)
		if err != nil {
			t.Fatal(err)
		}
		fut := r.Apply(b, 10*time.Second)
		if err := fut.Error(); err != nil {
			t.Fatal(err)
		}
		if res, _ := fut.Response().(fsm.Result); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	deadline := time.Now().Add(15 * time.Second)
	for r.State() != raft.Leader && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	apply(fsm.OpGenesis, o.genesis())
	apply(fsm.OpCatalogueAdd, secretModule(secret))
	if err := r.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	apply(fsm.OpCatalogueAdd, secretModule(secret+"2"))
}
