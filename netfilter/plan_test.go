package netfilter

import (
	"reflect"
	"slices"
	"testing"
)

// These tests need no root: plan and the deciding halves of the drivers are pure, and the
// iptables driver is driven through a fake iptables that keeps its filter table in memory.

// rule is a marked rule in a slot; id tells copies apart.
type rule struct {
	s  string
	id int
}

func (r rule) Slot() string { return r.s }

func rules(spec ...string) []rule {
	out := make([]rule, len(spec))
	for i, s := range spec {
		out[i] = rule{s: s, id: i}
	}
	return out
}

func slotsOf(rs []rule) []string {
	out := []string{}
	for _, r := range rs {
		out = append(out, r.s)
	}
	return out
}

func TestPlan(t *testing.T) {
	cases := []struct {
		name               string
		have, want         []rule
		wantAdd, wantRemov []string
		keptIDs            []int // ids of have that stay (not removed)
	}{
		{name: "empty have and want", wantAdd: []string{}, wantRemov: []string{}},
		{name: "empty have", want: rules("b", "a"), wantAdd: []string{"a", "b"}, wantRemov: []string{}},
		{name: "empty want removes every marked rule", have: rules("a", "b"), wantAdd: []string{}, wantRemov: []string{"a", "b"}},
		{name: "nothing to do", have: rules("a", "b", "c"), want: rules("c", "a", "b"), wantAdd: []string{}, wantRemov: []string{}, keptIDs: []int{0, 1, 2}},
		{name: "add and remove", have: rules("a", "b"), want: rules("b", "c"), wantAdd: []string{"c"}, wantRemov: []string{"a"}, keptIDs: []int{1}},
		{name: "every extra copy of a wanted rule goes", have: rules("a", "a", "b", "a"), want: rules("a", "b"),
			wantAdd: []string{}, wantRemov: []string{"a", "a"}, keptIDs: []int{0, 2}},
		{name: "every copy of an unwanted rule goes", have: rules("x", "a", "x", "x"), want: rules("a"),
			wantAdd: []string{}, wantRemov: []string{"x", "x", "x"}, keptIDs: []int{1}},
		{name: "a slot wanted twice is added once", want: rules("a", "a", "b"), wantAdd: []string{"a", "b"}, wantRemov: []string{}},
		{name: "a slot wanted twice and held is left", have: rules("a"), want: rules("a", "a"), wantAdd: []string{}, wantRemov: []string{}, keptIDs: []int{0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			add, remove := Plan(c.have, c.want)
			if got := slotsOf(add); !reflect.DeepEqual(got, c.wantAdd) {
				t.Errorf("add %q, want %q", got, c.wantAdd)
			}
			if got := slotsOf(remove); !reflect.DeepEqual(got, c.wantRemov) {
				t.Errorf("remove %q, want %q", got, c.wantRemov)
			}
			removed := map[int]bool{}
			for _, r := range remove {
				removed[r.id] = true
			}
			var kept []int
			for _, r := range c.have {
				if !removed[r.id] {
					kept = append(kept, r.id)
				}
			}
			if !slices.Equal(kept, c.keptIDs) {
				t.Errorf("kept copies %v, want %v", kept, c.keptIDs)
			}
			// Applying the plan leaves exactly one rule per wanted slot.
			after := HeldSlots(c.have)
			for _, r := range remove {
				after[r.s]--
			}
			for _, w := range add {
				after[w.s]++
			}
			for s := range HeldSlots(c.want) {
				if after[s] != 1 {
					t.Errorf("after applying, slot %s holds %d rules, want 1", s, after[s])
				}
				delete(after, s)
			}
			for s, n := range after {
				if n != 0 {
					t.Errorf("after applying, unwanted slot %s holds %d rules", s, n)
				}
			}
		})
	}
}

func TestPlanOrderIndependent(t *testing.T) {
	have := rules("a", "x", "b", "a", "y", "a", "x")
	want := rules("c", "a", "d", "b", "c")
	add0, rem0 := Plan(have, want)
	// every rotation and the reversal of both inputs
	for i := range have {
		for j := range want {
			for _, rev := range []bool{false, true} {
				h := append(slices.Clone(have[i:]), have[:i]...)
				w := append(slices.Clone(want[j:]), want[:j]...)
				if rev {
					slices.Reverse(h)
					slices.Reverse(w)
				}
				add, rem := Plan(h, w)
				if !reflect.DeepEqual(slotsOf(add), slotsOf(add0)) || !reflect.DeepEqual(slotsOf(rem), slotsOf(rem0)) {
					t.Fatalf("have %v want %v: add %q remove %q; in the first order add %q remove %q",
						slotsOf(h), slotsOf(w), slotsOf(add), slotsOf(rem), slotsOf(add0), slotsOf(rem0))
				}
			}
		}
	}
}

func TestPlanWritten(t *testing.T) {
	have := rules("a", "a", "a", "x", "x")
	want := rules("a", "b", "c")
	add, remove := Plan(have, want) // add b, c; remove a, a, x, x
	cases := []struct {
		name                   string
		after                  []rule
		wantAdded, wantRemoved int
		wantUnheld             []string
	}{
		{"all landed", rules("a", "b", "c"), 2, 4, nil},
		{"nothing landed", have, 0, 0, []string{"b", "c"}},
		{"partly", rules("a", "a", "x", "b"), 1, 2, []string{"c"}},
		{"the kept copy went too", rules("b", "c"), 2, 4, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			added, removed, unheld := Written(c.after, want, add, remove)
			if added != c.wantAdded || removed != c.wantRemoved {
				t.Errorf("written: %d added, %d removed; want %d, %d", added, removed, c.wantAdded, c.wantRemoved)
			}
			if got := slotsOf(unheld); len(got)+len(c.wantUnheld) > 0 && !reflect.DeepEqual(got, c.wantUnheld) {
				t.Errorf("unheld %q, want %q", got, c.wantUnheld)
			}
		})
	}
}
