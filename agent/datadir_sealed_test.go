package agent

import (
	"context"
	"path/filepath"
	"testing"

	"meshd/catalogue"
	"meshd/fsm"
	"meshd/host"
	"meshd/host/hosttest"
	"meshd/internal/testenv"
)

// A copy of a server's data dir opens nothing of the record (issue 34, the attack: read the
// data dir). Raft on disk commits a module whose 0600 file holds a secret; the host, on the
// same data dir, holds the file it found at that path (its original recorded), then takes it
// (the bytes it replaced recorded too); Raft takes a snapshot. No file of the data dir holds the
// module's secret or the found file's bytes, and the host still gives the original back.
func TestDataDirCopyHoldsNoSecret(t *testing.T) {
	hosttest.RequireChown(t)
	const (
		planted = "plantedModuleSecret7d3a"
		found   = "foundOriginalSecret51be"
		edited  = "editedLatestSecret08c4"
		conf    = "/etc/vault/token"
	)
	root := t.TempDir()
	hosttest.PlaceAt(t, root, conf, found)
	ts := startServer(t, true, func(a *Agent) {
		h, err := host.Open(host.Config{DataDir: a.cfg.DataDir, Seal: a.secrets.Seal, Root: root, Logger: a.log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		a.host = h
	})
	rec, h := ts.s.rec, ts.a.host
	pass := func() {
		t.Helper()
		var d *fsm.Declaration
		var err error
		rec.Read(func(r *fsm.Record, _ uint64) { d, err = fsm.Compose(r, "hub") })
		if err != nil {
			t.Fatal(err)
		}
		hosttest.NoErrorsFatal(t, h.Reconcile(context.Background(), d))
	}
	src := catalogue.Source{File: "vault.yaml", Data: "name: vault\nfiles:\n  - {path: " + conf + ", mode: \"0600\", content: " + planted + "}\n"}
	for _, c := range []struct {
		op   fsm.Op
		body any
	}{{fsm.OpCatalogueAdd, fsm.CatalogueAdd{Source: src}}, {fsm.OpModuleAssign, fsm.ModuleOnNode{Node: "hub", Module: "vault"}}} {
		if _, err := propose(rec, c.op, c.body); err != nil {
			t.Fatal(err)
		}
	}
	pass() // held: the original recorded
	hosttest.PlaceAt(t, root, conf, edited)
	pass()
	if _, err := propose(rec, fsm.OpModuleTake, fsm.ModuleOnNode{Node: "hub", Module: "vault"}); err != nil {
		t.Fatal(err)
	}
	pass() // taken: the bytes replaced recorded, the module's written
	if got := hosttest.ReadAt(t, root, conf); got != planted {
		t.Fatalf("the taken file holds %q, want the module's content", got)
	}
	if err := rec.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if snaps, _ := filepath.Glob(filepath.Join(ts.a.cfg.DataDir, "raft", "snapshots", "*", "state.bin")); len(snaps) == 0 {
		t.Fatal("raft wrote no snapshot")
	}
	for _, secret := range []string{planted, found, edited} {
		if held := testenv.FilesHolding(t, ts.a.cfg.DataDir, secret); len(held) > 0 {
			t.Errorf("%q is in clear in %v", secret, held)
		}
	}
	if b, err := h.Original(conf); err != nil || string(b) != found {
		t.Fatalf("the original opened: %q, %v", b, err)
	}
}
