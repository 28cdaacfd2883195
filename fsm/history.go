package fsm

// The history: what happened to the mesh when, and who did it, kept in the record itself so it
// survives snapshots and restores (Raft compacts its log; the log alone forgets). Every command
// applied from version historySince on appends one event (a converge naming what it takes, one
// more a module taken), named by its raft index, with the command's op, the node and module it
// is about, its By and its own time; the host events that
// matter come in as OpHostEvents, which the leader proposes when a node's report shows a
// condition start or end (each standing condition is one event, not one per report). The history
// is bounded by HistoryKeep (a count and an age, measured on the command's own time), so Apply
// stays pure: nothing here reads a clock.

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"meshd/catalogue"
)

// historySince is the first command version that appends to the history. A command of an older
// version applies as it did then and appends nothing, so a replayed old log holds the record it
// held.
const historySince = 5

// The history's ops.
const (
	// OpHostEvents records the conditions a node's latest report shows (HostEvents): each one
	// that started or ended since the last is an event.
	OpHostEvents Op = "history.host"
	// OpHistoryKeep sets how much history the record keeps (HistoryKeep).
	OpHistoryKeep Op = "history.keep"
)

// The defaults of HistoryKeep: the last 2000 events, none older than 30 days.
const (
	DefaultHistoryCount = 2000
	DefaultHistoryAge   = 30 * 24 * time.Hour
)

// History is the record's timeline.
type History struct {
	Keep HistoryKeep `json:"keep"`
	// Events are in the order of their index, oldest first.
	Events []Event `json:"events"`
	// Standing are the host conditions each node's latest recorded report showed, by node, sorted
	// by key: what a new OpHostEvents is compared with.
	Standing map[string][]HostCondition `json:"standing,omitempty"`
}

// HistoryKeep bounds the history: at most Count events, none older than Age before the newest
// command's time. Zero keeps the default.
type HistoryKeep struct {
	Count int           `json:"count"`
	Age   time.Duration `json:"age"`
}

// Event is one thing that happened.
type Event struct {
	// Index is the raft index of the command that recorded it.
	Index uint64    `json:"index"`
	At    time.Time `json:"at"`
	Op    Op        `json:"op"`
	// Node and Module say what it is about, "" when nothing in particular.
	Node   string `json:"node,omitempty"`
	Module string `json:"module,omitempty"`
	// By is who gave the command ("operator NAME", "root on NODE's socket"); "" for what an
	// agent did of itself.
	By string `json:"by,omitempty"`
	// Host says the event is the machine's (read from its report), not an operator's command.
	Host bool `json:"host,omitempty"`
	// What says it in words.
	What string `json:"what"`
}

// HostCondition is one condition a node's report shows: a held file changed by something else,
// a found firewall enabled again by hand, the tunnel's takeover state, a take stepped back.
type HostCondition struct {
	// Key names it (the kind and what it is about); the same standing condition has the same key
	// in every report.
	Key string `json:"key"`
	// Module is the module it is about, "" when none.
	Module string `json:"module,omitempty"`
	// Says is the condition in words, as the event says it when it starts.
	Says string `json:"says"`
	// Ended, when set, is what the event says when the condition is no longer shown.
	Ended string `json:"ended,omitempty"`
}

// HostEvents is the set of conditions Node's latest report shows, all of them.
type HostEvents struct {
	Node       string          `json:"node"`
	Conditions []HostCondition `json:"conditions"`
}

// HistoryKeepSet sets the bounds; a zero field keeps the default.
type HistoryKeepSet struct {
	Count int           `json:"count"`
	Age   time.Duration `json:"age"`
}

// ApplyAt applies one encoded command committed at raft index index, as Apply does, and appends
// what it did to the history. A refused command appends nothing: the record is as it was.
func ApplyAt(r *Record, index uint64, data []byte) (any, error) {
	v, _, err := applyAtTouching(r, index, data)
	return v, err
}

// applyAtTouching is ApplyAt, saying also which declarations the command touched.
func applyAtTouching(r *Record, index uint64, data []byte) (any, Touched, error) {
	v, t, err := applyTouching(r, data)
	if err != nil {
		return v, t, err
	}
	var c Command
	if json.Unmarshal(data, &c) != nil || c.V < historySince {
		return v, t, nil
	}
	h := r.history()
	if evs, ok := v.(hostEventsApplied); ok {
		for _, e := range evs {
			e.Index, e.At = index, c.At
			h.Events = append(h.Events, e)
		}
	} else if m, ok := v.(*ManyApplied); ok {
		for _, e := range m.events(&c) {
			e.Index, e.At, e.Op, e.By = index, c.At, c.Op, c.By
			h.Events = append(h.Events, e)
		}
	} else {
		e := describe(&c, v)
		e.Index, e.At, e.Op, e.By = index, c.At, c.Op, c.By
		h.Events = append(h.Events, e)
		for _, t := range takenByConverge(&c, v) {
			t.Index, t.At, t.Op, t.By = index, c.At, c.Op, c.By
			h.Events = append(h.Events, t)
		}
	}
	h.prune(c.At)
	return v, t, nil
}

