package preview

// The preview of a take (`meshd module take NODE MODULE --preview`): what taking a module will
// replace on a node, worked out from the node's latest report (what it holds) and the
// declaration the take would produce, without the host doing anything.

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"meshd/container"
	"meshd/ctrspec"
	"meshd/fsm"
	"meshd/report"
)

// ReportBehindError is a take preview asked of a report made before the module was assigned
// to the node: what the node holds for it is not in that report (its files would read as
// created, its found containers as absent).
type ReportBehindError struct {
	Node, Module string
	At           time.Time // when the report was made
}

func (e *ReportBehindError) Error() string {
	return fmt.Sprintf("node %s's latest report (of %s) is of a pass made before %s was assigned to it: what the take would replace is not known yet; preview again once the node has made a pass (`meshd node show %s` says when its report was made; is its agent running?)",
		e.Node, e.At.Format(time.RFC3339), e.Module, e.Node)
}

// NoReportError is a preview asked of a node that has sent no host report yet (its agent just
// started, or is not running): nothing of what it holds is known.
type NoReportError struct {
	Node, What string // What: what the preview needs to know ("what it holds")
}

func (e *NoReportError) Error() string {
	return fmt.Sprintf("node %s has sent no host report yet: %s is not known; try again once its agent has made a pass", e.Node, e.What)
}

// Take works out what taking module does, from rep (the node's latest report; nil when
// there is none yet) and d, the declaration with the module taken.
func Take(rep *report.Report, d *fsm.Declaration, module string) (report.TakePreview, error) {
	pv := report.TakePreview{Node: d.Node, Module: module, Containers: []report.PreviewContainer{}, Files: []report.PreviewFile{}, Created: []string{}, Guarded: []string{}}
	if rep == nil {
		return pv, &NoReportError{Node: d.Node, What: "what it holds"}
	}
	if rep.Assigned != nil && !slices.Contains(rep.Assigned, module) {
		return pv, &ReportBehindError{Node: d.Node, Module: module, At: rep.When}
	}
	pv.ReportAt = rep.When
	held := map[string]report.HeldFile{}
	for _, hf := range rep.Held {
		held[hf.Path] = hf
	}
	written := map[string]bool{}
	for _, w := range rep.Written {
		written[w.Path] = true
	}
	views := map[string]report.ContainerView{}
	if cr := report.Containers(rep); cr != nil {
		for _, v := range cr.Containers {
			views[v.Name] = v
		}
	}
	for _, r := range d.Resources {
		if r.Module != module {
			continue
		}
		switch {
		case r.File != nil:
			if hf, ok := held[r.File.Path]; ok {
				pv.Files = append(pv.Files, report.PreviewFile{Path: hf.Path, RecordedHash: hf.RecordedHash, CurrentHash: hf.CurrentHash, Changed: hf.Changed, Reason: hf.Reason})
			} else if !written[r.File.Path] {
				pv.Created = append(pv.Created, r.ID())
			}
		case r.Container != nil:
			v, ok := views[r.Container.Name]
			switch {
			case ok && v.State == report.ContainerHeld:
				spec := report.SpecOf(r)
				pc := report.PreviewContainer{Name: v.Name, FoundID: v.ID, Image: v.Image, NewImage: spec.Image,
					Changed: v.Changed, Reason: v.Reason, Differences: []string{}}
				if v.Config != nil {
					pc.Differences = SpecDiff(*v.Config, spec)
					pc.Losses = ctrspec.Losses(ctrspec.RuntimeChanges(*v.Config, spec))
				}
				if len(pc.Differences) > 0 || v.Config == nil {
					pc.Aside = report.AsideName(v.Name, v.ID)
				}
				pv.Containers = append(pv.Containers, pc)
			case !ok || v.State == "":
				pv.Created = append(pv.Created, r.ID())
			}
		case r.Opening != nil:
			if r.Opening.Guarded {
				o := r.Opening
				pv.Guarded = append(pv.Guarded, fmt.Sprintf("%d/%s %s from %s", o.Port, o.Proto, o.Path, o.From))
			}
		}
	}
	return pv, nil
}

// SpecDiff lists what declaring want changes of a container configured as have: image, env
// (names only), ports, volumes, restart, command, and every Runtime field and what no manifest
// can say (ctrspec.RuntimeChanges, in its plain words). meshd's own labels are not a
// difference.
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
	if report.RestartOf(have.Restart) != report.RestartOf(want.Restart) {
		out = append(out, fmt.Sprintf("restart %s → %s", report.RestartOf(have.Restart), report.RestartOf(want.Restart)))
	}
	if want.Cmd != nil && !slices.Equal(have.Cmd, want.Cmd) {
		out = append(out, fmt.Sprintf("command %q → %q", have.Cmd, want.Cmd))
	}
	for _, c := range ctrspec.RuntimeChanges(have, want) {
		out = append(out, c.Text)
	}
	return out
}
