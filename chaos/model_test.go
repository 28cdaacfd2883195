package chaos

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// h builds a history by hand: each op with its call and return.
type h []Op

func op(kind Kind, node, module string, call, ret int64, a Answer) Op {
	return Op{Kind: kind, Node: node, Module: module, Call: call, Return: ret, Done: true, Answer: a, Args: string(kind) + " " + node + " " + module}
}

func read(node string, call, ret int64, st NodeState) Op {
	o := Op{Kind: KindRead, Node: node, Call: call, Return: ret, Done: true, Answer: Acked, Args: "read " + node}
	o.Read = &st
	return o
}

func number(ops h) []Op {
	for i := range ops {
		ops[i].ID = i
	}
	return ops
}

func adoptedWith(assigned, taken []string) NodeState {
	return NodeState{Mode: "adopted", Assigned: nonNil(assigned), Taken: nonNil(taken)}
}

func start() map[string]NodeState {
	return map[string]NodeState{"n1": adoptedWith(nil, nil), "n2": adoptedWith(nil, nil)}
}

func check(t *testing.T, ops h) porcupine.CheckResult {
	t.Helper()
	v := Check(start(), number(ops), 10*time.Second)
	if v.Result == porcupine.Illegal {
		// The view is what a reader of a failed run opens: it must be writable.
		if err := v.Visualize(filepath.Join(t.TempDir(), "history.html")); err != nil {
			t.Fatalf("visualize: %v", err)
		}
	}
	return v.Result
}

func TestCheckerAcceptsLinearizableHistories(t *testing.T) {
	cases := map[string]h{
		"sequential assign, take, unassign": {
			op(KindAssign, "n1", "a", 0, 10, Acked),
			read("n1", 11, 12, adoptedWith([]string{"a"}, nil)),
			op(KindTake, "n1", "a", 13, 20, Acked),
			read("n1", 21, 22, adoptedWith([]string{"a"}, []string{"a"})),
			op(KindUnassign, "n1", "a", 23, 30, Acked),
			read("n1", 31, 32, adoptedWith(nil, nil)),
		},
		"a read concurrent with an assign sees either side": {
			op(KindAssign, "n1", "a", 0, 10, Acked),
			read("n1", 1, 2, adoptedWith(nil, nil)),
			read("n1", 3, 4, adoptedWith([]string{"a"}, nil)),
		},
		"two concurrent assigns of one module: one applies, one is refused": {
			op(KindAssign, "n1", "a", 0, 10, Acked),
			op(KindAssign, "n1", "a", 1, 9, Refused),
			read("n1", 11, 12, adoptedWith([]string{"a"}, nil)),
		},
		"an unknown answer applied late": {
			op(KindAssign, "n1", "a", 0, 10, Unknown),
			read("n1", 11, 12, adoptedWith(nil, nil)),
			read("n1", 13, 14, adoptedWith([]string{"a"}, nil)),
		},
		"an unknown answer never applied": {
			op(KindAssign, "n1", "a", 0, 10, Unknown),
			read("n1", 11, 12, adoptedWith(nil, nil)),
		},
		"converging takes every assigned module": {
			op(KindAssign, "n2", "a", 0, 1, Acked),
			op(KindConverge, "n2", "", 2, 3, Acked),
			read("n2", 4, 5, NodeState{Mode: "converged", Assigned: []string{"a"}, Taken: []string{"a"}}),
			op(KindTake, "n2", "a", 6, 7, Refused),
			op(KindAdopt, "n2", "", 8, 9, Acked),
			read("n2", 10, 11, adoptedWith([]string{"a"}, []string{"a"})),
		},
		"a node enrols, its tunnel is taken once, a second take refused": {
			op(KindAssign, "p", "a", 0, 1, Unknown), // before it enrolled: never applied
			op(KindJoin, "p", "", 2, 3, Acked),
			read("p", 4, 5, adoptedWith([]string{"mesh"}, nil)),
			op(KindTunnel, "p", "", 6, 7, Acked),
			op(KindTunnel, "p", "", 8, 9, Refused),
			read("p", 10, 11, NodeState{Mode: "adopted", Assigned: []string{"mesh"}, Taken: []string{}, Tunnel: true}),
		},
		"a join whose answer was lost, then refused": {
			op(KindJoin, "p", "", 0, 1, Unknown),
			op(KindJoin, "p", "", 2, 3, Refused),
			read("p", 4, 5, adoptedWith([]string{"mesh"}, nil)),
		},
		"a setting reads back": {
			{Kind: KindSet, Node: "n1", Key: "m.greeting", Value: "v2", Call: 0, Return: 1, Done: true, Answer: Acked},
			read("n1", 2, 3, NodeState{Mode: "adopted", Assigned: []string{}, Taken: []string{}, Settings: map[string]string{"m.greeting": "v2"}}),
		},
	}
	for name, ops := range cases {
		t.Run(name, func(t *testing.T) {
			if r := check(t, ops); r != porcupine.Ok {
				t.Fatalf("a linearizable history was judged %s", r)
			}
		})
	}
}

