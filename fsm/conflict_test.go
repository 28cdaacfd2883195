package fsm

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"meshd/catalogue"
)

// Two modules whose paths and container names differ by default but become one with a node's
// settings: the setting that would make them collide is refused, naming the manifest's file and
// line, and the record is unchanged. (They write outside their own places, so they are
// privileged, with the operator's word.)
func TestSettingsCannotMakeTwoModulesCollide(t *testing.T) {
	r := NewRecord()
	mustApply(t, r, genesisCmd(t, Adopted))
	add := func(file, src string) {
		mustApply(t, r, cmd(t, OpCatalogueAdd, t0, CatalogueAdd{Source: catalogue.Source{File: file, Data: src}, Privileged: true}))
	}
	add("one.yaml", "name: one\nprivileged: true\nsettings: {conf: one.conf, ctr: one}\nfiles:\n  - path: /etc/shared/${conf}\n    content: x\ncontainers:\n  - name: ${ctr}\n    image: lab/echo:1\n")
	add("two.yaml", "name: two\nprivileged: true\nsettings: {d: two.conf, n: x}\nfiles:\n  - path: /etc/${d}\n    content: y\ncontainers:\n  - name: two-${n}\n    image: lab/echo:1\n")
	mustApply(t, r, cmd(t, OpModuleAssign, t0.Add(time.Minute), ModuleOnNode{Node: "hub", Module: "one"}))
	mustApply(t, r, cmd(t, OpModuleAssign, t0.Add(time.Minute), ModuleOnNode{Node: "hub", Module: "two"}))
	before := marshal(t, r)
	for _, c := range []struct {
		values map[string]string
		says   string
	}{
		{map[string]string{"two.d": "shared/one.conf"}, "two.yaml:5: files[0].path: /etc/shared/one.conf is declared also by module one"},
		{map[string]string{"one.ctr": "two-x"}, "two.yaml:8: containers[0].name: container two-x is declared also by module one"},
		{map[string]string{"one.ctr": "../../x y;rm -rf /"}, `one.yaml:8: containers[0].name: "../../x y;rm -rf /" is not a container name`},
	} {
		_, err := Apply(r, cmd(t, OpSettingsSet, t0.Add(time.Hour), SetSettings{Node: "hub", Values: c.values}))
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("settings %v: %v; want it to say %q", c.values, err, c.says)
		}
	}
	if !bytes.Equal(before, marshal(t, r)) {
		t.Fatal("a refused setting changed the record")
	}
}
