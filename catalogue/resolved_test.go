package catalogue

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// settable is a module whose container name, file paths and volume come from settings.
const settable = `name: tmpl
settings:
  cname: web
  conf: a.conf
  other: b.conf
  data: tmpl
files:
  - path: /etc/tmpl/${conf}
    content: x
  - path: /etc/tmpl/${other}
    content: y
containers:
  - name: ${cname}
    image: lab/echo:1
    volumes: ["/var/lib/meshd/${data}:/data"]
`

// wantFieldErr finds an error naming file:line field and saying says.
func wantFieldErr(t *testing.T, err error, file string, line int, field, says string) {
	t.Helper()
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("error is %T, not Errors: %v", err, err)
	}
	for _, e := range errs {
		if e.File == file && e.Line == line && e.Field == field && strings.Contains(e.Msg, says) {
			if !strings.HasPrefix(e.Error(), fmt.Sprintf("%s:%d: ", file, line)) {
				t.Fatalf("error does not read file:line first: %q", e.Error())
			}
			return
		}
	}
	t.Fatalf("no error naming %s:%d %s (%q); got:\n%v", file, line, field, says, err)
}

// Once a node's settings are filled in, every value is checked again: a container name, two
// paths that became one, a path with a newline or NUL, a path of meshd's own. Each refusal names
// the file and the line.
func TestResolveChecksWhatSettingsMade(t *testing.T) {
	m, err := Parse("tmpl.yaml", []byte(settable))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Resolve(nil); err != nil {
		t.Fatalf("the defaults are refused: %v", err)
	}
	for _, c := range []struct {
		name   string
		values map[string]string
		line   int
		field  string
		says   string
	}{
		{"empty container name", map[string]string{"cname": ""}, 13, "containers[0].name", `"" is not a container name`},
		{"container name with a path and a command", map[string]string{"cname": "../../x y;rm -rf /"}, 13, "containers[0].name", "is not a container name"},
		{"two paths become one", map[string]string{"other": "a.conf"}, 10, "files[1].path", "already declared by files[0]"},
		{"newline in a path", map[string]string{"conf": "a\nb"}, 8, "files[0].path", "control character"},
		{"NUL in a path", map[string]string{"conf": "a\x00b"}, 8, "files[0].path", "control character"},
		{"meshd's raft under the data dir", map[string]string{"data": "raft"}, 15, "containers[0].volumes[0]", "meshd's own"},
		{"another module's data", map[string]string{"data": "store"}, 15, "containers[0].volumes[0]", "meshd's own"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := m.Resolve(c.values)
			if err == nil {
				t.Fatal("accepted")
			}
			wantFieldErr(t, err, "tmpl.yaml", c.line, c.field, c.says)
		})
	}
}

// Refused when the manifest is read: an owner that is not one, a control character in a path,
// meshd's own paths, a second YAML document that is not YAML.
func TestParseRefusesHostileValues(t *testing.T) {
	for _, c := range []struct {
		name, old, new string
		line           int
		field, says    string
	}{
		{"owner -1", `    mode: "0644"`, "    mode: \"0644\"\n    owner: \"-1\"", 9, "files[0].owner", "not user or user:group"},
		{"owner 4294967295", `    mode: "0644"`, "    mode: \"0644\"\n    owner: \"root:4294967295\"", 9, "files[0].owner", "not an id"},
		{"newline in a path", "/etc/webapp/app.conf", `"/etc/webapp/a\npp.conf"`, 5, "files[0].path", "control character"},
		{"NUL in a path", "/etc/webapp/app.conf", `"/etc/webapp/a\0pp.conf"`, 5, "files[0].path", "control character"},
		{"seal key", "/etc/webapp/app.conf", "/etc/meshd/seal.key", 5, "files[0].path", "meshd's own"},
		{"the config dir's parent", "/etc/webapp/app.conf", "/etc/meshd", 5, "files[0].path", "meshd's own"},
		{"data dir", "/etc/webapp/app.conf", "/var/lib/meshd/node.json", 5, "files[0].path", "meshd's own"},
		{"another module's data", "/etc/webapp/app.conf", "/var/lib/meshd/store/x", 5, "files[0].path", "meshd's own"},
		{"mounting the data dir", "/srv/webapp:/data", "/var/lib/meshd:/data", 14, "containers[0].volumes[0]", "meshd's own"},
		{"a second document that is not YAML", "path: forwarded}\n", "path: forwarded}\n---\nname: [x\n", 18, "", "what follows the first YAML document is not valid YAML"},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := strings.Replace(good, c.old, c.new, 1)
			if src == good {
				t.Fatal("case did not change the manifest")
			}
			m, err := Parse("webapp.yaml", []byte(src))
			if err == nil {
				t.Fatalf("accepted: %+v", m)
			}
			wantFieldErr(t, err, "webapp.yaml", c.line, c.field, c.says)
		})
	}
	// A module's own data directory under meshd's is its to declare.
	own := strings.Replace(good, "/srv/webapp:/data", "/var/lib/meshd/webapp:/data", 1)
	if _, err := Parse("webapp.yaml", []byte(own)); err != nil {
		t.Fatalf("a module's own data directory refused: %v", err)
	}
}
