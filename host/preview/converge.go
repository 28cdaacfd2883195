package preview

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"meshd/fsm"
	"meshd/host/openings"
	"meshd/report"
)

// Converge works out the converge preview of d's node from rep, its latest report.
func Converge(rep *report.Report, d *fsm.Declaration) (report.ConvergePreview, error) {
	pv := report.ConvergePreview{Node: d.Node, Mode: d.Mode, Listeners: []report.PreviewListener{}, Published: []report.PreviewPublished{}, Take: []string{}}
	if rep == nil {
		return pv, &NoReportError{Node: d.Node, What: "what listens on it"}
	}
	if rep.Listeners == nil {
		why := "its agent does not report its listening sockets (an older meshd?)"
		if rep.ListenersError != "" {
			why = rep.ListenersError
		}
		return pv, fmt.Errorf("node %s: what listens on it is not known: %s", d.Node, why)
	}
	pv.ReportAt = rep.When
	cr := report.Containers(rep)
	var od *report.OpeningDetail
	if o, ok := report.Detail[report.OpeningDetail](rep, fsm.KindOpening); ok {
		od = &o
	}
	// What the modules the flip takes lose, as their takes' previews say it.
	for _, m := range d.Assigned {
		if slices.Contains(d.Taken, m) {
			continue
		}
		if tp, err := Take(rep, d, m); err == nil {
			pv.Losses = append(pv.Losses, tp.Losses()...)
		}
	}
	return Mark(pv, d, rep.Listeners, cr, od), nil
}

// Mark is the preview's decision: each socket and published port on a non-loopback
// address marked against d's openings and the mesh's own ports, the modules to take, the
// found firewall's retirement (od nil: not reported), and the plan token (none on a node already
// converged). It is pure.
func Mark(pv report.ConvergePreview, d *fsm.Declaration, ls []report.Listener, cr *report.ContainerReport, od *report.OpeningDetail) report.ConvergePreview {
	for _, l := range ls {
		if l.Addr.Unmap().IsLoopback() {
			continue
		}
		pv.Listeners = append(pv.Listeners, report.PreviewListener{Listener: l, Verdict: verdictOf(d, l.Proto, l.Port)})
	}
	if cr != nil {
		for _, p := range cr.Published {
			if a, err := netip.ParseAddr(p.HostIP); err == nil && a.Unmap().IsLoopback() {
				continue
			}
			pv.Published = append(pv.Published, report.PreviewPublished{Container: p.Container, HostIP: p.HostIP,
				HostPort: p.HostPort, Proto: protoOr(p.Proto), Verdict: verdictOf(d, protoOr(p.Proto), p.HostPort)})
		}
	}
	slices.SortFunc(pv.Listeners, func(a, b report.PreviewListener) int { return strings.Compare(listenerKey(a), listenerKey(b)) })
	slices.SortFunc(pv.Published, func(a, b report.PreviewPublished) int { return strings.Compare(publishedKey(a), publishedKey(b)) })
	pv.WillClose = 0
	for _, l := range pv.Listeners {
		if l.Verdict.Mark == report.MarkWillClose {
			pv.WillClose++
		}
	}
	for _, p := range pv.Published {
		if p.Verdict.Mark == report.MarkWillClose {
			pv.WillClose++
		}
	}
	for _, m := range d.Assigned {
		if !slices.Contains(d.Taken, m) {
			pv.Take = append(pv.Take, m)
		}
	}
	slices.Sort(pv.Take)
	if t := d.Tunnel; t.Rides != "" {
		pv.Tunnel = fmt.Sprintf("%s taken over by the mesh's interface of the same name, with its key %s, address %s and port %d", t.Rides, t.PublicKey, t.Address, t.ListenPort)
	}
	pv.Firewall = retirement(od)
	pv.Filter, pv.FilterError = openings.FilterText(d)
	if d.Mode == fsm.Converged { // nothing to flip: a token would only lead to a refusal
		pv.Converged = true
		return pv
	}
	pv.Token = planToken(pv)
	return pv
}

