package netfilter

import "sort"

// Every driver converges the same way: read the rules meshd marked (have), decide with Plan
// what to add and what to remove, apply both in one batch (ufw, which has no batch, one
// command per rule), then re-read and report what the re-read shows. Plan and Written are the
// shared, pure parts; reading and writing stay with each driver, in its firewall's terms.

// Slotted is a marked rule, found or wanted, named by its slot: where it lives (the chain, or
// ufw's tuple) and the mark it carries. Two rules in the same slot are copies of one another.
type Slotted interface{ Slot() string }

// Plan is the one diff every driver uses. have is every meshd-marked rule read from the
// firewall, copies included; want is every rule the desired openings need. add is each wanted
// slot that have lacks (once, however often want names it); remove is each found rule whose
// slot is not wanted, and every copy past the first of one that is: meshd keeps one rule per
// slot. Both come out in slot order (copies in the order read), so the result does not depend
// on the order of the inputs. Plan only sees meshd's marked rules, so whatever it removes,
// meshd marked (invariant 4).
func Plan[H, W Slotted](have []H, want []W) (add []W, remove []H) {
	wanted := make(map[string]bool, len(want))
	for _, w := range want {
		wanted[w.Slot()] = true
	}
	kept := make(map[string]bool, len(have))
	for _, h := range have {
		s := h.Slot()
		if wanted[s] && !kept[s] {
			kept[s] = true
			continue
		}
		remove = append(remove, h)
	}
	for _, w := range want {
		s := w.Slot()
		if kept[s] {
			continue
		}
		kept[s] = true // a second mention of the same slot adds nothing more
		add = append(add, w)
	}
	sort.SliceStable(add, func(i, j int) bool { return add[i].Slot() < add[j].Slot() })
	sort.SliceStable(remove, func(i, j int) bool { return remove[i].Slot() < remove[j].Slot() })
	return add, remove
}

// HeldSlots counts the rules read in each slot.
func HeldSlots[H Slotted](rules []H) map[string]int {
	n := make(map[string]int, len(rules))
	for _, r := range rules {
		n[r.Slot()]++
	}
	return n
}

// Written compares the re-read after applying a plan with the plan: added counts the added
// rules the firewall now holds, removed the removed copies now gone (a slot that stays wanted
// keeps one copy), and unheld lists the added rules the firewall does not hold.
func Written[H, W Slotted](after []H, want []W, add []W, remove []H) (added, removed int, unheld []W) {
	held := HeldSlots(after)
	for _, w := range add {
		if held[w.Slot()] > 0 {
			added++
		} else {
			unheld = append(unheld, w)
		}
	}
	wanted := map[string]bool{}
	for _, w := range want {
		wanted[w.Slot()] = true
	}
	for s, n := range HeldSlots(remove) {
		left := held[s]
		if wanted[s] {
			left-- // the copy Plan kept
		}
		if gone := n - max(left, 0); gone > 0 {
			removed += gone
		}
	}
	return added, removed, unheld
}

// Outcome is what one pass of a driver saw and did, before Settle turns it into a Report:
// which openings are in force after it, which the first read lacked, why some failed, and how
// many marked rules it wrote.
type Outcome struct {
	Present, MissingBefore map[string]bool
	Failed                 map[string]string
	Added, Removed         int
}

// NewOutcome is an outcome with nothing seen yet.
func NewOutcome() Outcome {
	return Outcome{Present: map[string]bool{}, MissingBefore: map[string]bool{}, Failed: map[string]string{}}
}

// Merge folds another pass over the same openings (the other address family's table) into o:
// an opening is in force when both passes hold it, missing before when either lacked it, failed
// when either failed (the first reason kept); the writes add up.
func (o *Outcome) Merge(x Outcome) {
	for k, p := range x.Present {
		o.Present[k] = o.Present[k] && p
	}
	for k, m := range x.MissingBefore {
		o.MissingBefore[k] = o.MissingBefore[k] || m
	}
	for k, why := range x.Failed {
		if why != "" && o.Failed[k] == "" {
			o.Failed[k] = why
		}
	}
	o.Added += x.Added
	o.Removed += x.Removed
}
