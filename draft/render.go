package draft

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"meshd/catalogue"
	"meshd/ctrspec"
)

// group is one module being drafted.
type group struct {
	name       string
	containers []draftContainer
	files      []manifestFile
	openings   []manifestOpening
	closed     []string
	settings   map[string]string
	fw         Reacher
}

// manifest is a module in the catalogue's keys, each left out at its default.
type manifest struct {
	Name        string              `yaml:"name"`
	Description string              `yaml:"description,omitempty"`
	Privileged  bool                `yaml:"privileged,omitempty"`
	Settings    map[string]string   `yaml:"settings,omitempty"`
	Files       []manifestFile      `yaml:"files,omitempty"`
	Containers  []manifestContainer `yaml:"containers,omitempty"`
	Openings    []manifestOpening   `yaml:"openings,omitempty"`
}

type manifestFile struct {
	Path    string `yaml:"path"`
	Content string `yaml:"content"`
	Mode    string `yaml:"mode"`
	Owner   string `yaml:"owner"`
}

type manifestContainer struct {
	Name            string            `yaml:"name"`
	Image           string            `yaml:"image"`
	Command         []string          `yaml:"command,omitempty"`
	Env             map[string]string `yaml:"env,omitempty"`
	Ports           []string          `yaml:"ports,omitempty"`
	Volumes         []string          `yaml:"volumes,omitempty"`
	Restart         string            `yaml:"restart,omitempty"`
	Labels          map[string]string `yaml:"labels,omitempty"`
	ctrspec.Runtime `yaml:",inline"`
}

type manifestOpening struct {
	Port  string `yaml:"port"`
	Proto string `yaml:"proto"`
	From  string `yaml:"from"`
	Path  string `yaml:"path"`
}

// module renders g, parses it back with the catalogue (so what is written is what `module add`
// reads) and says privileged: true when what it holds is root on the machine, naming why.
func (g *group) module(node string) (Module, error) {
	m := manifest{Name: g.name, Settings: g.settings, Files: g.files, Openings: g.openings}
	if len(m.Settings) == 0 {
		m.Settings = nil
	}
	var names []string
	for _, c := range g.containers {
		m.Containers = append(m.Containers, c.c)
		names = append(names, c.c.Name)
	}
	m.Description = "drafted from node " + node
	if len(names) > 0 {
		m.Description += ": " + strings.Join(names, ", ")
	}
	out := Module{Name: g.name, File: g.name + ".yaml", Settings: m.Settings, Openings: openingTexts(g.openings), Closed: g.closed}
	for _, c := range g.containers {
		out.Containers = append(out.Containers, ContainerSummary{Name: c.c.Name, Image: c.c.Image, ImageID: c.imageID,
			Env: c.envNames, Ports: c.c.Ports, Volumes: c.c.Volumes, Runtime: c.c.Runtime.Used()})
	}
	for _, f := range g.files {
		out.Files = append(out.Files, FileSummary{Path: f.Path, Size: len(f.Content), Mode: f.Mode, Owner: f.Owner})
	}
	b, parsed, err := render(m, g.containers, node)
	if err != nil {
		return out, err
	}
	r, err := parsed.Resolve(nil)
	if err != nil {
		return out, fmt.Errorf("the catalogue refuses the drafted manifest: %w", err)
	}
	if why := r.RootEquivalent(); len(why) > 0 {
		m.Privileged = true
		out.Privileged = why
		if b, _, err = render(m, g.containers, node); err != nil {
			return out, err
		}
	}
	out.Manifest = b
	return out, nil
}

// render writes m with a header naming where it was drafted from and each container's image id,
// and parses it back.
func render(m manifest, cs []draftContainer, node string) ([]byte, *catalogue.Module, error) {
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "# Drafted by `meshd module draft` from what runs on node %s.\n", node)
	fmt.Fprintf(&buf, "# Env values are kept as found: keep this file private (0600).\n")
	for _, c := range cs {
		fmt.Fprintf(&buf, "# container %s runs image %s (%s)\n", c.c.Name, c.imageID, c.c.Image)
	}
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(m); err != nil {
		return nil, nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, nil, err
	}
	parsed, err := catalogue.Parse(m.Name+".yaml", buf.Bytes())
	if err != nil {
		return nil, nil, fmt.Errorf("the catalogue refuses the drafted manifest: %w", err)
	}
	return buf.Bytes(), parsed, nil
}

func openingTexts(os []manifestOpening) []string {
	var out []string
	for _, o := range os {
		out = append(out, fmt.Sprintf("%s/%s %s from %s", o.Port, o.Proto, o.Path, o.From))
	}
	return out
}

// Text is the preview of res: each module with what it holds (env by name), then what refused
// the draft.
func Text(res Result, dir string) string {
	var b strings.Builder
	for _, m := range res.Modules {
		fmt.Fprintf(&b, "module %s (%s)\n", m.Name, joinPath(dir, m.File))
		if len(m.Privileged) > 0 {
			fmt.Fprintf(&b, "  privileged: %s\n", strings.Join(m.Privileged, "; "))
		}
		for _, k := range slices.Sorted(maps.Keys(m.Settings)) {
			fmt.Fprintf(&b, "  setting %s = %s\n", k, m.Settings[k])
		}
		for _, c := range m.Containers {
			fmt.Fprintf(&b, "  container %s: image %s (%s)\n", c.Name, c.Image, short(c.ImageID))
			line := func(what string, xs []string) {
				if len(xs) > 0 {
					fmt.Fprintf(&b, "    %s: %s\n", what, strings.Join(xs, ", "))
				}
			}
			line("env", c.Env)
			line("ports", c.Ports)
			line("volumes", c.Volumes)
			line("also", c.Runtime)
		}
		for _, f := range m.Files {
			fmt.Fprintf(&b, "  file %s: %d bytes, mode %s, owner %s\n", f.Path, f.Size, f.Mode, f.Owner)
		}
		for _, o := range m.Openings {
			fmt.Fprintf(&b, "  opening %s\n", o)
		}
		for _, c := range m.Closed {
			fmt.Fprintf(&b, "  no opening: %s\n", c)
		}
	}
	for _, l := range res.LeftOut {
		fmt.Fprintf(&b, "left out: %s\n", l)
	}
	if len(res.Refused) > 0 {
		fmt.Fprintf(&b, "refused: a draft reproduces what it finds exactly, and cannot reproduce:\n")
		for _, r := range res.Refused {
			fmt.Fprintf(&b, "  %s\n", r)
		}
	}
	return b.String()
}

func joinPath(dir, file string) string {
	if dir == "" {
		return file
	}
	return strings.TrimSuffix(dir, "/") + "/" + file
}

func short(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
