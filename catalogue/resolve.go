package catalogue

import (
	"fmt"
	"net/netip"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Resolved is a module filled in for one node: every ${setting} replaced by the node's value or
// the default, every port a number.
type Resolved struct {
	Module string `json:"module"`
	// Privileged is the module's own word that it is root on the machine (RootEquivalent says
	// what makes it so).
	Privileged bool              `json:"privileged,omitempty"`
	Settings   map[string]string `json:"settings,omitempty"`
	Files      []File            `json:"files,omitempty"`
	Containers []Container       `json:"containers,omitempty"`
	Openings   []PortOpening     `json:"openings,omitempty"`
}

// PortOpening is an opening with its port resolved.
type PortOpening struct {
	Port    uint16 `json:"port"`
	Proto   string `json:"proto"`
	From    string `json:"from"`
	Path    string `json:"path"`
	Guarded bool   `json:"guarded,omitempty"`
	// Admit is the manifest's admit (AdmitServers or empty); the declaration carries the
	// addresses it stands for (fsm.Declaration.Servers).
	Admit string `json:"admit,omitempty"`
}

// PortMapping is a container port published on the machine.
type PortMapping struct {
	HostIP        string `json:"host_ip,omitempty"`
	HostPort      uint16 `json:"host_port"`
	ContainerPort uint16 `json:"container_port"`
	Proto         string `json:"proto"`
}

// ParsePortMapping reads "[hostip:]hostport:containerport[/proto]".
func ParsePortMapping(s string) (PortMapping, error) {
	var pm PortMapping
	spec, proto, hasProto := strings.Cut(s, "/")
	pm.Proto = "tcp"
	if hasProto {
		if proto != "tcp" && proto != "udp" {
			return pm, fmt.Errorf("%q: protocol %q is not tcp or udp", s, proto)
		}
		pm.Proto = proto
	}
	parts := strings.Split(spec, ":")
	if len(parts) == 3 {
		ip, err := netip.ParseAddr(parts[0])
		if err != nil {
			return pm, fmt.Errorf("%q: host address %q is not an IP address", s, parts[0])
		}
		pm.HostIP = ip.String()
		parts = parts[1:]
	}
	if len(parts) != 2 {
		return pm, fmt.Errorf("%q is not [hostip:]hostport:containerport[/proto]", s)
	}
	var err error
	if pm.HostPort, err = parsePort(parts[0]); err != nil {
		return pm, fmt.Errorf("%q: host port: %w", s, err)
	}
	if pm.ContainerPort, err = parsePort(parts[1]); err != nil {
		return pm, fmt.Errorf("%q: container port: %w", s, err)
	}
	return pm, nil
}

func parsePort(s string) (uint16, error) {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a port number", s)
	}
	if n < 1 || n > 65535 {
		return 0, fmt.Errorf("%d is out of range (1-65535)", n)
	}
	return uint16(n), nil
}

// ParsePort reads a port number, refusing anything outside 1-65535.
func ParsePort(s string) (uint16, error) { return parsePort(s) }

// Values returns the module's effective settings for a node: the defaults overridden by the
// node's values, given by setting name.
func (m *Module) Values(node map[string]string) map[string]string {
	vals := make(map[string]string, len(m.Settings))
	for k, v := range m.Settings {
		vals[k] = v
		if nv, ok := node[k]; ok {
			vals[k] = nv
		}
	}
	return vals
}

func expand(s string, vals map[string]string) string {
	if !strings.Contains(s, "${") {
		return s
	}
	return refRe.ReplaceAllStringFunc(s, func(ref string) string {
		if v, ok := vals[ref[2:len(ref)-1]]; ok {
			return v
		}
		return ref
	})
}

