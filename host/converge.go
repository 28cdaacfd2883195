package host

// The preview of a converge (`meshd converge NODE --preview`): what is reachable on a node now
// (its listening sockets and its published container ports, from its latest report) read
// against what its declaration opens, each marked declared or closing; the modules the flip
// takes; the found firewall it retires and how; and a plan token, a digest of all of it. The
// declaration says what is declared (fsm composes it); this file only compares it to what the
// host observed, changing nothing.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"meshd/fsm"
	"meshd/netfilter"
)

// Marks of a socket or a published port in a converge preview.
const (
	MarkDeclared  = "declared"
	MarkWillClose = "will close"
)

// MeshModule is the name a preview gives the mesh's own ports (bus, raft, gossip, tunnel).
const MeshModule = "mesh"

// ConvergePreview is what converging Node will do to what is reachable on it.
type ConvergePreview struct {
	Node string   `json:"node"`
	Mode fsm.Mode `json:"mode"`
	// ReportAt is when the node's report the preview reads was made.
	ReportAt time.Time `json:"report_at"`
	// Listeners are the listening sockets on non-loopback addresses; Published the container
	// ports published on non-loopback addresses, meshd's or not.
	Listeners []PreviewListener  `json:"listeners"`
	Published []PreviewPublished `json:"published"`
	// Take are the modules assigned and not yet taken: the flip takes them.
	Take []string `json:"take"`
	// Tunnel says the found tunnel the node still rides and that the flip takes it over (the
	// mesh's interface in its place with its key, address and port); empty: nothing to take.
	Tunnel string `json:"tunnel,omitempty"`
	// Firewall is the found firewall and how the flip retires it.
	Firewall PreviewFirewall `json:"firewall"`
	// Filter is the derived filter the flip loads, as nft prints it (FilterError: why it
	// cannot be composed; the flip would fail on it).
	Filter      string `json:"filter"`
	FilterError string `json:"filter_error,omitempty"`
	// WillClose counts the sockets and published ports marked MarkWillClose.
	WillClose int `json:"will_close"`
	// Token is the plan token: the short hex sha256 of what the preview saw and decided (not
	// when, nor the pids), so that a later flip can check nothing changed since.
	Token string `json:"token"`
}

// Verdict is how one socket or published port is marked: MarkDeclared by Module (through
// Opening, as the declaration states it), or MarkWillClose.
type Verdict struct {
	Mark    string `json:"mark"`
	Module  string `json:"module,omitempty"`
	Opening string `json:"opening,omitempty"`
}

// String reads "declared by web (8080/tcp incoming from anywhere)" or "will close".
func (v Verdict) String() string {
	if v.Mark != MarkDeclared {
		return v.Mark
	}
	s := "declared by " + v.Module
	if v.Opening != "" {
		s += " (" + v.Opening + ")"
	}
	return s
}

// PreviewListener is one listening socket and its verdict.
type PreviewListener struct {
	Listener
	Verdict Verdict `json:"verdict"`
}

// PreviewPublished is one published container port and its verdict.
type PreviewPublished struct {
	Container string  `json:"container"`
	HostIP    string  `json:"host_ip"`
	HostPort  uint16  `json:"host_port"`
	Proto     string  `json:"proto"`
	Verdict   Verdict `json:"verdict"`
}

// PreviewFirewall is the found firewall and what the flip does to it.
type PreviewFirewall struct {
	Kind        string `json:"kind"`
	Description string `json:"description,omitempty"`
	// Retire says how the flip retires it, or why it cannot.
	Retire string `json:"retire"`
}

// PreviewConverge works out the converge preview of d's node from rep, its latest report.
func PreviewConverge(rep *Report, d *fsm.Declaration) (ConvergePreview, error) {
	pv := ConvergePreview{Node: d.Node, Mode: d.Mode, Listeners: []PreviewListener{}, Published: []PreviewPublished{}, Take: []string{}}
	if rep == nil {
		return pv, fmt.Errorf("node %s has sent no host report yet: what listens on it is not known; try again once its agent has made a pass", d.Node)
	}
	if rep.Listeners == nil {
		why := "its agent does not report its listening sockets (an older meshd?)"
		if rep.ListenersError != "" {
			why = rep.ListenersError
		}
		return pv, fmt.Errorf("node %s: what listens on it is not known: %s", d.Node, why)
	}
	pv.ReportAt = rep.When
	cr := reportContainers(rep)
	var od *OpeningDetail
	if o, ok := reportKind[OpeningDetail](rep, fsm.KindOpening); ok {
		od = &o
	}
	return MarkConverge(pv, d, rep.Listeners, cr, od), nil
}

