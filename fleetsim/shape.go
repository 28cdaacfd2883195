package fleetsim

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"meshd/fsm"
	"meshd/lab"
	"meshd/report"
)

// Shape is what a simulated machine holds, and so what its host report carries.
type Shape struct {
	Name string
	// Containers are running on the machine, each publishing one port; Rules the found
	// firewall's rules; Files the found files a predecessor's sync keeps.
	Containers, Rules int
	Files             []string
}

// Shapes are the simulator's machines: measured is research 012's (60 containers, 106 firewall
// rules, 12 synced files; the lab's measured scenario), lab a bare lab machine's.
func Shapes() map[string]Shape {
	in, fwd, err := lab.MeasuredRules(60)
	if err != nil {
		panic(err) // 60 is the scenario's own size
	}
	return map[string]Shape{
		"measured": {Name: "measured", Containers: 60, Rules: in + fwd, Files: lab.MeasuredSyncedFiles()},
		"lab":      {Name: "lab", Containers: 0, Rules: 4, Files: []string{lab.WebappFile}},
	}
}

// ShapeNames are the shapes' names, sorted.
func ShapeNames() []string {
	var out []string
	for n := range Shapes() {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Report is the host report a machine of this shape gives for declaration d at pass time now:
// its found files held, its containers and their ports, its firewall, and every file the
// declaration's modules declare written, as a host that carried the declaration out reports.
func (s Shape) Report(node string, d *fsm.Declaration, now time.Time) report.Report {
	r := report.Report{Node: node, Mode: fsm.Adopted, When: now, Taken: []string{}, Assigned: []string{},
		Held: []report.HeldFile{}, Written: []report.WrittenFile{}, Errors: []report.ResourceError{}, Kinds: map[string]any{}}
	if d != nil {
		r.Mode, r.Assigned, r.Taken = d.Mode, slices.Clone(d.Assigned), slices.Clone(d.Taken)
	}
	since := now.Add(-time.Hour).Truncate(time.Second)
	for _, f := range s.Files {
		h := digest(node + f)
		r.Held = append(r.Held, report.HeldFile{Path: f, Module: "predecessor", RecordedHash: h, CurrentHash: h, Since: since})
	}
	ctrs := report.ContainerReport{Engine: "unix:///run/docker.sock", Reachable: true, Containers: []report.ContainerView{}}
	for i := range s.Containers {
		port := uint16(8100 + i)
		ctrs.Published = append(ctrs.Published, report.PublishedPort{Container: fmt.Sprintf("svc%02d", i), HostIP: "0.0.0.0",
			HostPort: port, ContainerPort: port, Proto: "tcp"})
		r.Listeners = append(r.Listeners, report.Listener{Proto: "tcp", Addr: netip.IPv4Unspecified(), Port: port, Process: "docker-proxy"})
	}
	r.Kinds[fsm.KindContainer] = ctrs
	openings := report.OpeningDetail{Mode: r.Mode, Watch: "nftables monitor", Openings: []report.OpeningView{},
		Firewall: report.FirewallView{Kind: "nftables", Description: fmt.Sprintf("nftables (nf_tables), active, %d rules, /etc/nftables.conf", s.Rules),
			Config: "/etc/nftables.conf", Tables: []string{"inet filter"}}}
	if d != nil {
		for _, res := range d.Resources {
			switch {
			case res.File != nil:
				r.Written = append(r.Written, report.WrittenFile{Path: res.File.Path, Module: res.Module, Hash: digest(res.File.Content), At: now})
			case res.Opening != nil:
				openings.Openings = append(openings.Openings, report.OpeningView{Resource: res.ID(), Module: res.Module,
					Taken: res.Taken, Opening: res.ID(), Through: "the found firewall", State: report.OpeningInForce, Since: now})
			}
		}
	}
	r.Kinds[fsm.KindOpening] = openings
	return r
}

// InForce says whether a report is of a pass that had module assigned and failed nothing of it.
func InForce(r *report.Report, module string) bool {
	if r == nil || !slices.Contains(r.Assigned, module) {
		return false
	}
	for _, e := range r.Errors {
		if e.Module == module {
			return false
		}
	}
	return true
}

func digest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}