// The histories a broken record would leave: the checker must call every one illegal.
func TestCheckerRejectsLostAndDoubledCommands(t *testing.T) {
	cases := map[string]h{
		// The assign was acknowledged, and a later read does not have it.
		"a lost acknowledgement": {
			op(KindAssign, "n1", "a", 0, 10, Acked),
			read("n1", 11, 12, adoptedWith(nil, nil)),
		},
		// The assign applied again after the unassign that followed it (a retried proposal).
		"a double apply": {
			op(KindAssign, "n1", "a", 0, 10, Acked),
			op(KindUnassign, "n1", "a", 11, 20, Acked),
			read("n1", 21, 22, adoptedWith([]string{"a"}, nil)),
		},
		// Applied twice at once: the second apply would have been refused, never acknowledged.
		"one module assigned twice, both acknowledged": {
			op(KindAssign, "n1", "a", 0, 10, Acked),
			op(KindAssign, "n1", "a", 11, 20, Acked),
		},
		// A refusal the record cannot have given: nothing was assigned to take.
		"a take acknowledged on a module never assigned": {
			op(KindTake, "n1", "a", 0, 10, Acked),
		},
		// The effect of a command seen before it was sent.
		"an effect before its call": {
			read("n1", 0, 1, adoptedWith([]string{"a"}, nil)),
			op(KindAssign, "n1", "a", 2, 10, Acked),
		},
		// A converge acknowledged and then read as adopted, with nothing returning it.
		"a mode that went back by itself": {
			op(KindConverge, "n2", "", 0, 1, Acked),
			read("n2", 2, 3, NodeState{Mode: "adopted", Assigned: []string{}, Taken: []string{}}),
		},
		// A setting acknowledged, then overwritten by an older one replayed.
		"an older setting replayed": {
			{Kind: KindSet, Node: "n1", Key: "m.greeting", Value: "v1", Call: 0, Return: 1, Done: true, Answer: Acked},
			{Kind: KindSet, Node: "n1", Key: "m.greeting", Value: "v2", Call: 2, Return: 3, Done: true, Answer: Acked},
			read("n1", 4, 5, NodeState{Mode: "adopted", Assigned: []string{}, Taken: []string{}, Settings: map[string]string{"m.greeting": "v1"}}),
		},
		// A spoke's tunnel taken, acknowledged, and read as not taken.
		"a lost tunnel take": {
			op(KindJoin, "p", "", 0, 1, Acked),
			op(KindTunnel, "p", "", 2, 3, Acked),
			read("p", 4, 5, adoptedWith([]string{"mesh"}, nil)),
		},
		// A node read as enrolled before any join could have been applied.
		"a node enrolled before its join": {
			read("p", 0, 1, adoptedWith([]string{"mesh"}, nil)),
			op(KindJoin, "p", "", 2, 3, Acked),
		},
		// A tunnel take acknowledged twice: the record takes a spoke's tunnel once.
		"a tunnel taken twice": {
			op(KindJoin, "p", "", 0, 1, Acked),
			op(KindTunnel, "p", "", 2, 3, Acked),
			op(KindTunnel, "p", "", 4, 5, Acked),
		},
		// The lost assign on n2 must not hide behind n1's history (partitions are per node).
		"a lost acknowledgement on one node among others": {
			op(KindAssign, "n1", "a", 0, 10, Acked),
			op(KindAssign, "n2", "b", 0, 10, Acked),
			read("n1", 11, 12, adoptedWith([]string{"a"}, nil)),
			read("n2", 11, 12, adoptedWith(nil, nil)),
		},
	}
	for name, ops := range cases {
		t.Run(name, func(t *testing.T) {
			if r := check(t, ops); r != porcupine.Illegal {
				t.Fatalf("a history with %s was judged %s, want %s", name, r, porcupine.Illegal)
			}
		})
	}
}

// A command still running when the history was taken may have been applied: a read after its
// call that sees it is legal, and the checker is not fooled into calling it lost either.
func TestCheckerTreatsRunningCommandsAsUnknown(t *testing.T) {
	ops := number(h{
		{Kind: KindAssign, Node: "n1", Module: "a", Call: 0, Args: "assign n1 a"},
		read("n1", 5, 6, adoptedWith([]string{"a"}, nil)),
	})
	if r := Check(start(), ops, 10*time.Second).Result; r != porcupine.Ok {
		t.Fatalf("a read seeing a running assign was judged %s", r)
	}
}

func TestHistoryRecordsCallAndAnswer(t *testing.T) {
	hist := NewHistory()
	o := hist.Begin(Op{Kind: KindAssign, Node: "n1", Module: "a"})
	st := adoptedWith([]string{"a"}, nil)
	hist.End(o, Acked, "", &st)
	ops := hist.Ops()
	if len(ops) != 1 || !ops[0].Done || ops[0].Return < ops[0].Call || ops[0].Answer != Acked {
		t.Fatalf("recorded %+v", ops)
	}
	b, err := hist.JSON()
	if err != nil || len(b) == 0 {
		t.Fatalf("history JSON: %v", err)
	}
	_ = os.WriteFile(filepath.Join(t.TempDir(), "h.json"), b, 0o644)
}
