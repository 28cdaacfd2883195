package catalogue

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"meshd/ctrspec"
)

// Module is one unit of the catalogue: files, containers and openings, with settings whose values
// here are only defaults.
type Module struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Foundation marks the modules genesis raises on the control-node.
	Foundation bool `json:"foundation,omitempty"`
	// Privileged says the module means to be root on the machines it is assigned to: a file or
	// a mount outside its own places (places.go), or a setuid or setgid mode. Without it such a
	// declaration is refused; with it, the record also wants the operator's own word (fsm).
	Privileged bool `json:"privileged,omitempty"`
	// Settings maps a setting's name to its default value.
	Settings   map[string]string `json:"settings,omitempty"`
	Files      []File            `json:"files,omitempty"`
	Containers []Container       `json:"containers,omitempty"`
	Openings   []Opening         `json:"openings,omitempty"`
	// Source is the file the manifest was read from, for messages.
	Source string `json:"source,omitempty"`
	// Lines are the manifest lines of the fields a node's settings can make wrong (paths,
	// container names, ports, volumes), so a refusal after settings are filled in names the line.
	Lines map[string]int `json:"lines,omitempty"`
}

// FieldErr is a problem with field of m, naming its file and line.
func (m *Module) FieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{File: m.Source, Line: m.line(field), Field: field, Msg: fmt.Sprintf(format, args...)}
}

// line is the manifest line of field, or of its nearest enclosing field that has one; 0 when
// unknown.
func (m *Module) line(field string) int {
	for f := field; f != ""; {
		if l, ok := m.Lines[f]; ok {
			return l
		}
		i := strings.LastIndexAny(f, ".[")
		if i < 0 {
			break
		}
		f = f[:i]
	}
	return 0
}

// File is a file a module declares.
type File struct {
	Path    string `json:"path" yaml:"path"`
	Content string `json:"content" yaml:"content"`
	// Mode is an octal permission string such as "0644".
	Mode string `json:"mode,omitempty" yaml:"mode"`
	// Owner is "user" or "user:group"; empty means root.
	Owner string `json:"owner,omitempty" yaml:"owner"`
	// CreateOnce files are written when missing and never rewritten.
	CreateOnce bool `json:"create_once,omitempty" yaml:"create_once"`
}

// Container is a container a module declares.
type Container struct {
	Name    string            `json:"name" yaml:"name"`
	Image   string            `json:"image" yaml:"image"`
	Command []string          `json:"command,omitempty" yaml:"command"`
	Env     map[string]string `json:"env,omitempty" yaml:"env"`
	// Ports are "[hostip:]hostport:containerport[/proto]".
	Ports []string `json:"ports,omitempty" yaml:"ports"`
	// Volumes are "/host/path:/container/path[:ro]".
	Volumes []string          `json:"volumes,omitempty" yaml:"volumes"`
	Restart string            `json:"restart,omitempty" yaml:"restart"`
	Labels  map[string]string `json:"labels,omitempty" yaml:"labels"`
	// Runtime is the rest of what a container is (user, networks, capabilities, limits, health
	// check...): ctrspec.Runtime, in the same words a found container is read back in. Its
	// values take no ${setting}.
	ctrspec.Runtime `yaml:",inline"`
}

// Opening says a port is reachable, from where, on which path.
type Opening struct {
	Port  string `json:"port" yaml:"port"`
	Proto string `json:"proto,omitempty" yaml:"proto"`
	// From is "private", "anywhere" or a CIDR.
	From string `json:"from" yaml:"from"`
	// Path is "incoming" (to the machine) or "forwarded" (to a published container port).
	Path string `json:"path" yaml:"path"`
	// Guarded openings are refused from everywhere but the private network and the machine itself
	// by meshd's own guard on adopted nodes, whatever the found firewall allows. Every opening
	// from private of a foundation module must be guarded; another module's guarded opening is
	// guarded only once the module is taken (nothing refuses traffic before its cutover).
	Guarded bool `json:"guarded,omitempty" yaml:"guarded"`
	// Admit names who else the guard lets reach a guarded opening: "servers" (AdmitServers) is
	// the record's servers at their underlay addresses, as the record has them at the time: the
	// servers' Raft port, which they reach before the private network is up. Empty: nobody else.
	Admit string `json:"admit,omitempty" yaml:"admit"`
}

