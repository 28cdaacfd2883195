package chaos

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"

	"meshd/catalogue"
)

// The model is the record as the operator's commands see it: per node, the mode last asked for,
// the assigned and taken modules and the settings the workload sets. Porcupine searches for an
// order of the history's commands, each placed between its call and its answer, that this
// sequential model accepts. An acknowledged command the record lost leaves a later read that no
// order explains; a command applied twice (replayed after its answer) shows its effect again
// after a later command undid it, outside its own interval. Either way the history is illegal.

// modelState is the whole record's model, canonically encoded (JSON with sorted keys), so two
// states are equal exactly when their encodings are: porcupine compares and hashes it as is.
type modelState string

func encodeState(m map[string]NodeState) modelState {
	b, err := json.Marshal(m) // map keys are sorted by encoding/json
	if err != nil {
		panic(err) // a map of strings always encodes
	}
	return modelState(b)
}

func (s modelState) decode() map[string]NodeState {
	var m map[string]NodeState
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		panic(err) // only encodeState makes a modelState
	}
	return m
}

// step says what applying in to node state s gives: the next state, whether an acknowledgement
// is possible (the record would apply it) and whether a refusal is (the record would refuse it
// for what it holds). The rules are fsm's: a node not enrolled acknowledges only its join, which
// makes it adopted with the mesh's module assigned and nothing taken, and a second join of the name is refused; a spoke's
// tunnel is taken once; assigning twice, unassigning or taking what is not
// assigned, taking on a converged node or twice are refused; converging takes every assigned
// module; asking again for the mode a pending flip goes to is acknowledged, for the mode the node
// is already in refused; since the two cannot be told apart from the operator's side, both are
// allowed when the node's mode is the one asked for.
func step(s NodeState, in Op) (next NodeState, ack, refuse bool) {
	next = NodeState{Mode: s.Mode, Assigned: slices.Clone(s.Assigned), Taken: slices.Clone(s.Taken), Settings: map[string]string{}, Tunnel: s.Tunnel}
	for k, v := range s.Settings {
		next.Settings[k] = v
	}
	if s.Mode == "" { // not enrolled: only a join can be acknowledged
		if in.Kind == KindJoin {
			// An adopted join assigns the node the mesh's own module, not yet taken.
			return NodeState{Mode: "adopted", Assigned: []string{catalogue.MeshModule}, Taken: []string{}, Settings: map[string]string{}}, true, false
		}
		return s, false, false
	}
	assigned, taken := slices.Contains(s.Assigned, in.Module), slices.Contains(s.Taken, in.Module)
	switch in.Kind {
	case KindJoin:
		return s, false, true // the name is the record's already
	case KindTunnel:
		if s.Tunnel {
			return s, false, true
		}
		next.Tunnel = true
		return next, true, false
	case KindAssign:
		if assigned {
			return s, false, true
		}
		next.Assigned = sortedWith(next.Assigned, in.Module)
		if s.Mode == "converged" {
			next.Taken = sortedWith(next.Taken, in.Module)
		}
		return next, true, false
	case KindUnassign:
		if !assigned {
			return s, false, true
		}
		next.Assigned = without(next.Assigned, in.Module)
		next.Taken = without(next.Taken, in.Module)
		return next, true, false
	case KindTake:
		if !assigned || s.Mode == "converged" || taken {
			return s, false, true
		}
		next.Taken = sortedWith(next.Taken, in.Module)
		return next, true, false
	case KindSet:
		next.Settings[in.Key] = in.Value
		return next, true, false
	case KindConverge, KindAdopt:
		to := "converged"
		if in.Kind == KindAdopt {
			to = "adopted"
		}
		if s.Mode == to {
			return s, true, true
		}
		next.Mode = to
		if to == "converged" {
			next.Taken = slices.Clone(next.Assigned)
		}
		return next, true, false
	}
	return s, true, false
}

func sortedWith(xs []string, x string) []string {
	if slices.Contains(xs, x) {
		return xs
	}
	xs = append(xs, x)
	sort.Strings(xs)
	return xs
}

func without(xs []string, x string) []string {
	return slices.DeleteFunc(xs, func(y string) bool { return y == x })
}

// equalRead says whether a read returned state s: the mode, the modules, and each setting the
// workload sets (a key the model has never seen set reads as whatever the node had at the start,
// which the initial state carries).
func equalRead(s, read NodeState) bool {
	if s.Mode != read.Mode || s.Tunnel != read.Tunnel || !slices.Equal(s.Assigned, read.Assigned) || !slices.Equal(s.Taken, read.Taken) {
		return false
	}
	for k, v := range s.Settings {
		if read.Settings[k] != v {
			return false
		}
	}
	return true
}

