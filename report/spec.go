package report

import (
	"maps"
	"slices"
	"strings"

	"meshd/ctrspec"
	"meshd/fsm"
)

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
		Restart: c.Restart, Labels: labels, Runtime: c.Runtime.Clone()}
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
