package fsm

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"meshd/catalogue"
)

// cmdV is cmd with the command version v, as a server of that version wrote it.
func cmdV(t testing.TB, v int, op Op, at time.Time, body any) []byte {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	c, err := json.Marshal(Command{V: v, Op: op, At: at.UTC(), Body: b})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Issue 26, finding 6, as the record applies it: a module declaring a cron file without saying
// privileged: true is refused at catalogue.add, naming the field; said, it is added; a setting
// that moves an accepted module's file into /etc/cron.d is refused at node.settings and at
// module.assign (all at version 5, judged by the deny list). A version 3 log (written before the
// rule) replays as it applied.
func TestPrivilegedModulesByCommandVersion(t *testing.T) {
	evil := catalogue.Source{File: "evil.yaml", Data: "name: evil\nfiles:\n  - {path: /etc/cron.d/evil, content: \"* * * * * root id\\n\"}\n"}
	r := NewRecord()
	mustApply(t, r, genesisCmd(t, Adopted))
	_, err := Apply(r, cmdV(t, 5, OpCatalogueAdd, t0.Add(time.Minute), CatalogueAdd{Source: evil}))
	if err == nil || !strings.Contains(err.Error(), "files[0].path") || !strings.Contains(err.Error(), "privileged: true") {
		t.Fatalf("catalogue.add of an unsaid cron module: %v", err)
	}
	if r.Catalogue["evil"] != nil {
		t.Fatal("the refused module is in the catalogue")
	}
	said := catalogue.Source{File: "evil.yaml", Data: "name: evil\nprivileged: true\n" + strings.TrimPrefix(evil.Data, "name: evil\n")}
	mustApply(t, r, cmdV(t, 5, OpCatalogueAdd, t0.Add(2*time.Minute), CatalogueAdd{Source: said}))

	app := catalogue.Source{File: "app.yaml", Data: "name: app\nsettings: {dir: /etc/app}\nfiles:\n  - {path: \"${dir}/job\", content: x}\n"}
	mustApply(t, r, cmdV(t, 5, OpCatalogueAdd, t0.Add(3*time.Minute), CatalogueAdd{Source: app}))
	mustApply(t, r, cmdV(t, 5, OpModuleAssign, t0.Add(4*time.Minute), ModuleOnNode{Node: "hub", Module: "app"}))
	_, err = Apply(r, cmdV(t, 5, OpSettingsSet, t0.Add(5*time.Minute), SetSettings{Node: "hub", Values: map[string]string{"app.dir": "/etc/cron.d"}}))
	if err == nil || !strings.Contains(err.Error(), "from setting app.dir") {
		t.Fatalf("node.settings moving app's file into /etc/cron.d: %v", err)
	}
	if got := r.Nodes["hub"].Settings["app.dir"]; got != "" {
		t.Fatalf("the refused setting is in the record: %q", got)
	}

	// A log written before the rule: the same commands at version 3 all apply.
	old := NewRecord()
	mustApply(t, old, genesisCmd(t, Adopted))
	mustApply(t, old, cmdV(t, 3, OpCatalogueAdd, t0.Add(time.Minute), CatalogueAdd{Source: evil}))
	mustApply(t, old, cmdV(t, 3, OpModuleAssign, t0.Add(2*time.Minute), ModuleOnNode{Node: "hub", Module: "evil"}))
	mustApply(t, old, cmdV(t, 3, OpCatalogueAdd, t0.Add(3*time.Minute), CatalogueAdd{Source: app}))
	mustApply(t, old, cmdV(t, 3, OpModuleAssign, t0.Add(4*time.Minute), ModuleOnNode{Node: "hub", Module: "app"}))
	mustApply(t, old, cmdV(t, 3, OpSettingsSet, t0.Add(5*time.Minute), SetSettings{Node: "hub", Values: map[string]string{"app.dir": "/etc/cron.d"}}))

	// And at version 4 an assign of the module, with a node's setting making it root, is refused.
	r2 := NewRecord()
	mustApply(t, r2, genesisCmd(t, Adopted))
	mustApply(t, r2, cmdV(t, 5, OpCatalogueAdd, t0.Add(time.Minute), CatalogueAdd{Source: app}))
	mustApply(t, r2, cmdV(t, 3, OpSettingsSet, t0.Add(2*time.Minute), SetSettings{Node: "hub", Values: map[string]string{"app.dir": "/etc/sudoers.d"}}))
	if _, err := Apply(r2, cmdV(t, 5, OpModuleAssign, t0.Add(3*time.Minute), ModuleOnNode{Node: "hub", Module: "app"})); err == nil || !strings.Contains(err.Error(), "sudo") {
		t.Fatalf("module.assign where the node's setting puts the file in sudoers.d: %v", err)
	}
}