// AdmitServers is the one value of an opening's admit: the record's servers' underlay addresses.
const AdmitServers = "servers"

// FieldError is one problem in a manifest, named by file, line and field.
type FieldError struct {
	File  string
	Line  int
	Field string
	Msg   string
}

func (e *FieldError) Error() string {
	loc := e.File
	if loc == "" {
		loc = "manifest"
	}
	if e.Line > 0 {
		loc += ":" + strconv.Itoa(e.Line)
	}
	if e.Field != "" {
		return fmt.Sprintf("%s: %s: %s", loc, e.Field, e.Msg)
	}
	return fmt.Sprintf("%s: %s", loc, e.Msg)
}

// Errors is every problem found in one manifest or catalogue change.
type Errors []*FieldError

func (es Errors) Error() string {
	parts := make([]string, len(es))
	for i, e := range es {
		parts[i] = e.Error()
	}
	return strings.Join(parts, "\n")
}

// schema lists the keys each mapping may hold; a key outside it is an unknown field.
var schema = map[string][]string{
	"":        {"name", "description", "foundation", "privileged", "settings", "files", "containers", "openings"},
	"files[]": {"path", "content", "mode", "owner", "create_once"},
	"containers[]": append([]string{"name", "image", "command", "env", "ports", "volumes", "restart", "labels"},
		ctrspec.RuntimeKeys...),
	"containers[].networks[]":  ctrspec.NetworkKeys,
	"containers[].healthcheck": ctrspec.HealthcheckKeys,
	"containers[].logging":     ctrspec.LoggingKeys,
	"openings[]":               {"port", "proto", "from", "path", "guarded", "admit"},
}

