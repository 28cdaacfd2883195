package catalogue

import (
	"embed"
	"fmt"
	"sort"
	"strings"
)

// Catalogue is the set of module manifests known to the record, by name.
type Catalogue map[string]*Module

// Names returns the module names, sorted.
func (c Catalogue) Names() []string {
	out := make([]string, 0, len(c))
	for n := range c {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// CheckAdd refuses a module that declares a container name or file path another module of the
// catalogue already declares. A module replacing its own earlier version is not a conflict.
func (c Catalogue) CheckAdd(m *Module) error {
	var errs Errors
	for _, name := range c.Names() {
		other := c[name]
		if other.Name == m.Name {
			continue
		}
		for i, f := range m.Files {
			for _, g := range other.Files {
				if f.Path == g.Path {
					errs = append(errs, m.FieldErr(fmt.Sprintf("files[%d].path", i), "%s is already declared by module %s", f.Path, other.Name))
				}
			}
		}
		for i, ct := range m.Containers {
			for _, o := range other.Containers {
				if ct.Name == o.Name {
					errs = append(errs, m.FieldErr(fmt.Sprintf("containers[%d].name", i), "container %s is already declared by module %s", ct.Name, other.Name))
				}
			}
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// Suggest names the modules whose names are close to name, for "did you mean" messages.
func (c Catalogue) Suggest(name string) []string {
	var out []string
	for _, n := range c.Names() {
		if d := distance(name, n); d <= 2 || (len(name) >= 3 && (strings.Contains(n, name) || strings.Contains(name, n))) {
			out = append(out, n)
		}
	}
	return out
}

// distance is the Levenshtein distance between a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

//go:embed default/*.yaml
var defaults embed.FS

// Source is a manifest as read from a file: its name and its bytes.
type Source struct {
	File string `json:"file"`
	Data string `json:"data"`
}

// DefaultSources returns the manifests of the catalogue meshd ships, sorted by file name.
func DefaultSources() []Source {
	entries, err := defaults.ReadDir("default")
	if err != nil {
		panic(err) // embedded at build time
	}
	var out []Source
	for _, e := range entries {
		b, err := defaults.ReadFile("default/" + e.Name())
		if err != nil {
			panic(err)
		}
		out = append(out, Source{File: "default/" + e.Name(), Data: string(b)})
	}
	return out
}

// Default parses the shipped catalogue.
func Default() (Catalogue, error) {
	cat := Catalogue{}
	for _, s := range DefaultSources() {
		m, err := Parse(s.File, []byte(s.Data))
		if err != nil {
			return nil, err
		}
		if err := cat.CheckAdd(m); err != nil {
			return nil, err
		}
		cat[m.Name] = m
	}
	return cat, nil
}

// MeshModule is the module that holds meshd's own ports (bus, raft, gossip, tunnel) and the
// private network's range.
const MeshModule = "mesh"

// SettingKey resolves what an operator writes for a setting to the record's "module.setting"
// key: "module.setting" as it is, a module name for that module's `port`, or a setting of the mesh
// module by its name ("bus", "raft", ...). The error lists what it could have been.
func (c Catalogue) SettingKey(name string) (string, error) {
	if mod, setting, ok := strings.Cut(name, "."); ok {
		m, found := c[mod]
		if !found {
			return "", fmt.Errorf("setting %s: no module %q in the catalogue", name, mod)
		}
		if _, found := m.Settings[setting]; !found {
			return "", fmt.Errorf("setting %s: module %s has no setting %q (it has: %s)", name, mod, setting, strings.Join(sortedKeys(m.Settings), ", "))
		}
		return name, nil
	}
	if m, ok := c[name]; ok {
		if _, ok := m.Settings["port"]; ok {
			return name + ".port", nil
		}
	}
	if m, ok := c[MeshModule]; ok {
		if _, ok := m.Settings[name]; ok {
			return MeshModule + "." + name, nil
		}
	}
	return "", fmt.Errorf("setting %q is not known; use MODULE.SETTING or one of: %s", name, strings.Join(c.FoundationPorts(), ", "))
}

// FoundationPorts lists the "module.setting" keys of every port the foundation binds.
func (c Catalogue) FoundationPorts() []string {
	var out []string
	for _, n := range c.Names() {
		m := c[n]
		if !m.Foundation {
			continue
		}
		for _, s := range m.PortSettings() {
			out = append(out, n+"."+s)
		}
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
