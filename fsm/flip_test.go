package fsm

import (
	"slices"
	"testing"
	"time"
)

// The flip is recorded as an intent first: the node stays adopted in the record while its
// declaration asks for converged with every module taken; only the done command, naming that
// intent, records it converged. The return keeps every module taken. A done for another intent,
// or a flip to the mode the node is in, is refused and changes nothing.
func TestUnitFlipIntentThenDone(t *testing.T) {
	r := NewRecord()
	mustApply(t, r, genesisCmd(t, Adopted))
	mustApply(t, r, cmd(t, OpModuleAssign, t0.Add(time.Minute), ModuleOnNode{Node: "hub", Module: "webapp"}))
	mustApply(t, r, cmd(t, OpModuleTake, t0.Add(2*time.Minute), ModuleOnNode{Node: "hub", Module: "store"}))
	if _, err := Apply(r, cmd(t, OpFlip, t0.Add(3*time.Minute), Flip{Node: "hub", To: Adopted})); err == nil {
		t.Fatal("a flip to adopted on an adopted node was not refused")
	}
	at := t0.Add(4 * time.Minute)
	mustApply(t, r, cmd(t, OpFlip, at, Flip{Node: "hub", To: Converged, Plan: "abc"}))
	n := r.Nodes["hub"]
	if n.Mode != Adopted || n.Flip == nil || n.Flip.To != Converged || n.Flip.Plan != "abc" {
		t.Fatalf("after the intent: mode %s, flip %+v", n.Mode, n.Flip)
	}
	d, err := Compose(r, "hub")
	if err != nil {
		t.Fatal(err)
	}
	if d.Mode != Converged || d.Flip == nil || !slices.Equal(d.Taken, d.Assigned) {
		t.Fatalf("the declaration of a pending flip: mode %s, flip %+v, taken %v of %v", d.Mode, d.Flip, d.Taken, d.Assigned)
	}
	for _, res := range d.Resources {
		if !res.Taken {
			t.Errorf("resource %s not taken in the flip's declaration", res.ID())
		}
	}
	// Asked again: the intent stands, unchanged.
	mustApply(t, r, cmd(t, OpFlip, at.Add(time.Second), Flip{Node: "hub", To: Converged}))
	if !r.Nodes["hub"].Flip.Since.Equal(at) {
		t.Fatalf("a repeated flip replaced the intent: %+v", r.Nodes["hub"].Flip)
	}
	before := marshal(t, r)
	if _, err := Apply(r, cmd(t, OpFlipDone, at.Add(time.Minute), FlipDone{Node: "hub", To: Converged, Since: at.Add(-time.Second)})); err == nil {
		t.Fatal("a done naming another intent was not refused")
	}
	if string(marshal(t, r)) != string(before) {
		t.Fatal("a refused done changed the record")
	}
	mustApply(t, r, cmd(t, OpFlipDone, at.Add(time.Minute), FlipDone{Node: "hub", To: Converged, Since: at}))
	n = r.Nodes["hub"]
	if n.Mode != Converged || n.Flip != nil || !n.ModeSince.Equal(at.Add(time.Minute)) {
		t.Fatalf("after done: mode %s since %s, flip %+v", n.Mode, n.ModeSince, n.Flip)
	}
	taken := append([]string{}, n.Assigned...)

	// The return: intent, then done; nothing taken is un-taken.
	back := at.Add(time.Hour)
	mustApply(t, r, cmd(t, OpFlip, back, Flip{Node: "hub", To: Adopted}))
	if d, _ := Compose(r, "hub"); d.Mode != Adopted || r.Nodes["hub"].Mode != Converged {
		t.Fatalf("return intent: declaration %s, record %s", d.Mode, r.Nodes["hub"].Mode)
	}
	mustApply(t, r, cmd(t, OpFlipDone, back.Add(time.Minute), FlipDone{Node: "hub", To: Adopted, Since: back}))
	n = r.Nodes["hub"]
	if n.Mode != Adopted || n.Flip != nil || !slices.Equal(n.Taken, taken) {
		t.Fatalf("returned: mode %s, flip %+v, taken %v (was %v)", n.Mode, n.Flip, n.Taken, taken)
	}
	if d, _ := Compose(r, "hub"); !slices.Equal(d.Taken, taken) {
		t.Fatalf("returned declaration takes %v, want %v", d.Taken, taken)
	}
}

// A converge intent stepped back before it was done: the return's intent replaces it, the
// record's mode never moved, and the node's declaration asks for adopted again.
func TestUnitFlipSteppedBackBeforeDone(t *testing.T) {
	r := NewRecord()
	mustApply(t, r, genesisCmd(t, Adopted))
	mustApply(t, r, cmd(t, OpFlip, t0.Add(time.Minute), Flip{Node: "hub", To: Converged}))
	mustApply(t, r, cmd(t, OpFlip, t0.Add(2*time.Minute), Flip{Node: "hub", To: Adopted}))
	n := r.Nodes["hub"]
	if n.Mode != Adopted || n.Flip == nil || n.Flip.To != Adopted {
		t.Fatalf("mode %s, flip %+v", n.Mode, n.Flip)
	}
	mustApply(t, r, cmd(t, OpFlipDone, t0.Add(3*time.Minute), FlipDone{Node: "hub", To: Adopted, Since: t0.Add(2 * time.Minute)}))
	if n := r.Nodes["hub"]; n.Mode != Adopted || n.Flip != nil {
		t.Fatalf("mode %s, flip %+v", n.Mode, n.Flip)
	}
}