// verdictOf marks proto/port: declared by the first assigned module with an opening on it (any
// path, any source: the derived filter lets it in from there), by the mesh for its own ports,
// else closing.
func verdictOf(d *fsm.Declaration, proto string, port uint16) report.Verdict {
	for _, r := range d.Resources {
		o := r.Opening
		if r.Kind != fsm.KindOpening || o == nil || o.Port != port || protoOr(o.Proto) != proto {
			continue
		}
		s := fmt.Sprintf("%d/%s %s from %s", o.Port, protoOr(o.Proto), o.Path, o.From)
		if o.Guarded {
			s += ", guarded"
		}
		return report.Verdict{Mark: report.MarkDeclared, Module: r.Module, Opening: s}
	}
	m := d.Mesh
	for _, own := range []struct {
		proto string
		port  uint16
		name  string
	}{{"tcp", m.Bus, "bus"}, {"tcp", m.Raft, "raft"}, {"tcp", m.Gossip, "gossip"}, {"udp", m.Gossip, "gossip"}, {"udp", m.Tunnel, "tunnel"}} {
		if own.port != 0 && own.port == port && own.proto == proto {
			return report.Verdict{Mark: report.MarkDeclared, Module: report.MeshModule, Opening: fmt.Sprintf("%d/%s the mesh's %s port", port, proto, own.name)}
		}
	}
	return report.Verdict{Mark: report.MarkWillClose}
}

// retirement says how the flip retires the found firewall od reports.
func retirement(od *report.OpeningDetail) report.PreviewFirewall {
	if od == nil {
		return report.PreviewFirewall{Kind: "unknown", Retire: "not known: the node's report has no firewall part; the flip will read it again"}
	}
	fw := od.Firewall
	out := report.PreviewFirewall{Kind: fw.Kind, Description: fw.Description}
	switch {
	case fw.Retired:
		out.Retire = "nothing to retire: meshd retired it already"
	case fw.Refused != "":
		out.Retire = "cannot be retired: " + fw.Refused
	case fw.Kind == "ufw":
		out.Retire = "`ufw disable`; its configuration stays on disk as it is"
		if fw.Config != "" {
			out.Retire += " (" + fw.Config + ")"
		}
	case fw.Kind == "nftables":
		tables := "its tables"
		if len(fw.Tables) > 0 {
			tables = "its tables " + strings.Join(fw.Tables, ", ")
		}
		out.Retire = tables + " saved and moved aside, its loading at boot disabled; the container engine's tables and its configuration on disk stay"
	case fw.Kind == "iptables":
		out.Retire = "its own rules saved in order and removed, a closed INPUT policy opened, in iptables and ip6tables alike, its loading at boot disabled; the container engine's chains and its configuration on disk stay"
		if fw.Config != "" {
			out.Retire += " (" + fw.Config + ")"
		}
	case fw.Kind == "none":
		out.Retire = "nothing to retire: no firewall found"
	default:
		out.Retire = "cannot be retired: meshd does not retire a " + fw.Kind + " firewall"
	}
	return out
}

func listenerKey(l report.PreviewListener) string {
	return fmt.Sprintf("%s %s %05d %s %s", l.Proto, l.Addr, l.Port, l.Process, l.Verdict)
}

func publishedKey(p report.PreviewPublished) string {
	return fmt.Sprintf("%05d %s %s %s %s", p.HostPort, p.Proto, p.HostIP, p.Container, p.Verdict)
}

// planToken digests what the preview saw and decided (report.PlanLines), in a fixed order.
func planToken(pv report.ConvergePreview) string {
	sum := sha256.Sum256([]byte(strings.Join(report.PlanLines(pv), "\n")))
	return hex.EncodeToString(sum[:8])
}

func protoOr(p string) string {
	if p == "" {
		return "tcp"
	}
	return p
}
