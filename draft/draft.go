package draft

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"

	"meshd/ctrspec"
	"meshd/netfilter/reach"
)

// ComposeProject is the label Docker Compose puts on each container of a project: the
// containers sharing it are drafted as one module.
const ComposeProject = "com.docker.compose.project"

// Container is one container as found, in the words a draft needs.
type Container struct {
	// Spec is its reconstruction (what the image sets left out); Spec.Unexpressed names what no
	// manifest can say.
	Spec ctrspec.Spec
	// ImageID is the image it runs; RefImageID what the reference it was created with
	// (Spec.Image) resolves to on the engine now, "" when it resolves to nothing.
	ImageID, RefImageID string
	// Labels are all its labels, the image's included: the Compose project is read here.
	Labels map[string]string
}

// File is one file the operator names for a module, as read on the machine.
type File struct {
	// Module is the module it goes to; "" for the node's files module (FilesModule).
	Module  string
	Path    string
	Content []byte
	// Mode is the permission bits with setuid, setgid and sticky (0o7777).
	Mode     uint32
	UID, GID uint32
}

// Input is what is found on one node.
type Input struct {
	Node       string
	Containers []Container
	Files      []File
	// LeftOut says what was found and not drafted, and why (meshd's own containers, those a
	// module declares already): the preview lists it.
	LeftOut []string
	// Catalogue are the names of the modules the catalogue has: a drafted module never takes
	// one (adding it would replace that module), it is named NAME-2, NAME-3... instead.
	Catalogue []string
	// Declared names the module of the catalogue declaring each container name. A found container
	// of such a name is left out: its manifest could not be added beside that module's, which
	// holds it once assigned here.
	Declared map[string]string
	// Firewall says who outside reaches each published port through the machine's found
	// firewall (reach.Read's Ruleset); nil refuses every port published beyond loopback.
	Firewall Reacher
}

// Reacher answers who outside reaches a published port (reach.Ruleset does).
type Reacher interface {
	Reach(reach.Port) reach.Answer
}

// Refusal is one thing a draft cannot reproduce, naming it.
type Refusal struct {
	Node      string `json:"node"`
	Container string `json:"container,omitempty"`
	File      string `json:"file,omitempty"`
	Module    string `json:"module,omitempty"`
	Field     string `json:"field"`
	Reason    string `json:"reason"`
}

func (r Refusal) String() string {
	what := "node " + r.Node
	switch {
	case r.Container != "":
		what += " container " + r.Container
	case r.File != "":
		what += " file " + r.File
	case r.Module != "":
		what += " module " + r.Module
	}
	return fmt.Sprintf("%s: %s: %s", what, r.Field, r.Reason)
}

// Module is one drafted module: its manifest and what it holds, for the preview.
type Module struct {
	Name string `json:"name"`
	// File is the manifest's file name in the output directory (NAME.yaml).
	File       string             `json:"file"`
	Containers []ContainerSummary `json:"containers,omitempty"`
	Files      []FileSummary      `json:"files,omitempty"`
	Openings   []string           `json:"openings,omitempty"`
	// Closed are the ports published beyond loopback that nobody outside reaches through the
	// found firewall: they get no opening, and each names what closes it.
	Closed   []string          `json:"closed,omitempty"`
	Settings map[string]string `json:"settings,omitempty"`
	// Privileged lists why the module is root on the machine (it then says privileged: true).
	Privileged []string `json:"privileged,omitempty"`
	// Manifest is the YAML written to File; never in the preview (env values are in it).
	Manifest []byte `json:"-"`
}

// ContainerSummary is one drafted container as the preview shows it: env by name only.
type ContainerSummary struct {
	Name    string   `json:"name"`
	Image   string   `json:"image"`
	ImageID string   `json:"image_id"`
	Env     []string `json:"env,omitempty"`
	Ports   []string `json:"ports,omitempty"`
	Volumes []string `json:"volumes,omitempty"`
	// Runtime are the manifest keys of the rest it sets (user, networks, cap_add...).
	Runtime []string `json:"runtime,omitempty"`
}