// Resolve fills the module in with node values (by setting name; nil means the defaults) and
// checks every port, path and volume of the result. Errors name the field and, where a setting
// made the value, the setting.
//
// It walks the manifest's kinds in order (files, containers, openings), filling and checking each
// field in place; the checks are the field's own, so it stays one pass over the manifest.
func (m *Module) Resolve(node map[string]string) (*Resolved, error) {
	vals := m.Values(node)
	var errs Errors
	add := func(field, format string, args ...any) {
		errs = append(errs, &FieldError{File: m.Source, Line: m.line(field), Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	via := m.via
	r := &Resolved{Module: m.Name, Privileged: m.Privileged, Settings: vals}
	for i, f := range m.Files {
		f.Path = expand(f.Path, vals)
		f.Content = expand(f.Content, vals)
		if f.Mode == "" {
			f.Mode = "0644"
		}
		if msg := checkPath(f.Path, m.Name); msg != "" {
			add(fmt.Sprintf("files[%d].path", i), "%s%s", msg, via(m.Files[i].Path))
		}
		for j, g := range r.Files {
			if g.Path == f.Path {
				add(fmt.Sprintf("files[%d].path", i), "%s is already declared by files[%d]%s", f.Path, j, via(m.Files[i].Path))
			}
		}
		r.Files = append(r.Files, f)
	}
	for i, c := range m.Containers {
		field := fmt.Sprintf("containers[%d]", i)
		out := c
		out.Name = expand(c.Name, vals)
		if !ctrNameRe.MatchString(out.Name) {
			add(field+".name", "%q is not a container name (letters, digits, '_', '.' and '-', starting with a letter or digit)%s", out.Name, via(c.Name))
		}
		for j, g := range r.Containers {
			if g.Name == out.Name {
				add(field+".name", "container %s is already declared by containers[%d]%s", out.Name, j, via(c.Name))
			}
		}
		out.Image = expand(c.Image, vals)
		out.Command = nil
		for _, a := range c.Command {
			out.Command = append(out.Command, expand(a, vals))
		}
		if len(c.Env) > 0 {
			out.Env = map[string]string{}
			for k, v := range c.Env {
				out.Env[k] = expand(v, vals)
			}
		}
		out.Ports = nil
		for j, p := range c.Ports {
			e := expand(p, vals)
			if _, err := ParsePortMapping(e); err != nil {
				add(fmt.Sprintf("%s.ports[%d]", field, j), "%v%s", err, via(p))
			}
			out.Ports = append(out.Ports, e)
		}
		out.Volumes = nil
		for j, v := range c.Volumes {
			e := expand(v, vals)
			parts := strings.Split(e, ":")
			switch {
			case len(parts) < 2 || len(parts) > 3:
				add(fmt.Sprintf("%s.volumes[%d]", field, j), "%q is not /host/path:/container/path[:ro]", e)
			case len(parts) == 3 && parts[2] != "ro" && parts[2] != "rw":
				add(fmt.Sprintf("%s.volumes[%d]", field, j), "%q: mode %q is not ro or rw", e, parts[2])
			case NamedVolume(parts[0]):
				if !strings.HasPrefix(parts[1], "/") {
					add(fmt.Sprintf("%s.volumes[%d]", field, j), "container path %q is relative", parts[1])
				}
			default:
				if msg := checkPath(parts[0], m.Name); msg != "" {
					add(fmt.Sprintf("%s.volumes[%d]", field, j), "host path: %s%s", msg, via(v))
				}
				if !strings.HasPrefix(parts[1], "/") {
					add(fmt.Sprintf("%s.volumes[%d]", field, j), "container path %q is relative", parts[1])
				}
			}
			out.Volumes = append(out.Volumes, e)
		}
		r.Containers = append(r.Containers, out)
	}
	for i, o := range m.Openings {
		e := expand(o.Port, vals)
		port, err := parsePort(e)
		if err != nil {
			add(fmt.Sprintf("openings[%d].port", i), "%v%s", err, via(o.Port))
			continue
		}
		proto := o.Proto
		if proto == "" {
			proto = "tcp"
		}
		r.Openings = append(r.Openings, PortOpening{Port: port, Proto: proto, From: o.From, Path: o.Path, Guarded: o.Guarded, Admit: o.Admit})
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return r, nil
}

// via says which settings made a value from raw, for a refusal: " (from setting m.a, m.b)".
func (m *Module) via(raw string) string {
	refs := refRe.FindAllStringSubmatch(raw, -1)
	if len(refs) == 0 {
		return ""
	}
	names := make([]string, len(refs))
	for i, r := range refs {
		names[i] = m.Name + "." + r[1]
	}
	return " (from setting " + strings.Join(names, ", ") + ")"
}

// PortSettings lists the settings a module uses as ports: those in an opening's port or a
// container's host port. These are what genesis checks free and what `--port` sets.
func (m *Module) PortSettings() []string {
	seen := map[string]bool{}
	note := func(s string) {
		for _, ref := range refRe.FindAllStringSubmatch(s, -1) {
			seen[ref[1]] = true
		}
	}
	for _, o := range m.Openings {
		note(o.Port)
	}
	for _, c := range m.Containers {
		for _, p := range c.Ports {
			spec, _, _ := strings.Cut(p, "/")
			parts := strings.Split(spec, ":")
			if len(parts) >= 2 {
				note(parts[len(parts)-2])
			}
		}
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		if _, ok := m.Settings[k]; ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// volumeNameRe is the engine's rule for a volume's name.
var volumeNameRe = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`)

// NamedVolume says a volume's source is a named volume the engine keeps ("data" in
// "data:/var/lib/app"), not a path on the machine: it reaches nothing of the machine's.
func NamedVolume(source string) bool {
	return !strings.HasPrefix(source, "/") && volumeNameRe.MatchString(source)
}
