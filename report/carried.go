package report

// How far a node's report says an act recorded for it has been carried out: what `meshd module
// take` and `meshd tunnel take` follow after the record holds the act (as `meshd converge`
// follows ReportFlip). Read from the report alone, made here or decoded from JSON.

import (
	"fmt"
	"slices"
	"strings"

	"meshd/fsm"
)

// Carried is what one report says of an act.
type Carried struct {
	// Seen says the report is of a pass whose declaration asked for the act; a report from
	// before says nothing of it (Done, Waiting and Failed are then empty).
	Seen bool
	// Done says the act is carried out.
	Done bool
	// Waiting says what is not carried out yet, when neither Done nor Failed.
	Waiting string
	// Failed are the act's resources that failed that pass, each with the node's reason.
	Failed []ResourceError
}

// ReportTake is how far rep says the take of module is carried out: done once a pass that had
// the module taken holds nothing of it as found (no held file, no held container, every opening
// taken) and none of its resources failed; failed when one did.
func ReportTake(rep *Report, module string) Carried {
	if rep == nil || !slices.Contains(rep.Taken, module) {
		return Carried{}
	}
	c := Carried{Seen: true}
	for _, e := range rep.Errors {
		if e.Module == module {
			c.Failed = append(c.Failed, e)
		}
	}
	if len(c.Failed) > 0 {
		return c
	}
	var left []string
	for _, f := range rep.Held {
		if f.Module == module && !f.Unassigned {
			left = append(left, "file "+f.Path+" still held")
		}
	}
	if cr, ok := Detail[ContainerReport](rep, fsm.KindContainer); ok {
		for _, v := range cr.Containers {
			switch {
			case v.Module != module || v.Unassigned:
			case v.State == ContainerHeld:
				left = append(left, "container "+v.Name+" still held")
			case v.State == "":
				left = append(left, "container "+v.Name+" not there yet")
			}
		}
	}
	if od, ok := Detail[OpeningDetail](rep, fsm.KindOpening); ok {
		for _, o := range od.Openings {
			if o.Module == module && !o.Taken {
				left = append(left, "opening "+o.Opening+" not taken yet")
			}
		}
	}
	if len(left) > 0 {
		c.Waiting = strings.Join(left, "; ")
		return c
	}
	c.Done = true
	return c
}

// ReportTunnelTake is how far rep says the takeover of the found interface iface is carried out:
// done once a pass whose declaration takes iface over has the mesh's interface up in its place;
// failed when that pass's tunnel resource failed.
func ReportTunnelTake(rep *Report, iface string) Carried {
	if rep == nil {
		return Carried{}
	}
	det, ok := Detail[TunnelDetail](rep, fsm.KindTunnel)
	if !ok || det.Interface == "" || det.Found != iface {
		return Carried{}
	}
	c := Carried{Seen: true}
	for _, e := range rep.Errors {
		if e.Resource == fsm.KindTunnel+":"+det.Interface || e.Resource == fsm.KindTunnel+":"+iface {
			c.Failed = append(c.Failed, e)
		}
	}
	switch {
	case len(c.Failed) > 0:
	case det.State == TunnelMeshUp && !det.TakenAt.IsZero():
		c.Done = true
	case det.State == "":
		c.Waiting = fmt.Sprintf("the node reports no state of %s yet", det.Interface)
	default:
		c.Waiting = fmt.Sprintf("%s is %s", det.Interface, det.State)
		if det.Says != "" {
			c.Waiting += " (" + det.Says + ")"
		}
	}
	return c
}