// FileSummary is one drafted file as the preview shows it.
type FileSummary struct {
	Path  string `json:"path"`
	Size  int    `json:"size"`
	Mode  string `json:"mode"`
	Owner string `json:"owner"`
}

// Result is a draft: the modules, or what refused it. Refused non-empty means nothing may be
// written.
type Result struct {
	Node    string    `json:"node"`
	Modules []Module  `json:"modules"`
	LeftOut []string  `json:"left_out,omitempty"`
	Refused []Refusal `json:"refused,omitempty"`
}

// FilesModule is the module a node's named files go to when the operator names none.
func FilesModule(node string) string { return moduleName(node+"-files", "files") }

// Draft writes a module for each group of in's containers (by Compose project, else one a
// container) and for each module files are named for. Every manifest is parsed back with the
// catalogue; a problem anywhere is a Refusal and Modules is then what could be drafted, for
// the preview only.
func Draft(in Input) Result {
	res := Result{Node: in.Node, Modules: []Module{}, LeftOut: slices.Clone(in.LeftOut)}
	refuse := func(r Refusal) {
		r.Node = in.Node
		res.Refused = append(res.Refused, r)
	}
	groups := map[string]*group{}
	get := func(name string) *group {
		if g := groups[name]; g != nil {
			return g
		}
		g := &group{name: name, settings: map[string]string{}, fw: in.Firewall}
		groups[name] = g
		return g
	}
	cs := slices.Clone(in.Containers)
	sort.Slice(cs, func(i, j int) bool { return cs[i].Spec.Name < cs[j].Spec.Name })
	for _, c := range cs {
		if mod, ok := in.Declared[c.Spec.Name]; ok {
			res.LeftOut = append(res.LeftOut, fmt.Sprintf("container %s: module %s of the catalogue declares a container of this name; "+
				"assign it here to hold this one (meshd module assign %s %s), then preview its take", c.Spec.Name, mod, in.Node, mod))
			continue
		}
		name := moduleName(c.Spec.Name, "ctr")
		if p := c.Labels[ComposeProject]; p != "" {
			name = moduleName(p, "compose")
		}
		g := get(name)
		dc, ok := g.container(c, func(field, reason string) {
			refuse(Refusal{Container: c.Spec.Name, Field: field, Reason: reason})
		})
		if ok {
			g.containers = append(g.containers, dc)
		}
	}
	for _, f := range in.Files {
		name := f.Module
		if name == "" {
			name = FilesModule(in.Node)
		}
		g := get(name)
		if df, ok := draftFile(f, func(field, reason string) {
			refuse(Refusal{File: f.Path, Field: field, Reason: reason})
		}); ok {
			g.files = append(g.files, df)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(groups)) {
		g := groups[name]
		for i := 2; slices.Contains(in.Catalogue, g.name); i++ {
			g.name = fmt.Sprintf("%s-%d", name, i)
			if groups[g.name] != nil {
				g.name = name
			}
		}
		m, err := g.module(in.Node)
		if err != nil {
			refuse(Refusal{Module: g.name, Field: "manifest", Reason: err.Error()})
			continue
		}
		res.Modules = append(res.Modules, m)
	}
	return res
}

// refRe is what the catalogue reads as a setting's reference.
var refRe = regexp.MustCompile(`\$\{[^}]*\}`)

// noRef refuses a value the catalogue would read as a setting: a manifest has no way to say
// "${" literally.
func noRef(field, v string, bad func(field, reason string)) bool {
	if refRe.MatchString(v) {
		bad(field, fmt.Sprintf("%q has %s, which a manifest reads as a setting's reference", v, refRe.FindString(v)))
		return false
	}
	return true
}

// draftContainer is one container in the manifest's words.
type draftContainer struct {
	c        manifestContainer
	imageID  string
	envNames []string
}

// container drafts c into g, its host ports made settings of g and each published beyond
// loopback an opening; ok is false when it cannot be reproduced (bad said why).
func (g *group) container(c Container, bad func(field, reason string)) (draftContainer, bool) {
	s := c.Spec
	n0, c0 := len(g.openings), len(g.closed)
	ok := true
	fail := func(field, reason string) { bad(field, reason); ok = false }
	for _, u := range s.Unexpressed {
		k, v, _ := strings.Cut(u, " ")
		fail(k, v+": a manifest cannot say it, and a container made from one would lose it")
	}
	switch {
	case c.ImageID == "":
		fail("image", "the image the container runs is not known")
	case c.RefImageID == "":
		fail("image", fmt.Sprintf("%s names no image on the engine now; the container runs %s (docker tag %s %s, if that is the image meant)",
			s.Image, c.ImageID, c.ImageID, s.Image))
	case c.RefImageID != c.ImageID:
		fail("image", fmt.Sprintf("%s names %s now; the container runs %s (made from an earlier %s): a container made from the manifest would run another image",
			s.Image, c.RefImageID, c.ImageID, s.Image))
	}
	check := s
	check.Unexpressed = nil
	if err := check.Validate(); err != nil {
		for _, e := range strings.Split(err.Error(), "\n") {
			fail("spec", e)
		}
	}
	mc := manifestContainer{Name: s.Name, Image: s.Image, Command: s.Cmd, Env: s.Env, Labels: s.Labels, Runtime: s.Runtime.Clone()}
	ok = noRef("name", s.Name, fail) && ok
	ok = noRef("image", s.Image, fail) && ok
	for i, a := range s.Cmd {
		ok = noRef(fmt.Sprintf("command[%d]", i), a, fail) && ok
	}
	var envNames []string
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		envNames = append(envNames, k)
		if refRe.MatchString(s.Env[k]) {
			// The value is never named: it may be a secret.
			fail("env "+k, "its value has ${...}, which a manifest reads as a setting's reference")
		}
	}
	if name, n, err := ctrspec.ParseRestart(s.Restart); err != nil {
		fail("restart", fmt.Sprintf("%q: a manifest says no, always, unless-stopped or on-failure[:N]", s.Restart))
	} else if n > 0 {
		mc.Restart = fmt.Sprintf("%s:%d", name, n)
	} else if name != ctrspec.RestartNo {
		mc.Restart = name
	}
	for i, v := range s.Volumes {
		pv, err := ctrspec.ParseVolume(v)
		switch {
		case err != nil:
			fail(fmt.Sprintf("volumes[%d]", i), fmt.Sprintf("%q: %v", v, err))
		case len(pv.Options) > 0:
			fail(fmt.Sprintf("volumes[%d]", i), fmt.Sprintf("%q: a manifest's volume takes ro or rw, not %s", v, strings.Join(pv.Options, ",")))
		default:
			ok = noRef(fmt.Sprintf("volumes[%d]", i), v, fail) && ok
			mc.Volumes = append(mc.Volumes, pv.String())
		}
	}
	ports, opens, pok := g.ports(s, fail)
	mc.Ports = ports
	if !ok || !pok {
		g.openings, g.closed = g.openings[:n0], g.closed[:c0]
		return draftContainer{}, false
	}
	g.openings = append(g.openings, opens...)
	return draftContainer{c: mc, imageID: c.ImageID, envNames: envNames}, true
}

