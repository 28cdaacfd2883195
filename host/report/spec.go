package report

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"meshd/container"
	"meshd/ctrspec"
	"meshd/fsm"
)

// SpecDiff lists what declaring want changes of a container configured as have: image, env
// (names only), ports, volumes, restart, command. meshd's own labels are not a difference.
func SpecDiff(have, want ctrspec.Spec) []string {
	var out []string
	if container.NormalizeImageRef(have.Image) != container.NormalizeImageRef(want.Image) {
		out = append(out, fmt.Sprintf("image %s → %s", have.Image, want.Image))
	}
	var env []string
	for _, k := range slices.Sorted(maps.Keys(want.Env)) {
		if v, ok := have.Env[k]; !ok || v != want.Env[k] {
			env = append(env, k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(have.Env)) {
		if _, ok := want.Env[k]; !ok {
			env = append(env, k+" (removed)")
		}
	}
	if len(env) > 0 {
		out = append(out, "env "+strings.Join(env, ", "))
	}
	norm := func(ps []string) []string {
		var n []string
		for _, p := range ps {
			if b, err := ctrspec.ParsePort(p); err == nil {
				p = b.String()
			}
			n = append(n, p)
		}
		slices.Sort(n)
		return n
	}
	if a, b := norm(have.Ports), norm(want.Ports); !slices.Equal(a, b) {
		out = append(out, fmt.Sprintf("ports [%s] → [%s]", strings.Join(a, " "), strings.Join(b, " ")))
	}
	if a, b := slices.Sorted(slices.Values(have.Volumes)), slices.Sorted(slices.Values(want.Volumes)); !slices.Equal(a, b) {
		out = append(out, fmt.Sprintf("volumes [%s] → [%s]", strings.Join(a, " "), strings.Join(b, " ")))
	}
	if RestartOf(have.Restart) != RestartOf(want.Restart) {
		out = append(out, fmt.Sprintf("restart %s → %s", RestartOf(have.Restart), RestartOf(want.Restart)))
	}
	if want.Cmd != nil && !slices.Equal(have.Cmd, want.Cmd) {
		out = append(out, fmt.Sprintf("command %q → %q", have.Cmd, want.Cmd))
	}
	return out
}

// RestartOf is a restart policy as the engine reads it: "no" when none is given.
func RestartOf(r string) string {
	if r == "" {
		return "no"
	}
	return r
}

// AsideName is the name a container replaced by a take is kept under, stopped.
func AsideName(name, id string) string { return name + ".meshd-replaced-" + Short(id) }

// SpecOf is the container a resource declares, with meshd's labels for its module.
func SpecOf(r fsm.Resource) ctrspec.Spec {
	c := r.Container
	labels := maps.Clone(c.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, ctrspec.ManagedLabels(r.Module))
	s := ctrspec.Spec{Name: c.Name, Image: c.Image, Env: c.Env, Ports: c.Ports, Volumes: c.Volumes,
		Restart: c.Restart, Labels: labels}
	if len(c.Command) > 0 {
		s.Cmd = slices.Clone(c.Command)
	}
	return s
}

// Short is a container id as docker shows it: 12 hex digits, no "sha256:".
func Short(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
