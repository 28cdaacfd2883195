package containers

import (
	"fmt"
	"slices"
	"strings"

	"meshd/container"
	"meshd/fsm"
	"meshd/report"
)

// observeHeld reports a held container, and whether something else changed it.
func (p *driverPass) observeHeld(view *report.ContainerView, rec *record, o container.Observed, exists bool) {
	view.State, view.Since, view.OriginalKept = report.ContainerHeld, rec.FoundAt, len(rec.Original) > 0
	if !exists {
		p.viewFromRecord(view, rec)
		view.State = report.ContainerHeld
		view.Changed, view.Reason = true, report.RemovedBySomethingElse
		return
	}
	*view = p.viewOf(*view, rec, o)
	cfg := o.Spec
	view.Config = &cfg
	var what []string
	if o.ID != rec.FoundID {
		what = append(what, fmt.Sprintf("container id %s, recorded %s", report.Short(o.ID), report.Short(rec.FoundID)))
	} else if rec.FoundImageID != "" && o.ImageID != rec.FoundImageID {
		what = append(what, fmt.Sprintf("image id %s, recorded %s", report.Short(o.ImageID), report.Short(rec.FoundImageID)))
	}
	if rec.FoundSpec != nil {
		o.RefImageID = "" // a tag moved on the engine is not a change of the container
		what = append(what, container.Diff(foundSpecOf(rec, o), o)...)
	}
	if len(what) > 0 {
		view.Changed, view.Reason = true, report.ChangedBySomethingElse+": "+strings.Join(what, "; ")
	}
}

func (p *driverPass) viewOf(view report.ContainerView, rec *record, o container.Observed) report.ContainerView {
	view.ID, view.Image, view.Running = o.ID, o.ImageRef, o.Running
	view.Ports = nil
	for _, x := range o.Ports {
		view.Ports = append(view.Ports, fmt.Sprintf("%s->%d/%s", hostPort(x.HostIP, x.HostPort), x.ContainerPort, x.Proto))
	}
	if rec != nil {
		view.State, view.Aside = rec.State, rec.Aside
		view.OriginalKept = len(rec.Original) > 0 || len(rec.Replaced) > 0
		if view.Since.IsZero() {
			view.Since = rec.At
			if rec.State == report.ContainerHeld {
				view.Since = rec.FoundAt
			}
		}
	}
	return view
}

func (p *driverPass) viewFromRecord(view *report.ContainerView, rec *record) {
	if rec == nil {
		return
	}
	view.State, view.ID, view.Image, view.Aside = rec.State, rec.ID, rec.Image, rec.Aside
	view.OriginalKept = len(rec.Original) > 0 || len(rec.Replaced) > 0
	view.Since = rec.At
	if rec.State == report.ContainerHeld {
		view.ID, view.Image, view.Since = rec.FoundID, rec.FoundImage, rec.FoundAt
	}
}

// reportFromRecords fills the report from the records alone, when the engine cannot be asked.
func (p *driverPass) reportFromRecords(records map[string]*record, rs []fsm.Resource) {
	seen := map[string]bool{}
	for _, r := range rs {
		if r.Container == nil || seen[r.Container.Name] {
			continue
		}
		seen[r.Container.Name] = true
		v := report.ContainerView{Name: r.Container.Name, Module: r.Module}
		p.viewFromRecord(&v, records[r.Container.Name])
		p.rep.Containers = append(p.rep.Containers, v)
	}
	for _, name := range recordNames(records) {
		if !seen[name] {
			v := report.ContainerView{Name: name, Module: records[name].Module, Unassigned: true}
			p.viewFromRecord(&v, records[name])
			p.rep.Containers = append(p.rep.Containers, v)
		}
	}
	slices.SortFunc(p.rep.Containers, func(a, b report.ContainerView) int { return strings.Compare(a.Name, b.Name) })
}

func hostPort(ip string, port uint16) string {
	if strings.Contains(ip, ":") {
		return fmt.Sprintf("[%s]:%d", ip, port)
	}
	if ip == "" {
		ip = "0.0.0.0"
	}
	return fmt.Sprintf("%s:%d", ip, port)
}
