package report

// The converge preview's types (ConvergePreview and its parts), read by servers and the CLI, and
// its text (PlanLines, PlanChanges). host/preview works it out from a report and a declaration.

import (
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"meshd/fsm"
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
	// Losses are what the found containers of the modules it takes lose (each naming its
	// container, as a take's preview says them): the flip is refused unless the operator
	// accepts them (`--accept-loss`).
	Losses []string `json:"losses,omitempty"`
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
	// when, nor the pids), so that a later flip can check nothing changed since; "" on a node
	// already converged (Converged), which has nothing to flip.
	Token string `json:"token"`
	// Converged says the node is converged already: the preview lists what it listens on, and
	// offers no plan (its flip would be refused as already converged).
	Converged bool `json:"converged"`
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

// PlanLines are what a plan token digests, one fact a line: the node, its mode, every socket
// (without its pid: a restarted service is the same service) and published port with its
// verdict, the modules to take, the found firewall and the derived filter's rules. Comparing
// two previews' lines (PlanChanges) names what changed between them.
func PlanLines(pv ConvergePreview) []string {
	lines := []string{"node " + pv.Node, "mode " + string(pv.Mode)}
	var rest []string
	for _, l := range pv.Listeners {
		rest = append(rest, fmt.Sprintf("listening %s %s (%s): %s", l.Proto, net.JoinHostPort(l.Addr.String(), fmt.Sprint(l.Port)), OrDash(l.Process), l.Verdict))
	}
	for _, p := range pv.Published {
		rest = append(rest, fmt.Sprintf("published %s %s (container %s): %s", p.Proto, net.JoinHostPort(orUnspecified(p.HostIP), fmt.Sprint(p.HostPort)), p.Container, p.Verdict))
	}
	slices.Sort(rest)
	lines = append(lines, rest...)
	lines = append(lines, "take "+strings.Join(pv.Take, ","))
	for _, l := range pv.Losses {
		lines = append(lines, "loses "+l)
	}
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

// OrDash is s, or "-" when s is empty: how a report's text shows a value not known.
func OrDash(s string) string {
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

// Detail is a driver's part of a report as T, whether it was made in this process or
// decoded from JSON (a report gossip or the bus carried).
func Detail[T any](rep *Report, kind string) (T, bool) {
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