// takenByConverge are the "taken" events of a converge that names what it takes (Flip.Takes):
// one a module still assigned, as `meshd module take` records one, under the flip's index.
func takenByConverge(c *Command, v any) []Event {
	n, ok := v.(*Node)
	if c.Op != OpFlip || !ok {
		return nil
	}
	var b Flip
	if json.Unmarshal(c.Body, &b) != nil || b.To != Converged {
		return nil
	}
	var out []Event
	for _, m := range b.Takes {
		if slices.Contains(n.Assigned, m) {
			out = append(out, Event{Node: n.Name, Module: m, What: fmt.Sprintf("%s taken on %s, by its converge", m, n.Name)})
		}
	}
	return out
}

// hostEventsApplied is what an OpHostEvents produced: the events to append (ApplyAt names them
// by index).
type hostEventsApplied []Event

func (r *Record) history() *History {
	if r.History == nil {
		r.History = &History{}
	}
	return r.History
}

// Limits are the bounds in force: Keep with the defaults filled in.
func (k HistoryKeep) Limits() (int, time.Duration) {
	count, age := k.Count, k.Age
	if count <= 0 {
		count = DefaultHistoryCount
	}
	if age <= 0 {
		age = DefaultHistoryAge
	}
	return count, age
}

// prune drops the events beyond the count and those older than the age before now.
func (h *History) prune(now time.Time) {
	count, age := h.Keep.Limits()
	drop := 0
	for drop < len(h.Events) && h.Events[drop].At.Before(now.Add(-age)) {
		drop++
	}
	if n := len(h.Events) - drop; n > count {
		drop += n - count
	}
	if drop > 0 {
		h.Events = append([]Event(nil), h.Events[drop:]...)
	}
}

func applyHostEvents(r *Record, c *Command, b *HostEvents) (any, error) {
	if c.V < historySince {
		return nil, refuse(c.Op, b.Node, "", "host events need command version %d", historySince)
	}
	if r.Nodes[b.Node] == nil {
		return nil, unknownNode(r, c.Op, b.Node)
	}
	now := append([]HostCondition(nil), b.Conditions...)
	sort.Slice(now, func(i, j int) bool { return now[i].Key < now[j].Key })
	seen := map[string]bool{}
	for _, x := range now {
		if x.Key == "" || seen[x.Key] {
			return nil, refuse(c.Op, b.Node, x.Module, "host condition %q: every condition needs a key of its own", x.Key)
		}
		seen[x.Key] = true
	}
	h := r.history()
	was := map[string]HostCondition{}
	for _, x := range h.Standing[b.Node] {
		was[x.Key] = x
	}
	var out hostEventsApplied
	for _, x := range now {
		if _, ok := was[x.Key]; !ok {
			out = append(out, Event{Op: c.Op, Node: b.Node, Module: x.Module, Host: true, What: x.Says})
		}
	}
	for _, x := range h.Standing[b.Node] {
		if !seen[x.Key] && x.Ended != "" {
			out = append(out, Event{Op: c.Op, Node: b.Node, Module: x.Module, Host: true, What: x.Ended})
		}
	}
	if h.Standing == nil {
		h.Standing = map[string][]HostCondition{}
	}
	if len(now) == 0 {
		delete(h.Standing, b.Node)
	} else {
		h.Standing[b.Node] = now
	}
	return out, nil
}

func applyHistoryKeep(r *Record, c *Command, b *HistoryKeepSet) (any, error) {
	if c.V < historySince {
		return nil, refuse(c.Op, "", "", "history bounds need command version %d", historySince)
	}
	if b.Count < 0 || b.Age < 0 {
		return nil, refuse(c.Op, "", "", "history bounds: count %d and age %s cannot be negative", b.Count, b.Age)
	}
	if b.Count != 0 && b.Count < 10 {
		return nil, refuse(c.Op, "", "", "history bounds: keep at least 10 events (asked %d)", b.Count)
	}
	if b.Age != 0 && b.Age < time.Hour {
		return nil, refuse(c.Op, "", "", "history bounds: keep at least an hour (asked %s)", b.Age)
	}
	h := r.history()
	h.Keep = HistoryKeep(*b)
	return h.Keep, nil
}

// StandingConditions are the host conditions the record last recorded for node, sorted by key.
func (r *Record) StandingConditions(node string) []HostCondition {
	if r.History == nil {
		return nil
	}
	return r.History.Standing[node]
}