// MarkConverge is the preview's decision: each socket and published port on a non-loopback
// address marked against d's openings and the mesh's own ports, the modules to take, the
// found firewall's retirement (od nil: not reported), and the plan token. It is pure.
func MarkConverge(pv ConvergePreview, d *fsm.Declaration, ls []Listener, cr *ContainerReport, od *OpeningDetail) ConvergePreview {
	for _, l := range ls {
		if l.Addr.Unmap().IsLoopback() {
			continue
		}
		pv.Listeners = append(pv.Listeners, PreviewListener{Listener: l, Verdict: verdictOf(d, l.Proto, l.Port)})
	}
	if cr != nil {
		for _, p := range cr.Published {
			if a, err := netip.ParseAddr(p.HostIP); err == nil && a.Unmap().IsLoopback() {
				continue
			}
			pv.Published = append(pv.Published, PreviewPublished{Container: p.Container, HostIP: p.HostIP,
				HostPort: p.HostPort, Proto: protoOr(p.Proto), Verdict: verdictOf(d, protoOr(p.Proto), p.HostPort)})
		}
	}
	slices.SortFunc(pv.Listeners, func(a, b PreviewListener) int { return strings.Compare(listenerKey(a), listenerKey(b)) })
	slices.SortFunc(pv.Published, func(a, b PreviewPublished) int { return strings.Compare(publishedKey(a), publishedKey(b)) })
	pv.WillClose = 0
	for _, l := range pv.Listeners {
		if l.Verdict.Mark == MarkWillClose {
			pv.WillClose++
		}
	}
	for _, p := range pv.Published {
		if p.Verdict.Mark == MarkWillClose {
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
		pv.Tunnel = fmt.Sprintf("%s taken over by %s with its key %s, address %s and port %d", t.Rides, fsm.MeshInterface, t.PublicKey, t.Address, t.ListenPort)
	}
	pv.Firewall = retirement(od)
	pv.Filter, pv.FilterError = derivedFilterText(d)
	pv.Token = planToken(pv)
	return pv
}

// derivedFilterText is the derived filter d's node loads once converged, composed as the
// opening driver composes it (with its defaults: the declaration's interface, else
// MeshInterface; DefaultForwardFrom).
func derivedFilterText(d *fsm.Declaration) (string, string) {
	var rs []fsm.Resource
	for _, r := range d.Resources {
		if r.Kind == fsm.KindOpening {
			rs = append(rs, r)
		}
	}
	w := newOpeningDriver(OpeningConfig{}, nil).compose(d, rs)
	text, err := netfilter.FilterText(w.filter)
	if err != nil {
		return "", fmt.Sprintf("the derived filter cannot be composed: %v", err)
	}
	return text, ""
}

// verdictOf marks proto/port: declared by the first assigned module with an opening on it (any
// path, any source: the derived filter lets it in from there), by the mesh for its own ports,
// else closing.
func verdictOf(d *fsm.Declaration, proto string, port uint16) Verdict {
	for _, r := range d.Resources {
		o := r.Opening
		if r.Kind != fsm.KindOpening || o == nil || o.Port != port || protoOr(o.Proto) != proto {
			continue
		}
		s := fmt.Sprintf("%d/%s %s from %s", o.Port, protoOr(o.Proto), o.Path, o.From)
		if o.Guarded {
			s += ", guarded"
		}
		return Verdict{Mark: MarkDeclared, Module: r.Module, Opening: s}
	}
	m := d.Mesh
	for _, own := range []struct {
		proto string
		port  uint16
		name  string
	}{{"tcp", m.Bus, "bus"}, {"tcp", m.Raft, "raft"}, {"tcp", m.Gossip, "gossip"}, {"udp", m.Gossip, "gossip"}, {"udp", m.Tunnel, "tunnel"}} {
		if own.port != 0 && own.port == port && own.proto == proto {
			return Verdict{Mark: MarkDeclared, Module: MeshModule, Opening: fmt.Sprintf("%d/%s the mesh's %s port", port, proto, own.name)}
		}
	}
	return Verdict{Mark: MarkWillClose}
}

// retirement says how the flip retires the found firewall od reports.
func retirement(od *OpeningDetail) PreviewFirewall {
	if od == nil {
		return PreviewFirewall{Kind: "unknown", Retire: "not known: the node's report has no firewall part; the flip will read it again"}
	}
	fw := od.Firewall
	out := PreviewFirewall{Kind: fw.Kind, Description: fw.Description}
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

func listenerKey(l PreviewListener) string {
	return fmt.Sprintf("%s %s %05d %s %s", l.Proto, l.Addr, l.Port, l.Process, l.Verdict)
}

func publishedKey(p PreviewPublished) string {
	return fmt.Sprintf("%05d %s %s %s %s", p.HostPort, p.Proto, p.HostIP, p.Container, p.Verdict)
}

// planToken digests what the preview saw and decided (PlanLines), in a fixed order.
func planToken(pv ConvergePreview) string {
	sum := sha256.Sum256([]byte(strings.Join(PlanLines(pv), "\n")))
	return hex.EncodeToString(sum[:8])
}

// PlanLines are what a plan token digests, one fact a line: the node, its mode, every socket
// (without its pid: a restarted service is the same service) and published port with its
// verdict, the modules to take, the found firewall and the derived filter's rules. Comparing
// two previews' lines (PlanChanges) names what changed between them.
func PlanLines(pv ConvergePreview) []string {
	lines := []string{"node " + pv.Node, "mode " + string(pv.Mode)}
	var rest []string
	for _, l := range pv.Listeners {
		rest = append(rest, fmt.Sprintf("listening %s %s (%s): %s", l.Proto, net.JoinHostPort(l.Addr.String(), fmt.Sprint(l.Port)), orDash(l.Process), l.Verdict))
	}
	for _, p := range pv.Published {
		rest = append(rest, fmt.Sprintf("published %s %s (container %s): %s", p.Proto, net.JoinHostPort(orUnspecified(p.HostIP), fmt.Sprint(p.HostPort)), p.Container, p.Verdict))
	}
	slices.Sort(rest)
	lines = append(lines, rest...)
	lines = append(lines, "take "+strings.Join(pv.Take, ","))
	if pv.Tunnel != "" {
		lines = append(lines, "tunnel "+pv.Tunnel)
	}
	lines = append(lines, "found firewall "+pv.Firewall.Kind+": "+pv.Firewall.Description+"; retired by "+pv.Firewall.Retire)
	if pv.FilterError != "" {
		lines = append(lines, "filter "+pv.FilterError)
	}
	for _, l := range strings.Split(pv.Filter, "\n") {
		if l = strings.TrimSpace(l); strings.Contains(l, " comment ") {
			lines = append(lines, "filter rule "+l)
		}
	}
	return lines
}

// PlanChanges names what changed between the preview a plan token was made from (was) and the
// preview of now: each fact of one that the other lacks, "new: …" or "gone: …".
func PlanChanges(was, now ConvergePreview) []string {
	a, b := PlanLines(was), PlanLines(now)
	var out []string
	for _, l := range b {
		if !slices.Contains(a, l) {
			out = append(out, "new: "+l)
		}
	}
	for _, l := range a {
		if !slices.Contains(b, l) {
			out = append(out, "gone: "+l)
		}
	}
	return out
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func orUnspecified(s string) string {
	if s == "" {
		return "0.0.0.0"
	}
	return s
}

func protoOr(p string) string {
	if p == "" {
		return "tcp"
	}
	return p
}

// reportKind is a driver's part of a report as T, whether it was made in this process or
// decoded from JSON (a report gossip or the bus carried).
func reportKind[T any](rep *Report, kind string) (T, bool) {
	var out T
	switch c := rep.Kinds[kind].(type) {
	case nil:
		return out, false
	case T:
		return c, true
	case *T:
		return *c, c != nil
	default:
		b, err := json.Marshal(c)
		if err != nil || json.Unmarshal(b, &out) != nil {
			return out, false
		}
		return out, true
	}
}