// ports turns each published port into "[hostip:]${setting}:containerport[/udp]", the setting
// holding the host port, and for each bound beyond loopback the openings the found firewall
// lets in (g.reached).
func (g *group) ports(s ctrspec.Spec, fail func(field, reason string)) ([]string, []manifestOpening, bool) {
	var out []string
	var opens []manifestOpening
	ok := true
	base := settingName(s.Name)
	for i, p := range s.Ports {
		field := fmt.Sprintf("ports[%d]", i)
		b, err := ctrspec.ParsePort(p)
		switch {
		case err != nil:
			fail(field, fmt.Sprintf("%q: %v", p, err))
		case b.HostPort == 0:
			fail(field, fmt.Sprintf("%q: the engine chose the host port; a manifest names one", p))
		case b.Proto == "sctp":
			fail(field, fmt.Sprintf("%q: a manifest's port is tcp or udp", p))
		case strings.Contains(b.HostIP, ":"):
			fail(field, fmt.Sprintf("%q: a manifest's port takes an IPv4 host address", p))
		default:
			name := base + "_port"
			if len(s.Ports) > 1 {
				name = fmt.Sprintf("%s_port_%d", base, b.ContainerPort)
				if b.Proto != "tcp" {
					name += "_" + b.Proto
				}
			}
			for _, taken := g.settings[name]; taken; _, taken = g.settings[name] {
				name += "_x"
			}
			g.settings[name] = fmt.Sprint(b.HostPort)
			ref := "${" + name + "}"
			m := fmt.Sprintf("%s:%d", ref, b.ContainerPort)
			if b.HostIP != "" {
				m = b.HostIP + ":" + m
			}
			if b.Proto != "tcp" {
				m += "/" + b.Proto
			}
			out = append(out, m)
			if strings.HasPrefix(b.HostIP, "127.") {
				continue
			}
			o, good := g.reached(ref, b, func(reason string) { fail(field, fmt.Sprintf("%q: %s", p, reason)) })
			if good {
				opens = append(opens, o...)
				continue
			}
		}
		ok = false
	}
	return out, opens, ok
}