// SameConditions says whether a and b are the same set of conditions (by key), in any order.
func SameConditions(a, b []HostCondition) bool {
	if len(a) != len(b) {
		return false
	}
	keys := map[string]bool{}
	for _, x := range a {
		keys[x.Key] = true
	}
	for _, x := range b {
		if !keys[x.Key] {
			return false
		}
	}
	return true
}

// describe says what a command did: what it is about and in words.
func describe(c *Command, v any) Event {
	var b struct {
		Node      string            `json:"node"`
		Module    string            `json:"module"`
		Name      string            `json:"name"`
		Mode      Mode              `json:"mode"`
		To        Mode              `json:"to"`
		Plan      string            `json:"plan"`
		Interface string            `json:"interface"`
		Server    bool              `json:"server"`
		Values    map[string]string `json:"values"`
		Expires   time.Time         `json:"expires"`
		// Privileged is a catalogue.add's operator word (CatalogueAdd.Privileged).
		Privileged bool `json:"privileged"`
		// AcceptLoss are the losses a take's operator accepted (ModuleOnNode.AcceptLoss).
		AcceptLoss []string `json:"accept_loss"`
	}
	_ = json.Unmarshal(c.Body, &b)
	e := Event{Node: b.Node, Module: b.Module}
	role := "client"
	if b.Server {
		role = "server"
	}
	switch c.Op {
	case OpGenesis:
		e.What = fmt.Sprintf("the mesh began on %s (%s)", b.Node, b.Mode)
	case OpNodeEnrol:
		mode := Mode("")
		if n, ok := v.(*Node); ok {
			mode = n.Mode
		}
		e.What = fmt.Sprintf("%s enrolled as a %s (%s)", b.Node, role, mode)
	case OpModeSet:
		e.What = fmt.Sprintf("%s set %s", b.Node, b.Mode)
	case OpSettingsSet:
		var kv []string
		for _, k := range sortedKeys(b.Values) {
			val := b.Values[k]
			if val == "" {
				val = "(default)"
			}
			kv = append(kv, k+"="+val)
		}
		e.What = fmt.Sprintf("settings of %s: %s", b.Node, strings.Join(kv, ", "))
	case OpModuleAssign:
		e.What = fmt.Sprintf("%s assigned to %s", b.Module, b.Node)
	case OpModuleUnassign:
		e.What = fmt.Sprintf("%s unassigned from %s", b.Module, b.Node)
	case OpModuleTake:
		e.What = fmt.Sprintf("%s taken on %s", b.Module, b.Node)
		if len(b.AcceptLoss) > 0 {
			e.What += ", accepting the loss of: " + strings.Join(b.AcceptLoss, "; ")
		}
	case OpCatalogueAdd:
		if m, ok := v.(*catalogue.Module); ok {
			e.Module = m.Name
		}
		e.What = fmt.Sprintf("module %s added to the catalogue", e.Module)
		if b.Privileged {
			e.What += ", privileged: root on every machine it is assigned to"
		}
	case OpModuleConfirm:
		e.What = fmt.Sprintf("module %s confirmed privileged: root on every machine it is assigned to", b.Module)
	case OpTokenCreate:
		e.What = fmt.Sprintf("an enrolment token made for a %s (%s, expires %s)", role, b.Mode, b.Expires.UTC().Format(time.RFC3339))
	case OpTunnelTake:
		e.What = fmt.Sprintf("%s took tunnel %s over", b.Node, b.Interface)
	case OpFlip:
		if b.To == Converged {
			e.What = fmt.Sprintf("the converge of %s recorded", b.Node)
			if b.Plan != "" {
				e.What += " (plan " + b.Plan + ")"
			}
			if len(b.AcceptLoss) > 0 {
				e.What += ", accepting the loss of: " + strings.Join(b.AcceptLoss, "; ")
			}
		} else {
			e.What = fmt.Sprintf("the return of %s to adopted recorded", b.Node)
		}
	case OpFlipDone:
		e.What = fmt.Sprintf("%s is %s", b.Node, b.To)
	case OpServerRemove:
		e.What = fmt.Sprintf("%s no longer a server", b.Node)
	case OpNodeRemove:
		e.What = fmt.Sprintf("%s removed from the record", b.Node)
	case OpCredentialCreate:
		e.What = fmt.Sprintf("operator credential %s created", b.Name)
	case OpCredentialRevoke:
		e.What = fmt.Sprintf("operator credential %s revoked", b.Name)
	case OpHistoryKeep:
		if k, ok := v.(HistoryKeep); ok {
			count, age := k.Limits()
			e.What = fmt.Sprintf("history kept to %d events, %s", count, age)
		}
	default:
		e.What = string(c.Op)
	}
	return e
}
