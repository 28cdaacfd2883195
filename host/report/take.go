package report

// The preview of a take (`meshd module take NODE MODULE --preview`): what taking a module will
// replace on a node, worked out from the node's latest report (what it holds) and the
// declaration the take would produce, without the host doing anything.

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"meshd/fsm"
)

// TakePreview is what taking Module on Node will do.
type TakePreview struct {
	Node   string `json:"node"`
	Module string `json:"module"`
	// ReportAt is when the node's report the preview reads was made.
	ReportAt time.Time `json:"report_at"`
	// Containers are the found or held containers the take replaces (or adopts in place).
	Containers []PreviewContainer `json:"containers"`
	// Files are the held files the take replaces.
	Files []PreviewFile `json:"files"`
	// Created are the resources the take creates where nothing was found (kind:name).
	Created []string `json:"created"`
	// Guarded are the module's guarded openings: refused from everywhere but the private network
	// and the machine itself once the module is taken.
	Guarded []string `json:"guarded"`
}

// PreviewContainer is one held container a take replaces.
type PreviewContainer struct {
	Name     string `json:"name"`
	FoundID  string `json:"found_id"`
	Image    string `json:"image"`
	NewImage string `json:"new_image"`
	// Differences are what the declaration changes (env values are not shown, only their
	// names); none means it is adopted in place, not replaced.
	Differences []string `json:"differences"`
	// Changed and Reason say something else changed it since it was found.
	Changed bool   `json:"changed,omitempty"`
	Reason  string `json:"reason,omitempty"`
	// Aside is the name it will be kept under, stopped, once replaced.
	Aside string `json:"aside,omitempty"`
}

// PreviewFile is one held file a take replaces.
type PreviewFile struct {
	Path         string `json:"path"`
	RecordedHash string `json:"recorded_hash"`
	CurrentHash  string `json:"current_hash"`
	// Changed: something else changed it since it was found (its latest bytes are recorded
	// beside the original at the take).
	Changed bool   `json:"changed"`
	Reason  string `json:"reason,omitempty"`
}

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

// Containers is the container kind's part of a report, whether it was made in this
// process or decoded from JSON.
func Containers(rep *Report) *ContainerReport {
	switch c := rep.Kinds[fsm.KindContainer].(type) {
	case *ContainerReport:
		return c
	case ContainerReport:
		return &c
	case nil:
		return nil
	default: // decoded from JSON (a report gossip carried)
		b, err := json.Marshal(c)
		if err != nil {
			return nil
		}
		var cr ContainerReport
		if json.Unmarshal(b, &cr) != nil {
			return nil
		}
		return &cr
	}
}

// PreviewTake works out what taking module does, from rep (the node's latest report; nil when
// there is none yet) and d, the declaration with the module taken.
func PreviewTake(rep *Report, d *fsm.Declaration, module string) (TakePreview, error) {
	pv := TakePreview{Node: d.Node, Module: module, Containers: []PreviewContainer{}, Files: []PreviewFile{}, Created: []string{}, Guarded: []string{}}
	if rep == nil {
		return pv, fmt.Errorf("node %s has sent no host report yet: what it holds is not known; try again once its agent has made a pass", d.Node)
	}
	if rep.Assigned != nil && !slices.Contains(rep.Assigned, module) {
		return pv, &ReportBehindError{Node: d.Node, Module: module, At: rep.When}
	}
	pv.ReportAt = rep.When
	held := map[string]HeldFile{}
	for _, hf := range rep.Held {
		held[hf.Path] = hf
	}
	written := map[string]bool{}
	for _, w := range rep.Written {
		written[w.Path] = true
	}
	views := map[string]ContainerView{}
	if cr := Containers(rep); cr != nil {
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
				pv.Files = append(pv.Files, PreviewFile{Path: hf.Path, RecordedHash: hf.RecordedHash, CurrentHash: hf.CurrentHash, Changed: hf.Changed, Reason: hf.Reason})
			} else if !written[r.File.Path] {
				pv.Created = append(pv.Created, r.ID())
			}
		case r.Container != nil:
			v, ok := views[r.Container.Name]
			switch {
			case ok && v.State == ContainerHeld:
				spec := SpecOf(r)
				pc := PreviewContainer{Name: v.Name, FoundID: v.ID, Image: v.Image, NewImage: spec.Image,
					Changed: v.Changed, Reason: v.Reason, Differences: []string{}}
				if v.Config != nil {
					pc.Differences = SpecDiff(*v.Config, spec)
				}
				if len(pc.Differences) > 0 || v.Config == nil {
					pc.Aside = AsideName(v.Name, v.ID)
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
