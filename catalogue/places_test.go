package catalogue

import (
	"fmt"
	"strings"
	"testing"
)

// issue34Files are the files issue 34 (finding 1) took into the catalogue as an ordinary module,
// each root on the machine, past the deny list.
var issue34Files = []string{
	"/usr/bin/sudo", "/usr/sbin/cron", "/etc/sudo.conf", "/etc/ld.so.conf", "/etc/environment",
	"/etc/logrotate.d/x", "/etc/sysctl.d/99-x.conf", "/etc/tmpfiles.d/x.conf",
	"/etc/udev/rules.d/99-x.rules", "/etc/modprobe.d/x.conf", "/etc/anacrontab",
	"/etc/dpkg/dpkg.cfg.d/x", "/etc/update-motd.d/99-x", "/etc/polkit-1/rules.d/00-x.rules",
	"/usr/lib/x86_64-linux-gnu/security/pam_x.so",
	"/var/run/systemd/system/x.service", "/run/systemd/system/x.service",
	"/bin/x", "/sbin/x", "/lib/x86_64-linux-gnu/security/pam_x.so", "/lib64/ld-linux-x86-64.so.2",
}

// issue34Mounts are the host paths issue 34 mounted read-write into an ordinary module's container.
var issue34Mounts = []string{
	"/usr/bin", "/usr/sbin", "/usr/lib", "/lib64", "/run/dbus/system_bus_socket", "/var/run/dbus",
	"/var/run/containerd", "/run/docker", "/var/run/systemd", "/run/systemd", "/bin", "/etc/cron.d", "/var/log",
}

// Issue 34, finding 1: every file and mount the deny list let through is refused to a module that
// does not say privileged: true, naming the field, where the path is as the system spells it
// (both spellings of /run), and privileged: true; said, it is accepted and named with why.
func TestAllowlistRefusesEveryPlaceOutsideTheModulesOwn(t *testing.T) {
	for _, p := range issue34Files {
		body := fmt.Sprintf("files: [{path: %q, content: x}]", p)
		refusedUnlessPrivileged(t, "evil", body, "files[0].path", p)
	}
	for _, p := range issue34Mounts {
		body := fmt.Sprintf("containers: [{name: c, image: i, volumes: [%q]}]", p+":/h")
		refusedUnlessPrivileged(t, "evil", body, "containers[0].volumes[0]", p)
	}
	// Both spellings of /run are judged where they lead, and named so.
	m := parse(t, "name: evil\nfiles: [{path: /var/run/systemd/system/x.service, content: x}]\n")
	if err := m.CheckPlaces(nil); err == nil || !strings.Contains(err.Error(), "(that is, /run/systemd/system/x.service)") ||
		!strings.Contains(err.Error(), "systemd runs its units as root") {
		t.Fatalf("/var/run/systemd: %v", err)
	}
	// A setting moves nothing out: the path is judged filled in, naming the setting.
	m = parse(t, "name: app\nsettings: {dir: /etc/app}\nfiles: [{path: \"${dir}/job\", content: x}]\n")
	if err := m.CheckPlaces(nil); err != nil {
		t.Fatalf("app in /etc/app: %v", err)
	}
	if err := m.CheckPlaces(map[string]string{"dir": "/etc/cron.d"}); err == nil || !strings.Contains(err.Error(), "from setting app.dir") {
		t.Fatalf("a setting moving app's file into /etc/cron.d: %v", err)
	}
}

// A module named as the system names its own directories has no place of its own: ssh may not
// write /etc/ssh, systemd may not write /etc/systemd; a service's own name is its own.
func TestSystemNamesHaveNoPlaces(t *testing.T) {
	for _, c := range []struct{ name, path string }{
		{"ssh", "/etc/ssh/sshd_config.d/x.conf"},
		{"systemd", "/etc/systemd/system/x.service"},
		{"systemd", "/var/lib/systemd/x"},
		{"docker", "/etc/docker/daemon.json"},
		{"meshd", "/opt/meshd/x"},
		{"apt", "/etc/apt/apt.conf.d/99x"},
		{"udev", "/etc/udev/rules.d/x.rules"},
		{"polkit-1", "/etc/polkit-1/rules.d/x.rules"},
		{"security", "/etc/security/limits.conf"},
	} {
		refusedUnlessPrivileged(t, c.name, fmt.Sprintf("files: [{path: %q, content: x}]", c.path), "files[0].path", c.path)
	}
	if Places("ssh") != nil || Places("nginx") == nil {
		t.Fatalf("places of ssh %q, of nginx %q", Places("ssh"), Places("nginx"))
	}
}

// The safe places stay unprivileged: a module's own directories, its data under meshd's, the
// shipped catalogue; a neighbour's directory or a longer name's is not its own.
func TestOwnPlacesNeedNoPrivilege(t *testing.T) {
	m := parse(t, `name: nginx
files:
  - {path: /etc/nginx/nginx.conf, content: x}
  - {path: /srv/nginx/www/index.html, content: x}
  - {path: /var/lib/nginx/state, content: x}
  - {path: /var/log/nginx/keep, content: x}
  - {path: /opt/nginx/bin/tool, content: x, mode: "0755"}
containers:
  - {name: nginx, image: i, volumes: ["/etc/nginx:/etc/nginx:ro", "/srv/nginx:/srv", "/var/lib/meshd/nginx:/d", "/var/log/nginx:/l"]}
`)
	if err := m.CheckPlaces(nil); err != nil {
		t.Fatalf("nginx in its own places: %v", err)
	}
	r, err := m.Resolve(nil)
	if err != nil || len(r.RootEquivalent()) != 0 {
		t.Fatalf("nginx resolves %v, root-equivalent %q", err, r.RootEquivalent())
	}
	c, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range c.Names() {
		if err := c[name].CheckPlaces(nil); err != nil {
			t.Errorf("shipped module %s: %v", name, err)
		}
	}
	for _, p := range []string{"/etc/nginx-evil/x", "/etc/nginxx", "/srv/web/x", "/etc/nginx/../cron.d/x", "/var/lib/meshd/raft"} {
		if Outside("nginx", p) == "" {
			t.Errorf("%s is nginx's own", p)
		}
	}
	if got := Normalise("/var/run/../run/x/./y"); got != "/run/x/y" {
		t.Errorf("Normalise: %s", got)
	}
}

func parse(t *testing.T, src string) *Module {
	t.Helper()
	m, err := Parse("m.yaml", []byte(src))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return m
}

// refusedUnlessPrivileged checks module name declaring body is refused by the allowlist at field,
// naming path, and that saying privileged: true has it accepted and named root-equivalent.
func refusedUnlessPrivileged(t *testing.T, name, body, field, path string) {
	t.Helper()
	m := parse(t, "name: "+name+"\n"+body+"\n")
	err := m.CheckPlaces(nil)
	if err == nil || !strings.Contains(err.Error(), field) || !strings.Contains(err.Error(), path) ||
		!strings.Contains(err.Error(), "outside the module's own places") || !strings.Contains(err.Error(), "privileged: true") {
		t.Errorf("%s declaring %s: want a refusal of %s, got %v", name, path, field, err)
		return
	}
	m = parse(t, "name: "+name+"\nprivileged: true\n"+body+"\n")
	if err := m.CheckPlaces(nil); err != nil {
		t.Errorf("%s says privileged: true and is refused: %v", name, err)
	}
	r, err := m.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	if eq := r.RootEquivalent(); len(eq) == 0 || !strings.Contains(strings.Join(eq, "\n"), path) {
		t.Errorf("%s privileged: root-equivalent %q does not name %s", name, eq, path)
	}
}
