package openings

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"meshd/netfilter"
)

// fakeFilter is the machine's packet filter in memory: a found firewall (its kind, whether it is
// active, or why it is not spoken), the meshd-marked rules in it, and meshd's own two tables.
type fakeFilter struct {
	mu        sync.Mutex
	found     netfilter.Found
	detectErr error
	// marked are the meshd-marked rules in the found firewall, by mark.
	marked map[string]netfilter.Opening
	// guard and filter are meshd's own tables; nil when not loaded.
	guard  *netfilter.GuardSpec
	filter *netfilter.FilterSpec
	// retires and restores count the calls; retireErr fails Retire.
	retires, restores int
	retireErr         error
	// leftover, when set, is what Detect reads once the found firewall is retired (what ufw
	// leaves behind in iptables reads as an iptables firewall).
	leftover *netfilter.Found
	// ops are the writes to the packet filter, in order.
	ops []string
	// kept is what KeepForBoot kept last; keeps counts its calls.
	kept  *netfilter.BootTables
	keeps int
	// stamp is what Stamp reads ("": none, every pass detects); detects counts Detect's calls.
	stamp   string
	detects int
	// reads counts the reads of the packet filter's rules and tables (Converge, Guard,
	// LoadFilter). live makes Watch act as a subscribed nftables monitor: it notes itself in the
	// driver's changes (kept in changes, for a test to note events) and ends with ctx.
	reads   int
	live    bool
	changes *netfilter.Changes
}

func newFakeFilter(found netfilter.Found) *fakeFilter {
	return &fakeFilter{found: found, marked: map[string]netfilter.Opening{}}
}

func (f *fakeFilter) Detect(context.Context) (netfilter.Found, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.detects++
	if f.detectErr != nil {
		return netfilter.Found{}, f.detectErr
	}
	return f.found, nil
}

func (f *fakeFilter) NewDriver(found netfilter.Found, _ netfilter.Private) (netfilter.Driver, error) {
	return &fakeFound{f: f, kind: found.Kind}, nil
}

func (f *fakeFilter) Guard(_ context.Context, spec netfilter.GuardSpec) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	if f.guard != nil && fmt.Sprint(*f.guard) == fmt.Sprint(spec) {
		return false, nil
	}
	f.guard = &spec
	f.ops = append(f.ops, "load guard")
	return true, nil
}

func (f *fakeFilter) RemoveGuard(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.guard != nil {
		f.ops = append(f.ops, "remove guard")
	}
	f.guard = nil
	return nil
}

func (f *fakeFilter) LoadFilter(_ context.Context, spec netfilter.FilterSpec) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	if f.filter != nil && fmt.Sprint(*f.filter) == fmt.Sprint(spec) {
		return false, nil
	}
	f.filter = &spec
	f.ops = append(f.ops, "load filter")
	return true, nil
}

func (f *fakeFilter) RemoveFilter(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.filter != nil {
		f.ops = append(f.ops, "remove filter")
	}
	f.filter = nil
	return nil
}

// Stamp is f.stamp: "" (no stamp: every pass detects again) unless a test sets one.
func (f *fakeFilter) Stamp(context.Context) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stamp
}

// Watch has no events to wait for: it ends with ctx (a live one noted subscribed meanwhile).
func (f *fakeFilter) Watch(ctx context.Context, _ time.Duration, changes *netfilter.Changes, _ func(context.Context, netfilter.Tick)) error {
	f.mu.Lock()
	if f.live {
		f.changes = changes
		changes.Subscribed(true)
		defer changes.Subscribed(false)
	}
	f.mu.Unlock()
	<-ctx.Done()
	return ctx.Err()
}

// markedSorted are the marks of the meshd-marked rules in the found firewall, sorted.
func (f *fakeFilter) markedSorted() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Sorted(maps.Keys(f.marked))
}

// Retire disables the fake's found firewall, as ufw disable does: inactive, its marked rules
// kept (in its files) but not in force.
func (f *fakeFilter) Retire(_ context.Context, found netfilter.Found) (netfilter.Retired, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.retires++
	if f.retireErr != nil {
		return netfilter.Retired{}, f.retireErr
	}
	f.found.Active = false
	if f.leftover != nil {
		f.found = *f.leftover
	}
	f.ops = append(f.ops, "retire "+string(found.Kind))
	return netfilter.Retired{Kind: found.Kind}, nil
}

func (f *fakeFilter) Restore(_ context.Context, r netfilter.Retired) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.restores++
	if r.Kind != netfilter.KindNone {
		f.found = netfilter.Found{Kind: r.Kind, Active: true}
	}
	f.ops = append(f.ops, "restore "+string(r.Kind))
	return nil
}

func (f *fakeFilter) Saved() (netfilter.Retired, error) {
	return netfilter.Retired{}, errors.New("nothing saved")
}

func (f *fakeFilter) KeepForBoot(t netfilter.BootTables) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.keeps++
	if f.kept != nil && fmt.Sprint(*f.kept) == fmt.Sprint(t) {
		return false, nil
	}
	f.kept = &t
	return true, nil
}

// fakeFound speaks the fake's found firewall: it makes the meshd-marked rules the declared ones.
type fakeFound struct {
	f    *fakeFilter
	kind netfilter.Kind
}

func (d *fakeFound) Kind() netfilter.Kind { return d.kind }

func (d *fakeFound) Converge(_ context.Context, desired []netfilter.Opening) (netfilter.Report, error) {
	d.f.mu.Lock()
	defer d.f.mu.Unlock()
	d.f.reads++
	rep := netfilter.Report{Kind: d.kind}
	want := map[string]bool{}
	now := time.Now().UTC()
	for _, o := range desired {
		m := o.Mark()
		want[m] = true
		if _, ok := d.f.marked[m]; !ok {
			d.f.marked[m] = o
			rep.Added++
		}
		rep.Openings = append(rep.Openings, netfilter.OpeningState{Opening: o, State: netfilter.InForce, At: now})
	}
	for m := range d.f.marked {
		if !want[m] {
			delete(d.f.marked, m)
			rep.Removed++
		}
	}
	return rep, nil
}

var _ packetFilter = (*fakeFilter)(nil)
