package catalogue

import (
	"strings"
	"testing"
)

// Issue 26, finding 6, played from a manifest against the deny list of command versions 4 and 5
// (CheckDenied, kept for their replay): a module declaring a cron file, a sudoers drop-in, an
// authorized_keys, a setuid file, or mounting the engine's socket, meshd's socket directory,
// the system's programs, root's home or the engine's state (the root and /etc are meshd's to
// refuse outright) was accepted like any other and made whoever could
// add a module root on every machine it was assigned to. Each is refused now, naming the field and
// why, unless the module says privileged: true; the same declaration made by a setting is refused
// too; an ordinary module is untouched.
func TestRootEquivalentDeclarationsNeedPrivileged(t *testing.T) {
	cases := []struct{ name, body, field, want string }{
		{"cron", `files: [{path: /etc/cron.d/evil, content: "* * * * * root sh /tmp/x\n"}]`, "files[0].path", "cron runs it as root"},
		{"sudoers", `files: [{path: /etc/sudoers.d/evil, content: "x ALL=(ALL) NOPASSWD: ALL\n"}]`, "files[0].path", "sudo reads it"},
		{"keys", `files: [{path: /home/ops/.ssh/authorized_keys, content: "ssh-ed25519 AAAA\n"}]`, "files[0].path", "sshd lets in"},
		{"unit", `files: [{path: /etc/systemd/system/evil.service, content: "[Service]\n"}]`, "files[0].path", "systemd runs"},
		{"setuid", `files: [{path: /opt/tool/run, content: "x", mode: "4755"}]`, "files[0].mode", "setuid"},
		{"setgid", `files: [{path: /opt/tool/run, content: "x", mode: "2755"}]`, "files[0].mode", "setgid"},
		{"docker.sock", `containers: [{name: c, image: i, volumes: ["/var/run/docker.sock:/var/run/docker.sock"]}]`, "containers[0].volumes[0]", "engine's socket"},
		{"run", `containers: [{name: c, image: i, volumes: ["/run:/host/run"]}]`, "containers[0].volumes[0]", "/run/docker.sock"},
		{"meshd socket", `containers: [{name: c, image: i, volumes: ["/run/meshd:/s"]}]`, "containers[0].volumes[0]", "operator socket"},
		{"usr", `containers: [{name: c, image: i, volumes: ["/usr:/host/usr"]}]`, "containers[0].volumes[0]", "programs"},
		{"root home", `containers: [{name: c, image: i, volumes: ["/root/.ssh:/k"]}]`, "containers[0].volumes[0]", "root's home"},
		{"docker state", `containers: [{name: c, image: i, volumes: ["/var/lib/docker:/d:ro"]}]`, "containers[0].volumes[0]", "engine's state"},
		{"boot", `containers: [{name: c, image: i, volumes: ["/boot/grub:/g"]}]`, "containers[0].volumes[0]", "kernel"},
		{"by a setting", "settings: {dir: /etc/cron.d}\nfiles: [{path: \"${dir}/job\", content: x}]", "files[0].path", "from setting evil.dir"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, err := Parse("evil.yaml", []byte("name: evil\n"+c.body+"\n"))
			if err != nil {
				t.Fatalf("parse (which a replayed log still applies as before): %v", err)
			}
			err = m.CheckDenied(nil)
			if err == nil || !strings.Contains(err.Error(), c.field) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "privileged: true") {
				t.Fatalf("want a refusal of %s naming %q and privileged: true, got %v", c.field, c.want, err)
			}
			m, err = Parse("evil.yaml", []byte("name: evil\nprivileged: true\n"+c.body+"\n"))
			if err == nil {
				err = m.CheckDenied(nil)
			}
			if err != nil {
				t.Fatalf("the module says privileged: true and is still refused: %v", err)
			}
			r, err := m.Resolve(nil)
			if err != nil {
				t.Fatal(err)
			}
			if !r.Privileged || len(r.RootEquivalent()) == 0 {
				t.Fatalf("a privileged module resolves as privileged %v, root-equivalent %q", r.Privileged, r.RootEquivalent())
			}
		})
	}
	// A setting at assign time cannot make an accepted module root-equivalent either.
	m, err := Parse("app.yaml", []byte("name: app\nsettings: {dir: /srv/app}\nfiles: [{path: \"${dir}/app.conf\", content: x}]\n"+
		"containers: [{name: app, image: i, volumes: [\"${dir}:/data\", \"/etc/app:/config:ro\"]}]\n"))
	if err != nil {
		t.Fatalf("an ordinary module is refused: %v", err)
	}
	if r, err := m.Resolve(nil); err != nil || r.Privileged || len(r.RootEquivalent()) != 0 {
		t.Fatalf("an ordinary module resolves as %v %v, root-equivalent %q", r, err, r.RootEquivalent())
	}
	if err := m.CheckDenied(nil); err != nil {
		t.Fatalf("an ordinary module needs privilege: %v", err)
	}
	if err := m.CheckDenied(map[string]string{"dir": "/etc/sudoers.d"}); err == nil || !strings.Contains(err.Error(), "from setting app.dir") {
		t.Fatalf("a setting that moves the file into sudoers.d: %v", err)
	}
}

// The shipped catalogue needs no privilege.
func TestShippedCatalogueIsNotPrivileged(t *testing.T) {
	c, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range c.Names() {
		if c[name].Privileged {
			t.Errorf("shipped module %s says privileged", name)
		}
	}
}
