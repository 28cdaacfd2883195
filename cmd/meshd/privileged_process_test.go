package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"meshd/catalogue"
	"meshd/fsm"
)

// Issue 34, finding 1, at upgrade through the CLI: a record taken in by a version 5 server holds
// a module writing another service's directory (web, at /etc/nginx). Restored here, the module
// is named UNCONFIRMED by status and module show; assigning it
// anywhere more waits for the operator; `module confirm` gives the word, recorded with who, and
// status stops naming it. (Nothing is assigned: the agent here writes the real machine.)
func TestProcessUpgradeNamesUnconfirmedModules(t *testing.T) {
	n := newNode(t)
	n.genesis("--adopted")
	n.startAgent()
	dir := t.TempDir()
	file := filepath.Join(dir, "record.snap")
	n.ok("snapshot", "save", file)

	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	r, index, err := fsm.DecodeSnapshot(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().UTC()
	v5 := func(op fsm.Op, body any) {
		t.Helper()
		raw, _ := json.Marshal(body)
		c, _ := json.Marshal(fsm.Command{V: 5, Op: op, At: at, Body: raw})
		if _, err := fsm.Apply(r, c); err != nil {
			t.Fatalf("version 5 %s: %v", op, err)
		}
	}
	v5(fsm.OpCatalogueAdd, fsm.CatalogueAdd{Source: catalogue.Source{File: "web.yaml", Data: "name: web\nfiles: [{path: /etc/nginx/nginx.conf, content: x}]\n"}})
	v5(fsm.OpCatalogueAdd, fsm.CatalogueAdd{Source: catalogue.Source{File: "web2.yaml", Data: "name: web2\nfiles: [{path: /etc/nginx/other.conf, content: x}]\n"}})
	rec, err := r.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	var snap map[string]json.RawMessage
	if err := json.Unmarshal(b, &snap); err != nil {
		t.Fatal(err)
	}
	snap["record"] = rec
	snap["index"], _ = json.Marshal(index)
	b, _ = json.Marshal(snap)
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	n.ok("snapshot", "restore", file)

	if out := n.ok("status"); !strings.Contains(out, "UNCONFIRMED: module web is root") || !strings.Contains(out, "/etc/nginx/nginx.conf") ||
		!strings.Contains(out, "meshd module confirm web") {
		t.Fatalf("status does not name the unconfirmed module:\n%s", out)
	}
	if out := n.ok("module", "show", "web"); !strings.Contains(out, "UNCONFIRMED") {
		t.Fatalf("module show:\n%s", out)
	}
	if _, errs, code := n.run("module", "assign", "hub", "web"); code != 1 || !strings.Contains(errs, "meshd module confirm web") {
		t.Fatalf("assigning an unconfirmed module: exit %d, %q", code, errs)
	}
	if out := n.ok("module", "confirm", "web"); !strings.Contains(out, "confirmed privileged by root on hub's socket") {
		t.Fatalf("module confirm: %q", out)
	}
	out := n.ok("status")
	if strings.Contains(out, "UNCONFIRMED: module web ") || !strings.Contains(out, "UNCONFIRMED: module web2 ") {
		t.Fatalf("status after confirming web:\n%s", out)
	}
	if out := n.ok("history"); !strings.Contains(out, "module web confirmed privileged") || !strings.Contains(out, "root on hub's socket") {
		t.Fatalf("the history does not say who confirmed web:\n%s", out)
	}
	var confirmed any
	n.jsonOf(&confirmed, "module", "confirm", "web2")
	if out := n.ok("status"); strings.Contains(out, "UNCONFIRMED") {
		t.Fatalf("status after confirming web2 with --json:\n%s", out)
	}
}
