package netfilter

import (
	"sort"
	"sync"
	"time"
)

// Base holds what every driver remembers between calls: when each opening was put in
// force, so a later call that finds it missing reports it restored.
type Base struct {
	Mu    sync.Mutex
	Env   Env
	Priv  Private
	since map[string]time.Time
	now   func() time.Time
}

// NewBase is a driver's memory at its start: nothing in force yet.
func NewBase(env Env, priv Private) Base {
	return Base{Env: env, Priv: priv, since: map[string]time.Time{}, now: time.Now}
}

// Remember tells a driver made anew, for a firewall that changed under the last one (reloaded,
// replaced, briefly gone), which openings were in force and since when: one it then finds missing
// and puts back is reported Restored, not new.
func (b *Base) Remember(since map[string]time.Time) {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	for k, v := range since {
		if _, ok := b.since[k]; !ok {
			b.since[k] = v
		}
	}
}

// Rememberer is implemented by every driver: see Base.Remember.
type Rememberer interface {
	Remember(since map[string]time.Time)
}

// Dedupe validates desired and keys it by mark, in a stable order.
func Dedupe(desired []Opening) (map[string]Opening, []string, error) {
	m := map[string]Opening{}
	for _, o := range desired {
		if err := o.Validate(); err != nil {
			return nil, nil, err
		}
		m[o.Mark()] = o
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return m, keys, nil
}

// Settle builds the report from what the final read showed. out.Present says whether an
// opening is in force; out.MissingBefore says whether the first read of this call lacked it;
// out.Failed gives a reason for openings that could not be put in force.
func (b *Base) Settle(kind Kind, keys []string, want map[string]Opening, out Outcome) Report {
	present, missingBefore, failed := out.Present, out.MissingBefore, out.Failed
	r := Report{Kind: kind, Added: out.Added, Removed: out.Removed}
	now := b.now()
	for k := range b.since {
		if _, ok := want[k]; !ok {
			delete(b.since, k)
		}
	}
	for _, k := range keys {
		st := OpeningState{Opening: want[k]}
		switch {
		case present[k]:
			at, known := b.since[k]
			st.State = InForce
			if !known || missingBefore[k] {
				if known {
					st.State = Restored
				}
				at = now
				b.since[k] = at
			}
			st.At = at
		default:
			st.State = Failed
			st.Reason = failed[k]
			if st.Reason == "" {
				st.Reason = "not found in the firewall after applying"
			}
			delete(b.since, k)
		}
		r.Openings = append(r.Openings, st)
	}
	return r
}
