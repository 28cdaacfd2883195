package catalogue

import (
	"errors"
	"strings"
	"testing"
)

const good = `name: webapp
settings:
  port: 8080
files:
  - path: /etc/webapp/app.conf
    content: |
      listen ${port}
    mode: "0644"
containers:
  - name: webapp
    image: lab/echo:1
    env: {GREETING: hello}
    ports: ["${port}:8080/tcp"]
    volumes: ["/srv/webapp:/data"]
    restart: unless-stopped
openings:
  - {port: "${port}", proto: tcp, from: anywhere, path: forwarded}
`

func TestParseGood(t *testing.T) {
	m, err := Parse("webapp.yaml", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	r, err := m.Resolve(map[string]string{"port": "9090"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Files[0].Content != "listen 9090\n" || r.Containers[0].Ports[0] != "9090:8080/tcp" || r.Openings[0].Port != 9090 ||
		len(r.Containers[0].Volumes) != 1 || r.Containers[0].Volumes[0] != "/srv/webapp:/data" || r.Containers[0].Env["GREETING"] != "hello" {
		t.Fatalf("node setting not filled in: %+v", r)
	}
	if got := m.PortSettings(); len(got) != 1 || got[0] != "port" {
		t.Fatalf("port settings = %v", got)
	}
}

// Each bad input is refused with the file, the line and the field named.
func TestParseRefuses(t *testing.T) {
	cases := []struct {
		name, old, new string
		line           int
		field, says    string
	}{
		{"unknown field", "    mode: \"0644\"", "    mode: \"0644\"\n    owner_: root", 9, "files[0].owner_", "unknown field"},
		{"port out of range", "  port: 8080", "  port: 70000", 17, "openings[0].port", "out of range"},
		{"relative path", "/etc/webapp/app.conf", "etc/webapp/app.conf", 5, "files[0].path", "relative"},
		{"unclean path", "/etc/webapp/app.conf", "/etc/webapp/../app.conf", 5, "files[0].path", "not clean"},
		{"under proc", "/etc/webapp/app.conf", "/proc/sys/net/x", 5, "files[0].path", "under /proc"},
		{"under sys", "/etc/webapp/app.conf", "/sys/x", 5, "files[0].path", "under /sys"},
		{"under dev", "/etc/webapp/app.conf", "/dev/sda", 5, "files[0].path", "under /dev"},
		{"undeclared setting", "listen ${port}", "listen ${address}", 6, "files[0].content", "${address}"},
		{"unknown from", "from: anywhere", "from: everywhere", 17, "openings[0].from", "everywhere"},
		{"unknown path", "path: forwarded", "path: sideways", 17, "openings[0].path", "sideways"},
		{"bad volume host path", "/srv/webapp:/data", "srv/webapp:/data", 14, "containers[0].volumes[0]", "relative"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := strings.Replace(good, c.old, c.new, 1)
			if src == good {
				t.Fatalf("case did not change the manifest")
			}
			m, err := Parse("webapp.yaml", []byte(src))
			if err == nil {
				t.Fatalf("accepted: %+v", m)
			}
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("error is %T, not Errors: %v", err, err)
			}
			for _, e := range errs {
				if e.Field == c.field && e.Line == c.line && strings.Contains(e.Msg, c.says) && e.File == "webapp.yaml" {
					return
				}
			}
			t.Fatalf("no error naming webapp.yaml:%d %s (%q); got:\n%v", c.line, c.field, c.says, err)
		})
	}
}

func TestParseReportsEveryProblem(t *testing.T) {
	src := strings.Replace(strings.Replace(good, "from: anywhere", "from: nowhere", 1), "restart: unless-stopped", "restart: sometimes", 1)
	_, err := Parse("webapp.yaml", []byte(src))
	if err == nil || !strings.Contains(err.Error(), "nowhere") || !strings.Contains(err.Error(), "sometimes") {
		t.Fatalf("want both problems named, got %v", err)
	}
}

// docker run and Compose accept on-failure with a retry limit; the catalogue refused it. It is
// a policy now, and a limit on another policy, or not a number, is still refused, named.
func TestRestartRetryLimit(t *testing.T) {
	for policy, refused := range map[string]string{
		"on-failure:5": "", "on-failure": "", "on-failure:0": "",
		"on-failure:x": "retry limit", "always:3": "only on-failure takes a retry limit", "on-failure:-1": "retry limit",
	} {
		_, err := Parse("webapp.yaml", []byte(strings.Replace(good, "restart: unless-stopped", "restart: "+policy, 1)))
		switch {
		case refused == "" && err != nil:
			t.Errorf("restart %s refused: %v", policy, err)
		case refused != "" && (err == nil || !strings.Contains(err.Error(), ".restart") || !strings.Contains(err.Error(), refused)):
			t.Errorf("restart %s: %v, want refused naming %q", policy, err, refused)
		}
	}
}

func TestCatalogueConflicts(t *testing.T) {
	cat, err := Default()
	if err != nil {
		t.Fatalf("default catalogue: %v", err)
	}
	for _, want := range []string{"mesh", "store", "broker", "registry", "webapp", "notes"} {
		if cat[want] == nil {
			t.Errorf("default catalogue lacks %s", want)
		}
	}
	clash := strings.Replace(good, "name: webapp\n", "name: webapp2\n", 1)
	m, err := Parse("webapp2.yaml", []byte(clash))
	if err != nil {
		t.Fatal(err)
	}
	err = cat.CheckAdd(m)
	if err == nil || !strings.Contains(err.Error(), "webapp2.yaml:5: files[0].path: /etc/webapp/app.conf is already declared by module webapp") ||
		!strings.Contains(err.Error(), "container webapp is already declared by module webapp") {
		t.Fatalf("want both clashes named, got %v", err)
	}
	// A module replacing its own earlier version is not a clash.
	same, _ := Parse("webapp.yaml", []byte(good))
	if err := cat.CheckAdd(same); err != nil {
		t.Fatalf("updating a module refused: %v", err)
	}
}

func TestSettingKeyAndFoundationPorts(t *testing.T) {
	cat, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{"registry": "registry.port", "bus": "mesh.bus", "broker.management": "broker.management", "tunnel": "mesh.tunnel"} {
		got, err := cat.SettingKey(in)
		if err != nil || got != want {
			t.Errorf("SettingKey(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := cat.SettingKey("regsitry"); err == nil || !strings.Contains(err.Error(), "registry.port") {
		t.Errorf("unknown key should list the foundation ports, got %v", err)
	}
	got := strings.Join(cat.FoundationPorts(), " ")
	want := "broker.management broker.port mesh.bus mesh.gossip mesh.raft mesh.tunnel registry.port store.port"
	if got != want {
		t.Errorf("foundation ports = %s\nwant %s", got, want)
	}
	if s := cat.Suggest("webap"); len(s) != 1 || s[0] != "webapp" {
		t.Errorf("Suggest(webap) = %v", s)
	}
}

// A foundation module's opening from private must be guarded: on an adopted node behind a found
// firewall that filters only incoming traffic, nothing else would keep it off the outside.
func TestFoundationPrivateOpeningMustBeGuarded(t *testing.T) {
	src := strings.Replace(good, "settings:", "foundation: true\nsettings:", 1)
	src = strings.Replace(src, "from: anywhere", "from: private", 1)
	_, err := Parse("webapp.yaml", []byte(src))
	var errs Errors
	if !errors.As(err, &errs) || len(errs) != 1 || errs[0].Field != "openings[0].guarded" || errs[0].Line != 18 {
		t.Fatalf("want one error at webapp.yaml:18 openings[0].guarded, got %v", err)
	}
	if !strings.Contains(err.Error(), "guarded: true") {
		t.Fatalf("the error does not say what to write: %v", err)
	}
	if _, err := Parse("webapp.yaml", []byte(strings.Replace(src, "path: forwarded}", "path: forwarded, guarded: true}", 1))); err != nil {
		t.Fatalf("a guarded foundation opening from private is refused: %v", err)
	}
	// Every shipped foundation module passes the rule (the broker's port and raft included).
	if _, err := Default(); err != nil {
		t.Fatal(err)
	}
}