// Model is the porcupine model of the record over histories of Op, starting from init (each
// node's state when the workload began). It is nondeterministic: a command with an unknown answer
// may or may not have been applied. It stays one body because porcupine's model is one value of
// closures (init, step, partition, descriptions) over the same start state.
func Model(init map[string]NodeState) porcupine.Model {
	for n, s := range init {
		if s.Settings == nil {
			s.Settings = map[string]string{}
		}
		s.Assigned, s.Taken = nonNil(s.Assigned), nonNil(s.Taken)
		init[n] = s
	}
	start := encodeState(init)
	nm := porcupine.NondeterministicModel{
		Init: func() []any { return []any{start} },
		Step: func(state, input, output any) []any {
			all := state.(modelState).decode()
			in, out := input.(Op), output.(Op)
			s := all[in.Node]
			if in.Kind == KindRead {
				if out.Read != nil && equalRead(s, *out.Read) {
					return []any{state}
				}
				return nil
			}
			next, ack, refuse := step(s, in)
			var states []any
			switch out.Answer {
			case Acked:
				if ack {
					all[in.Node] = next
					states = append(states, encodeState(all))
				}
			case Refused:
				if refuse {
					states = append(states, state)
				}
			case NotSent:
				states = append(states, state)
			default: // unknown: applied once, or never
				states = append(states, state)
				if ack {
					all[in.Node] = next
					states = append(states, encodeState(all))
				}
			}
			return states
		},
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			byNode := map[string][]porcupine.Operation{}
			var names []string
			for _, o := range history {
				n := o.Input.(Op).Node
				if _, ok := byNode[n]; !ok {
					names = append(names, n)
				}
				byNode[n] = append(byNode[n], o)
			}
			sort.Strings(names)
			var parts [][]porcupine.Operation
			for _, n := range names {
				parts = append(parts, byNode[n])
			}
			return parts
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(Op), output.(Op)
			if in.Kind == KindRead && out.Read != nil {
				return fmt.Sprintf("#%d read %s -> %s", in.ID, in.Node, out.Read)
			}
			return fmt.Sprintf("#%d %s -> %s", in.ID, in.Args, out.Answer)
		},
		DescribeState: func(state any) string {
			all := state.(modelState).decode()
			names := make([]string, 0, len(all))
			for n := range all {
				names = append(names, n)
			}
			sort.Strings(names)
			var s string
			for _, n := range names {
				s += n + ": " + all[n].String() + "\n"
			}
			return s
		},
	}
	return nm.ToModel()
}

func nonNil(xs []string) []string {
	if xs == nil {
		return []string{}
	}
	return xs
}

// Operations turns a history into porcupine's: only the modelled kinds; a read that was not
// acknowledged says nothing and is left out; a command with an unknown answer, or still running,
// may take effect at any time after its call, so it returns at the end of time.
func Operations(ops []Op) []porcupine.Operation {
	var out []porcupine.Operation
	for _, o := range ops {
		switch o.Kind {
		case KindAssign, KindUnassign, KindTake, KindSet, KindConverge, KindAdopt, KindRead, KindJoin, KindTunnel:
		default:
			continue
		}
		if !o.Done {
			o.Answer = Unknown
		}
		if o.Kind == KindRead && (o.Answer != Acked || o.Read == nil) {
			continue
		}
		ret := o.Return
		if o.Answer == Unknown {
			ret = math.MaxInt64
		}
		out = append(out, porcupine.Operation{ClientId: o.Client, Input: o, Call: o.Call, Output: o, Return: ret})
	}
	return out
}

// Verdict is the linearizability check of one history.
type Verdict struct {
	Result porcupine.CheckResult
	Info   porcupine.LinearizationInfo
	model  porcupine.Model
}

// Check runs porcupine over ops from init, for at most timeout (Unknown when it ran out).
func Check(init map[string]NodeState, ops []Op, timeout time.Duration) Verdict {
	m := Model(init)
	res, info := porcupine.CheckOperationsVerbose(m, Operations(ops), timeout)
	return Verdict{Result: res, Info: info, model: m}
}

// Visualize writes porcupine's HTML view of the check (the longest linearizable prefixes, and
// where each partition got stuck) to path.
func (v Verdict) Visualize(path string) error { return porcupine.VisualizePath(v.model, v.Info, path) }
