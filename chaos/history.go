package chaos

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// Kind is what an operator command does to the record, in the model's words.
type Kind string

// The kinds the model knows. A command of another kind (a token created) is recorded in the
// history but is not part of the model.
const (
	KindAssign   Kind = "assign"   // meshd module assign NODE MODULE
	KindUnassign Kind = "unassign" // meshd module unassign NODE MODULE
	KindTake     Kind = "take"     // meshd module take NODE MODULE
	KindSet      Kind = "set"      // meshd node set NODE KEY=VALUE
	KindConverge Kind = "converge" // meshd converge NODE
	KindAdopt    Kind = "adopt"    // meshd adopt NODE
	KindRead     Kind = "read"     // meshd node show NODE --json
	KindJoin     Kind = "join"     // meshd join TOKEN --name NODE --tunnel IFACE (on the machine itself)
	KindTunnel   Kind = "tunnel"   // meshd tunnel take NODE IFACE (a spoke's found tunnel)
	KindToken    Kind = "token"    // meshd token create (not modelled)
	KindPreview  Kind = "preview"  // meshd converge NODE --preview (a read of the machine, not modelled)
)

// Answer is what a command's caller learned.
type Answer string

const (
	// Acked: the command exited 0; meshd acknowledges only what Raft committed and the record
	// applied, so the model must have applied it, once, between the call and the answer.
	Acked Answer = "acked"
	// Refused: the record refused it for what it holds (already assigned, not assigned, already
	// taken, already converged): nothing was applied, and the model must agree a refusal was due.
	Refused Answer = "refused"
	// Unknown: any other failure (no leader, a timeout, a killed agent, a wait that ended): the
	// command may have been applied, once, at any time after its call, or never.
	Unknown Answer = "unknown"
	// NotSent: the CLI reached no agent (its socket was not there), so nothing was proposed: the
	// command was not applied, whatever the record holds.
	NotSent Answer = "not-sent"
)

// NodeState is one node as the record holds it, in the model's terms: the mode the operator
// last asked for (the flip's target while a flip is pending), the assigned and (effectively)
// taken modules, sorted, the settings the workload touches, and whether its found tunnel was
// taken over. A node the record does not hold yet (p1 before it enrols) has no mode.
type NodeState struct {
	Mode     string            `json:"mode"`
	Assigned []string          `json:"assigned"`
	Taken    []string          `json:"taken"`
	Settings map[string]string `json:"settings,omitempty"`
	Tunnel   bool              `json:"tunnel,omitempty"`
}

func (s NodeState) String() string {
	keys := make([]string, 0, len(s.Settings))
	for k := range s.Settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var set []string
	for _, k := range keys {
		set = append(set, k+"="+s.Settings[k])
	}
	if s.Mode == "" {
		return "not enrolled"
	}
	t := ""
	if s.Tunnel {
		t = " tunnel=taken"
	}
	return fmt.Sprintf("%s assigned=[%s] taken=[%s] settings=[%s]%s", s.Mode,
		strings.Join(s.Assigned, ","), strings.Join(s.Taken, ","), strings.Join(set, ","), t)
}

// Op is one operator command as the workload sent it: to which machine's meshd, about which
// node, when it was called and answered (monotonic, since the run began), and the answer.
type Op struct {
	ID     int        `json:"id"`
	Client int        `json:"client"` // the workload's client (goroutine) that sent it
	Via    string     `json:"via"`    // the lab machine whose meshd CLI ran it
	Node   string     `json:"node"`   // the node it is about
	Kind   Kind       `json:"kind"`   // what it does
	Module string     `json:"module,omitempty"`
	Key    string     `json:"key,omitempty"`
	Value  string     `json:"value,omitempty"`
	Args   string     `json:"args"`    // the command line, for a reader
	Call   int64      `json:"call_ns"` // nanoseconds since the run began
	Return int64      `json:"return_ns,omitempty"`
	Done   bool       `json:"done"` // false while it runs (or when the run ended first)
	Answer Answer     `json:"answer,omitempty"`
	Output string     `json:"output,omitempty"` // stderr (and stdout for a refusal), trimmed
	Read   *NodeState `json:"read,omitempty"`   // what an acknowledged read returned
}

// History records the operator's commands concurrently.
type History struct {
	mu    sync.Mutex
	start time.Time
	ops   []*Op
}

// NewHistory starts a history; times are measured from now on the monotonic clock.
func NewHistory() *History { return &History{start: time.Now()} }

// Begin records a command's call and returns it; End records its answer.
func (h *History) Begin(o Op) *Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	o.ID = len(h.ops)
	o.Call = int64(time.Since(h.start))
	p := &o
	h.ops = append(h.ops, p)
	return p
}

// End records the answer of a command Begin returned.
func (h *History) End(o *Op, a Answer, output string, read *NodeState) {
	h.mu.Lock()
	defer h.mu.Unlock()
	o.Return = int64(time.Since(h.start))
	o.Done, o.Answer, o.Output, o.Read = true, a, output, read
}

// Ops is a copy of every command so far, in call order; one still running has Done false.
func (h *History) Ops() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]Op, len(h.ops))
	for i, o := range h.ops {
		out[i] = *o
	}
	return out
}

// Since is the time since the history began, on its clock.
func (h *History) Since() time.Duration { return time.Since(h.start) }

// At is wall-clock time t on the history's clock (since it began), to the millisecond.
func (h *History) At(t time.Time) time.Duration {
	return t.Sub(h.start.Round(0)).Round(time.Millisecond)
}

// JSON is the history as a reader (or a replay of the checker) wants it.
func (h *History) JSON() ([]byte, error) { return json.MarshalIndent(h.Ops(), "", "  ") }
