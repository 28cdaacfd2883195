package fsm

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"meshd/catalogue"
)

func src(name, body string) catalogue.Source {
	return catalogue.Source{File: name + ".yaml", Data: "name: " + name + "\n" + body}
}

// Issue 34, finding 1, as the record applies it: at version 6 a module is kept to its own places.
// The files the deny list of version 5 let in (a sudo.conf; a unit under /var/run/systemd, the
// other spelling of /run/systemd) are refused, and so is a module named ssh writing /etc/ssh; a
// service in its own places is taken in; a module that says privileged: true is added only with
// the operator's word, recorded with who in the record and its history; added again without it,
// the word is dropped.
func TestAllowlistAtCommandVersion6(t *testing.T) {
	r := NewRecord()
	mustApply(t, r, genesisCmd(t, Adopted))
	v5 := NewRecord()
	mustApply(t, v5, genesisCmd(t, Adopted))
	for _, p := range []string{"/etc/sudo.conf", "/var/run/systemd/system/x.service", "/usr/bin/sudo", "/etc/sysctl.d/99-x.conf"} {
		s := src("evil", "files: [{path: "+p+", content: x}]\n")
		_, err := Apply(r, cmd(t, OpCatalogueAdd, t0.Add(time.Minute), CatalogueAdd{Source: s}))
		if err == nil || !strings.Contains(err.Error(), "files[0].path") || !strings.Contains(err.Error(), "outside the module's own places") {
			t.Errorf("version 6 catalogue.add of a file at %s: %v", p, err)
		}
		// The attack as version 5 judged it: taken in as an ordinary module.
		mustApply(t, v5, cmdV(t, 5, OpCatalogueAdd, t0.Add(time.Minute), CatalogueAdd{Source: s}))
	}
	_, err := Apply(r, cmd(t, OpCatalogueAdd, t0, CatalogueAdd{Source: src("ssh", "files: [{path: /etc/ssh/sshd_config.d/x.conf, content: x}]\n")}))
	if err == nil || !strings.Contains(err.Error(), "ssh is the system's own name") {
		t.Errorf("a module named ssh writing /etc/ssh: %v", err)
	}
	g := Genesis{Node: "hub", ID: "id-hub", Mode: Adopted, Advertise: "198.51.100.1",
		Catalogue: append(catalogue.DefaultSources(), src("evil", "files: [{path: /etc/sudo.conf, content: x}]\n"))}
	if _, err := Apply(NewRecord(), cmd(t, OpGenesis, t0, g)); err == nil || !strings.Contains(err.Error(), "outside the module's own places") {
		t.Errorf("a genesis catalogue with a module writing /etc/sudo.conf: %v", err)
	}
	mustApply(t, r, cmd(t, OpCatalogueAdd, t0, CatalogueAdd{Source: src("nginx",
		"files: [{path: /etc/nginx/nginx.conf, content: x}]\ncontainers: [{name: nginx, image: i, volumes: [\"/srv/nginx:/srv\"]}]\n")}))

	cron := "privileged: true\nfiles: [{path: /etc/cron.d/ops, content: x}]\n"
	if _, err := ApplyAt(r, 10, cmd(t, OpCatalogueAdd, t0, CatalogueAdd{Source: src("ops", cron)})); err == nil || !strings.Contains(err.Error(), "--privileged") {
		t.Fatalf("a privileged module without the operator's word: %v", err)
	}
	if _, err := ApplyAt(r, 11, cmd(t, OpCatalogueAdd, t0, CatalogueAdd{Source: src("nginx", "files: [{path: /etc/nginx/a, content: x}]\n"), Privileged: true})); err == nil ||
		!strings.Contains(err.Error(), "does not say privileged: true") {
		t.Fatalf("the word for a module that does not say it: %v", err)
	}
	if _, err := ApplyAt(r, 12, cmdBy(t, OpCatalogueAdd, t0.Add(time.Hour), "operator alice", CatalogueAdd{Source: src("ops", cron), Privileged: true})); err != nil {
		t.Fatal(err)
	}
	if g := r.Privileged["ops"]; g == nil || g.By != "operator alice" || !g.At.Equal(t0.Add(time.Hour)) {
		t.Fatalf("the word is recorded as %+v", g)
	}
	last := r.History.Events[len(r.History.Events)-1]
	if last.By != "operator alice" || !strings.Contains(last.What, "privileged") {
		t.Fatalf("history: %+v", last)
	}
	mustApply(t, r, cmd(t, OpModuleAssign, t0, ModuleOnNode{Node: "hub", Module: "ops"}))
	if d, err := Compose(r, "hub"); err != nil || confinedOf(d, "ops") != "false" || len(r.Unconfirmed()) != 0 {
		t.Fatalf("a privileged module is confined %s (%v), unconfirmed %v", confinedOf(d, "ops"), err, r.Unconfirmed())
	}
	mustApply(t, r, cmd(t, OpModuleUnassign, t0, ModuleOnNode{Node: "hub", Module: "ops"}))
	mustApply(t, r, cmd(t, OpCatalogueAdd, t0, CatalogueAdd{Source: src("ops", "files: [{path: /etc/ops/ops.conf, content: x}]\n")}))
	if r.Privileged != nil {
		t.Fatalf("added again without the word, the word stays: %v", r.Privileged)
	}

	// A setting cannot move an accepted module out, at node.settings or at module.assign.
	mustApply(t, r, cmd(t, OpCatalogueAdd, t0, CatalogueAdd{Source: src("app", "settings: {dir: /etc/app}\nfiles: [{path: \"${dir}/job\", content: x}]\n")}))
	mustApply(t, r, cmd(t, OpModuleAssign, t0, ModuleOnNode{Node: "hub", Module: "app"}))
	if _, err := Apply(r, cmd(t, OpSettingsSet, t0, SetSettings{Node: "hub", Values: map[string]string{"app.dir": "/var/run/systemd/system"}})); err == nil ||
		!strings.Contains(err.Error(), "from setting app.dir") {
		t.Fatalf("node.settings moving app into /var/run/systemd: %v", err)
	}
	if d, _ := Compose(r, "hub"); confinedOf(d, "app") != "true" || confinedOf(d, "nginx") != "" {
		t.Fatalf("app confined %q", confinedOf(d, "app"))
	}
}