var (
	nameRe      = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)
	settingRe   = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)
	refRe       = regexp.MustCompile(`\$\{([^}]*)\}`)
	ctrNameRe   = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$`)
	forbiddenFS = []string{"/proc", "/sys", "/dev"}
)

// parser collects errors and the line of every field it saw.
type parser struct {
	file  string
	lines map[string]int
	errs  Errors
}

func (p *parser) add(field, format string, args ...any) {
	p.errs = append(p.errs, &FieldError{File: p.file, Line: p.line(field), Field: field, Msg: fmt.Sprintf(format, args...)})
}

// line finds the line of field, or of its nearest enclosing field.
func (p *parser) line(field string) int {
	for f := field; f != ""; {
		if l, ok := p.lines[f]; ok {
			return l
		}
		i := strings.LastIndexAny(f, ".[")
		if i < 0 {
			break
		}
		f = f[:i]
	}
	return p.lines[""]
}

// walk records lines and refuses unknown keys.
func (p *parser) walk(n *yaml.Node, field, shape string) {
	p.lines[field] = n.Line
	switch n.Kind {
	case yaml.MappingNode:
		allowed, checked := schema[shape]
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			child := k.Value
			if field != "" {
				child = field + "." + k.Value
			}
			p.lines[child] = k.Line
			if checked && !contains(allowed, k.Value) {
				p.errs = append(p.errs, &FieldError{File: p.file, Line: k.Line, Field: child,
					Msg: fmt.Sprintf("unknown field (known here: %s)", strings.Join(allowed, ", "))})
				continue
			}
			childShape := ""
			if checked {
				childShape = strings.TrimPrefix(shape+"."+k.Value, ".")
				if shape == "" {
					childShape = k.Value
				}
			}
			p.walk(v, child, childShape)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p.walk(c, fmt.Sprintf("%s[%d]", field, i), shape+"[]")
		}
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// raw mirrors the YAML; settings are decoded by hand so numbers and strings both work.
type raw struct {
	Name        string               `yaml:"name"`
	Description string               `yaml:"description"`
	Foundation  bool                 `yaml:"foundation"`
	Privileged  bool                 `yaml:"privileged"`
	Settings    map[string]yaml.Node `yaml:"settings"`
	Files       []File               `yaml:"files"`
	Containers  []Container          `yaml:"containers"`
	Openings    []Opening            `yaml:"openings"`
}

// Parse reads one manifest and validates it on its own. file names it in errors. The returned
// error is an Errors listing every problem found.
func Parse(file string, data []byte) (*Module, error) {
	p := &parser{file: file, lines: map[string]int{}}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		return nil, Errors{{File: file, Msg: "not valid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}}
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, Errors{{File: file, Line: doc.Line, Msg: "a manifest is a mapping with at least `name`"}}
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		return nil, Errors{{File: file, Line: extra.Line, Msg: "one module a file: a second YAML document was found"}}
	case !errors.Is(err, io.EOF):
		return nil, Errors{{File: file, Line: yamlErrLine(err), Msg: "one module a file, and what follows the first YAML document is not valid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}}
	}
	root := doc.Content[0]
	p.walk(root, "", "")
	if len(p.errs) > 0 {
		return nil, p.errs
	}
	var r raw
	if err := root.Decode(&r); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			for _, msg := range te.Errors {
				p.errs = append(p.errs, &FieldError{File: file, Msg: msg})
			}
			return nil, p.errs
		}
		return nil, Errors{{File: file, Msg: err.Error()}}
	}
	m := &Module{Name: r.Name, Description: r.Description, Foundation: r.Foundation, Privileged: r.Privileged,
		Files: r.Files, Containers: r.Containers, Openings: r.Openings, Source: file, Lines: resolvedLines(p.lines)}
	if len(r.Settings) > 0 {
		m.Settings = map[string]string{}
		for k, v := range r.Settings {
			if v.Kind != yaml.ScalarNode {
				p.add("settings."+k, "a setting's default is a single value (a number or a string)")
				continue
			}
			m.Settings[k] = v.Value
		}
	}
	p.validate(m)
	if len(p.errs) > 0 {
		sort.SliceStable(p.errs, func(i, j int) bool { return p.errs[i].Line < p.errs[j].Line })
		return nil, p.errs
	}
	return m, nil
}

// validate checks one module on its own: fields, paths, references and, with the defaults filled
// in, ports.
//
// It is one body on purpose: a flat list of independent checks, one per field of the manifest in
// the order the manifest reads, each adding its problem and going on, so every problem is reported
// at once; cutting it up would only scatter that order.
func (p *parser) validate(m *Module) {
	if m.Name == "" {
		p.add("name", "required")
	} else if !nameRe.MatchString(m.Name) {
		p.add("name", "%q is not a module name (lower-case letters, digits and '-', starting with a letter)", m.Name)
	}
	for k := range m.Settings {
		if !settingRe.MatchString(k) {
			p.add("settings."+k, "%q is not a setting name (lower-case letters, digits and '_')", k)
		}
	}
	refs := func(field, s string) {
		for _, ref := range refRe.FindAllStringSubmatch(s, -1) {
			if _, ok := m.Settings[ref[1]]; !ok {
				p.add(field, "refers to setting ${%s}, which the module does not declare under settings", ref[1])
			}
		}
	}
	for i, f := range m.Files {
		field := fmt.Sprintf("files[%d]", i)
		refs(field+".path", f.Path)
		refs(field+".content", f.Content)
		if msg := checkPath(f.Path, m.Name); msg != "" {
			p.add(field+".path", "%s", msg)
		}
		if f.Mode != "" {
			if v, err := strconv.ParseUint(f.Mode, 8, 32); err != nil || v > 0o7777 {
				p.add(field+".mode", "%q is not an octal file mode such as \"0644\"", f.Mode)
			}
		}
		if msg := checkOwner(f.Owner); msg != "" {
			p.add(field+".owner", "%s", msg)
		}
		for j, g := range m.Files[:i] {
			if g.Path == f.Path {
				p.add(field+".path", "%s is already declared by files[%d]", f.Path, j)
			}
		}
	}
	for i, c := range m.Containers {
		field := fmt.Sprintf("containers[%d]", i)
		refs(field+".name", c.Name)
		refs(field+".image", c.Image)
		for j, a := range c.Command {
			refs(fmt.Sprintf("%s.command[%d]", field, j), a)
		}
		for k, v := range c.Env {
			refs(field+".env."+k, v)
		}
		for j, s := range c.Ports {
			refs(fmt.Sprintf("%s.ports[%d]", field, j), s)
		}
		for j, s := range c.Volumes {
			refs(fmt.Sprintf("%s.volumes[%d]", field, j), s)
		}
		if c.Name == "" {
			p.add(field+".name", "required")
		} else if !strings.Contains(c.Name, "${") && !ctrNameRe.MatchString(c.Name) {
			p.add(field+".name", "%q is not a container name", c.Name)
		}
		if c.Image == "" {
			p.add(field+".image", "required")
		}
		c.Runtime.Check(func(f, value, reason string) {
			if value != "" {
				reason = fmt.Sprintf("%q %s", value, reason)
			}
			p.add(field+"."+f, "%s", reason)
		})
		if _, _, err := ctrspec.ParseRestart(c.Restart); err != nil {
			p.add(field+".restart", "%q is not a restart policy (no, always, unless-stopped, on-failure[:N]): %v", c.Restart, err)
		}
		for j, g := range m.Containers[:i] {
			if g.Name == c.Name {
				p.add(field+".name", "container %s is already declared by containers[%d]", c.Name, j)
			}
		}
	}
	for i, o := range m.Openings {
		field := fmt.Sprintf("openings[%d]", i)
		refs(field+".port", o.Port)
		if msg := checkFrom(o.From); msg != "" {
			p.add(field+".from", "%s", msg)
		}
		switch o.Path {
		case "incoming", "forwarded":
		case "":
			p.add(field+".path", "required: incoming (to the machine) or forwarded (to a published container port)")
		default:
			p.add(field+".path", "%q is not a path: incoming or forwarded", o.Path)
		}
		switch o.Proto {
		case "", "tcp", "udp":
		default:
			p.add(field+".proto", "%q is not a protocol: tcp or udp", o.Proto)
		}
		// A foundation port that only the private network may reach must be guarded: behind a
		// found firewall that filters only incoming traffic nothing else would refuse it.
		switch {
		case o.Admit == "":
		case o.Admit != AdmitServers:
			p.add(field+".admit", "%q is not who a guard admits: %s (the record's servers' underlay addresses)", o.Admit, AdmitServers)
		case !o.Guarded:
			p.add(field+".admit", "admit says whom the guard lets through, so the opening must say guarded: true")
		}
		if m.Foundation && o.From == "private" && !o.Guarded {
			p.add(field+".guarded", "a foundation module's opening from private must say guarded: true "+
				"(on an adopted node only the guard keeps port %s off the outside)", o.Port)
		}
	}
	if len(p.errs) > 0 {
		return
	}
	// With the defaults filled in, every port and volume must make sense.
	if _, err := m.Resolve(nil); err != nil {
		var fe Errors
		if errors.As(err, &fe) {
			for _, e := range fe {
				p.add(e.Field, "%s", e.Msg)
			}
		} else {
			p.add("", "%v", err)
		}
	}
}

// meshdConfigDir and meshdDataDir are meshd's own: its seal key, keys, record and host records.
// A module may not declare a file there nor mount one into a container, except its own data
// directory meshdDataDir/MODULE (the shipped store and registry keep their data so), and never
// under a name meshd uses itself (meshdDataNames).
const (
	meshdConfigDir = "/etc/meshd"
	meshdDataDir   = "/var/lib/meshd"
)

var meshdDataNames = []string{"raft", "pki", "netfilter", "mesh"}

// checkSecret refuses a path of meshd's own for module.
func checkSecret(p, module string) string {
	under := func(d string) bool { return p == d || strings.HasPrefix(p, d+"/") || strings.HasPrefix(d, p+"/") }
	if under(meshdConfigDir) {
		return fmt.Sprintf("%q is meshd's own (%s/ holds its seal key): no module may declare it", p, meshdConfigDir)
	}
	if !under(meshdDataDir) {
		return ""
	}
	own := meshdDataDir + "/" + module
	if module != "" && !contains(meshdDataNames, module) && (p == own || strings.HasPrefix(p, own+"/")) {
		return ""
	}
	return fmt.Sprintf("%q is meshd's own (%s/ holds its keys and records): a module may declare only its own %s/%s there",
		p, meshdDataDir, meshdDataDir, module)
}

func checkPath(p, module string) string {
	if i := strings.IndexFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }); i >= 0 {
		return fmt.Sprintf("%q holds a control character (%U) at byte %d: a path is one line of printable text", p, p[i], i)
	}
	switch {
	case p == "":
		return "required"
	case strings.Contains(p, "${"):
		return "" // checked once resolved
	case !strings.HasPrefix(p, "/"):
		return fmt.Sprintf("%q is relative; declare an absolute path", p)
	case path.Clean(p) != p:
		return fmt.Sprintf("%q is not clean; write it as %q", p, path.Clean(p))
	case p == "/":
		return "the root directory cannot be declared"
	}
	for _, f := range forbiddenFS {
		if p == f || strings.HasPrefix(p, f+"/") {
			return fmt.Sprintf("%q is under %s, which is the kernel's, not a file meshd may write", p, f)
		}
	}
	return checkSecret(p, module)
}

var ownerNameRe = regexp.MustCompile(`^[a-z_][a-z0-9_.-]{0,31}\$?$`)

// checkOwner refuses an owner that is not "user" or "user:group", each a name or a number a
// file can have (0 to 4294967294: -1 and 4294967295 mean "no change" to chown).
func checkOwner(owner string) string {
	if owner == "" {
		return ""
	}
	user, group, hasGroup := strings.Cut(owner, ":")
	parts := []string{user}
	if hasGroup {
		parts = append(parts, group)
	}
	for _, x := range parts {
		if n, err := strconv.ParseUint(x, 10, 32); err == nil {
			if n == 1<<32-1 {
				return fmt.Sprintf("%q: %s is not an id a file can have", owner, x)
			}
			continue
		}
		if !ownerNameRe.MatchString(x) {
			return fmt.Sprintf("%q is not user or user:group (names, or ids from 0 to 4294967294)", owner)
		}
	}
	return ""
}

// yamlErrLine finds the line a yaml.v3 error names ("yaml: line N: ..."), 0 when it names none.
func yamlErrLine(err error) int {
	m := yamlLineRe.FindStringSubmatch(err.Error())
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

var yamlLineRe = regexp.MustCompile(`line (\d+)`)

// resolvedLines keeps, of every field's line, those of the fields Resolve checks.
func resolvedLines(all map[string]int) map[string]int {
	out := map[string]int{}
	for f, l := range all {
		i := strings.LastIndexAny(f, ".[")
		last := f
		if i >= 0 {
			last = f[i:]
		}
		switch {
		case last == ".path", last == ".name", last == ".port", last == ".ports", last == ".volumes",
			strings.HasPrefix(last, "[") && (strings.Contains(f, "].ports[") || strings.Contains(f, "].volumes[")):
			out[f] = l
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

func checkFrom(from string) string {
	switch from {
	case "private", "anywhere":
		return ""
	case "":
		return "required: private, anywhere or a CIDR such as 192.0.2.0/24"
	}
	if _, err := netip.ParsePrefix(from); err != nil {
		return fmt.Sprintf("%q is not private, anywhere or a CIDR such as 192.0.2.0/24", from)
	}
	return ""
}
