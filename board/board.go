package board

import (
	"fmt"
	"strings"
	"time"

	"meshd/api"
	"meshd/fsm"
	"meshd/host/preview"
	"meshd/report"
)

// Overdue is how long a node may go without a report before the board says it is not heard from.
const Overdue = 60 * time.Second

// Build is the board of the record r with each node's last report (a node missing from reports
// has made none that this reader has) at now.
func Build(r *fsm.Record, reports map[string]*report.Report, now time.Time) api.Board {
	return assemble(r, func(n *fsm.Node) api.BoardRow {
		rep := reports[n.Name]
		return timed(buildRow(r, n, rep), n, rep, now)
	})
}

// assemble is the board of r with each node's row as row gives it, and the summary's counts.
func assemble(r *fsm.Record, row func(n *fsm.Node) api.BoardRow) api.Board {
	b := api.Board{Rows: []api.BoardRow{}}
	for _, name := range r.NodeNames() {
		n := r.Nodes[name]
		b.Rows = append(b.Rows, row(n))
		b.Nodes++
		if n.Mode == fsm.Converged && n.Flip == nil {
			b.Converged++
		}
		b.Modules += len(n.Assigned)
		for _, m := range n.Assigned {
			if n.IsTaken(m) {
				b.Taken++
			}
		}
	}
	b.CarriedNotEnrolled = len(r.Tunnel.Carried)
	b.Summary = fmt.Sprintf("%d of %d nodes converged; %d of %d modules taken", b.Converged, b.Nodes, b.Taken, b.Modules)
	if b.CarriedNotEnrolled > 0 {
		b.Summary += fmt.Sprintf("; %d carried %s not enrolled", b.CarriedNotEnrolled, plural(b.CarriedNotEnrolled, "peer", "peers"))
	}
	return b
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// buildRow is node n's row from the record and its report, but for what the time now changes
// (timed): a row the cache keeps while neither changes.
func buildRow(r *fsm.Record, n *fsm.Node, rep *report.Report) api.BoardRow {
	row := api.BoardRow{Node: n.Name, Mode: n.Mode}
	if rep != nil {
		row.LastHeard = rep.When
	}
	converged := n.Mode == fsm.Converged && n.Flip == nil
	adopted := api.BoardStep{Name: "adopted", Done: true}
	if joinedConverged(n) {
		adopted = api.BoardStep{Name: "adopted", Skipped: "joined converged"}
	}
	row.Steps = append(row.Steps, api.BoardStep{Name: "enrolled", Done: true}, adopted)
	isHub := r.Tunnel.Hub == n.Name
	if isHub || n.FoundTunnel != "" {
		took := (isHub && r.Tunnel.Taken != "") || n.TookTunnel
		if isHub && r.Tunnel.Taken == "" && n.FoundTunnel == "" {
			took = true // a hub that found no tunnel raised the mesh's own
		}
		row.Steps = append(row.Steps, api.BoardStep{Name: "tunnel taken", Done: took || converged})
	}
	for _, m := range n.Assigned {
		prepared := rep != nil && (contains(rep.Assigned, m) || contains(rep.Taken, m))
		taken := n.IsTaken(m) && report.ReportTake(rep, m).Done
		row.Steps = append(row.Steps, api.BoardStep{Name: "prepared " + m, Done: prepared || taken}, api.BoardStep{Name: "taken " + m, Done: taken})
	}
	row.Steps = append(row.Steps, api.BoardStep{Name: "converged", Done: converged})
	for _, s := range row.Steps {
		if !s.Done && s.Skipped == "" {
			row.Next = s.Name
			break
		}
	}
	row.Blocking = blocking(r, n, rep, row.Next)
	return row
}

// timed is row at now: how long n has been adopted, and the report's age first among what is in
// the way when it is overdue. It copies what it changes, so a kept row is never written.
func timed(row api.BoardRow, n *fsm.Node, rep *report.Report, now time.Time) api.BoardRow {
	if n.Mode == fsm.Adopted {
		row.AdoptedFor = now.Sub(n.ModeSince).Round(time.Second)
	}
	if rep == nil {
		return row
	}
	if age := now.Sub(rep.When); age > Overdue {
		row.Blocking = append([]string{fmt.Sprintf("not heard from for %ds", int(age.Seconds()))}, row.Blocking...)
	}
	return row
}

// joinedConverged says the node has been converged since it enrolled (a converged token, or a
// converged genesis): it never was adopted. A node flipped since has a later ModeSince.
func joinedConverged(n *fsm.Node) bool {
	return n.Mode == fsm.Converged && n.ModeSince.Equal(n.EnrolledAt)
}

// blocking reads what is in the way of next from the node's last report (its age aside: timed).
func blocking(r *fsm.Record, n *fsm.Node, rep *report.Report, next string) []string {
	var out []string
	if rep == nil {
		return []string{"no report from this node yet"}
	}
	for _, f := range rep.Held {
		if f.Changed {
			out = append(out, fmt.Sprintf("held file %s (%s) %s", f.Path, f.Module, orDefault(f.Reason, report.ChangedBySomethingElse)))
		}
	}
	if cr := report.Containers(rep); cr != nil {
		for _, c := range cr.Containers {
			if c.Changed && c.State == report.ContainerHeld {
				out = append(out, fmt.Sprintf("held container %s (%s) %s", c.Name, c.Module, orDefault(c.Reason, report.ChangedBySomethingElse)))
			}
			if module, ok := strings.CutPrefix(next, "taken "); ok && c.Module == module && c.State == report.ContainerHeld && !c.Running {
				out = append(out, fmt.Sprintf("take of %s: its found container %s is not running", module, c.Name))
			}
		}
	}
	for _, e := range rep.Errors {
		if strings.Contains(e.Reason, "stepped back") {
			out = append(out, fmt.Sprintf("take of %s stepped back: %s", e.Module, e.Reason))
		}
	}
	// The converge takes whatever is not taken yet: its preview's closing ports are in the way of
	// the steps it carries out.
	if next == "converged" || (strings.HasPrefix(next, "taken ") && n.Flip == nil && n.Mode == fsm.Adopted) {
		if d, err := fsm.Compose(r, n.Name); err == nil {
			if pv, err := preview.Converge(rep, d); err == nil && pv.WillClose > 0 {
				out = append(out, fmt.Sprintf("converge preview: %d %s will close", pv.WillClose, plural(pv.WillClose, "port", "ports")))
			}
		}
	}
	return out
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}