// confinedOf says whether d's first resource of module is confined ("true", "false"), or "".
func confinedOf(d *Declaration, module string) string {
	if d == nil {
		return ""
	}
	for _, res := range d.Resources {
		if res.Module == module && res.Kind != KindOpening {
			b, _ := json.Marshal(res.Confined)
			return string(b)
		}
	}
	return ""
}

// Issue 34, finding 1, at upgrade: modules a version 5 log took in are judged again by the
// allowlist. One that now needs the word (a service writing another's directory, a privileged
// module added without the word) keeps working where it is assigned (not confined), is listed
// unconfirmed, may not be assigned anywhere more, and is confirmed by module.confirm, recorded
// with who; a module in its own places needs nothing.
func TestUpgradeJudgesRecordedModulesAgain(t *testing.T) {
	r := NewRecord()
	mustApply(t, r, cmdV(t, 5, OpGenesis, t0, Genesis{Node: "hub", ID: "id-hub", Mode: Adopted, Advertise: "198.51.100.1",
		Catalogue: catalogue.DefaultSources(), Assign: []string{"broker", "mesh", "registry", "store"}}))
	for _, s := range []catalogue.Source{
		src("web", "files: [{path: /etc/nginx/nginx.conf, content: x}]\n"),
		src("ops", "privileged: true\nfiles: [{path: /etc/sudoers.d/ops, content: x}]\n"),
		src("app", "files: [{path: /etc/app/app.conf, content: x}]\n"),
	} {
		mustApply(t, r, cmdV(t, 5, OpCatalogueAdd, t0, CatalogueAdd{Source: s}))
	}
	mustApply(t, r, cmdV(t, 5, OpModuleAssign, t0, ModuleOnNode{Node: "hub", Module: "web"}))
	mustApply(t, r, cmdV(t, 5, OpModuleTake, t0, ModuleOnNode{Node: "hub", Module: "web"}))
	mustApply(t, r, cmdV(t, 5, OpModuleAssign, t0, ModuleOnNode{Node: "hub", Module: "app"}))

	un := r.Unconfirmed()
	if len(un) != 2 || un[0].Module != "ops" || un[1].Module != "web" || !strings.Contains(strings.Join(un[1].Reaches, " "), "/etc/nginx/nginx.conf") {
		t.Fatalf("unconfirmed after the upgrade: %+v", un)
	}
	d, err := Compose(r, "hub")
	if err != nil || confinedOf(d, "web") != "false" || confinedOf(d, "app") != "true" || confinedOf(d, "registry") != "true" {
		t.Fatalf("web confined %s, app %s, registry %s (%v): web must keep working, the rest be confined",
			confinedOf(d, "web"), confinedOf(d, "app"), confinedOf(d, "registry"), err)
	}
	mustApply(t, r, cmd(t, OpSettingsSet, t0, SetSettings{Node: "hub", Values: map[string]string{"registry.port": "5002"}}))
	if _, err := Apply(r, cmd(t, OpModuleAssign, t0, ModuleOnNode{Node: "hub", Module: "ops"})); err == nil || !strings.Contains(err.Error(), "meshd module confirm ops") {
		t.Fatalf("assigning an unconfirmed module: %v", err)
	}
	if _, err := Apply(r, cmd(t, OpModuleConfirm, t0, ModuleConfirm{Module: "app"})); err == nil || !strings.Contains(err.Error(), "needs no privilege") {
		t.Fatalf("confirming a module in its own places: %v", err)
	}
	if _, err := Apply(r, cmdV(t, 5, OpModuleConfirm, t0, ModuleConfirm{Module: "web"})); err == nil {
		t.Fatal("a version 5 module.confirm applied")
	}
	if _, err := ApplyAt(r, 20, cmdBy(t, OpModuleConfirm, t0.Add(time.Hour), "operator alice", ModuleConfirm{Module: "web"})); err != nil {
		t.Fatal(err)
	}
	if un := r.Unconfirmed(); len(un) != 1 || un[0].Module != "ops" || r.Privileged["web"] == nil || r.Privileged["web"].By != "operator alice" {
		t.Fatalf("after confirming web: unconfirmed %+v, word %+v", un, r.Privileged["web"])
	}
	last := r.History.Events[len(r.History.Events)-1]
	if last.Op != OpModuleConfirm || last.By != "operator alice" || last.Module != "web" {
		t.Fatalf("history: %+v", last)
	}
	if _, err := Apply(r, cmd(t, OpModuleConfirm, t0, ModuleConfirm{Module: "web"})); err == nil || !strings.Contains(err.Error(), "by operator alice") {
		t.Fatalf("confirming twice: %v", err)
	}
	b, err := r.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := UnmarshalRecord(b)
	if err != nil || back.check() != nil || back.Privileged["web"] == nil {
		t.Fatalf("the word does not survive a snapshot: %v", err)
	}
}