// reached is the openings of a port published beyond loopback (ref, its setting's reference):
// forwarded from exactly whom the found firewall lets in, one opening a source (anywhere, or each
// prefix), none when nobody outside reaches it (g.closed then names what closes it). Not knowing
// who reaches it is a refusal (bad), never an opening from anywhere.
func (g *group) reached(ref string, b ctrspec.PortBinding, bad func(reason string)) ([]manifestOpening, bool) {
	if g.fw == nil {
		bad("the found firewall was not read, so who outside reaches the port is not known")
		return nil, false
	}
	a := g.fw.Reach(reach.Port{HostIP: b.HostIP, HostPort: b.HostPort, Proto: b.Proto})
	if a.Refused != "" {
		bad(fmt.Sprintf("who outside reaches host port %s is not known: the found firewall's rule %s", a.Port, a.Refused))
		return nil, false
	}
	if a.Closed() {
		g.closed = append(g.closed, fmt.Sprintf("%s/%s (host port %s): closed by the found firewall (%s)",
			ref, b.Proto, a.Port, strings.Join(a.ClosedBy, "; ")))
		return nil, true
	}
	var out []manifestOpening
	for _, from := range a.From {
		out = append(out, manifestOpening{Port: ref, Proto: b.Proto, From: from, Path: "forwarded"})
	}
	return out, true
}

// draftFile is f in the manifest's words, refused when a manifest cannot carry its bytes.
func draftFile(f File, bad func(field, reason string)) (manifestFile, bool) {
	if !utf8.Valid(f.Content) || strings.ContainsRune(string(f.Content), 0) {
		bad("content", "is not text: a manifest carries a file's content as text")
		return manifestFile{}, false
	}
	if !noRef("content", string(f.Content), func(field, _ string) {
		bad(field, fmt.Sprintf("has %s, which a manifest reads as a setting's reference", refRe.FindString(string(f.Content))))
	}) {
		return manifestFile{}, false
	}
	return manifestFile{Path: f.Path, Content: string(f.Content), Mode: fmt.Sprintf("%04o", f.Mode&0o7777),
		Owner: fmt.Sprintf("%d:%d", f.UID, f.GID)}, true
}

var (
	moduleBad  = regexp.MustCompile(`[^a-z0-9-]+`)
	settingBad = regexp.MustCompile(`[^a-z0-9_]+`)
)

// moduleName makes s a module name (lower-case letters, digits and '-', starting with a
// letter), prefix put before one that does not start with a letter.
func moduleName(s, prefix string) string {
	n := strings.Trim(moduleBad.ReplaceAllString(strings.ToLower(s), "-"), "-")
	if n == "" || n[0] < 'a' || n[0] > 'z' {
		n = prefix + "-" + n
	}
	if len(n) > 63 {
		n = strings.TrimRight(n[:63], "-")
	}
	return n
}

// settingName makes a container's name the start of a setting's name.
func settingName(s string) string {
	n := strings.Trim(settingBad.ReplaceAllString(strings.ToLower(s), "_"), "_")
	if n == "" || n[0] < 'a' || n[0] > 'z' {
		n = "c_" + n
	}
	if len(n) > 40 {
		n = n[:40]
	}
	return n
}
