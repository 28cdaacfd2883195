package openings

import (
	"context"
	"fmt"
	"time"

	"meshd/netfilter"
	"meshd/netfilter/firewall"
)

// packetFilter is what the opening driver needs of the machine's packet filter, in the driver's
// terms: kernelFilter is the real one (netfilter/ on the machine); the unit tests put an in-memory
// fake in its place.
type packetFilter interface {
	// Detect reads the found firewall; an error matching netfilter.ErrUnsupported names one
	// meshd does not speak.
	Detect(ctx context.Context) (netfilter.Found, error)
	// Stamp is a cheap read of what Detect depends on (firewall.Stamp): equal stamps, the
	// same answer; "" when no stamp stands for the firewall (Detect must read it again).
	Stamp(ctx context.Context) string
	// NewDriver speaks the found firewall: its Converge makes its meshd-marked rules the
	// declared openings.
	NewDriver(found netfilter.Found, priv netfilter.Private) (netfilter.Driver, error)
	// Guard loads the refuse-only guard; wrote says whether it had to be written.
	Guard(ctx context.Context, spec netfilter.GuardSpec) (wrote bool, err error)
	RemoveGuard(ctx context.Context) error
	// LoadFilter loads the derived filter; wrote says whether it had to be written.
	LoadFilter(ctx context.Context, spec netfilter.FilterSpec) (wrote bool, err error)
	RemoveFilter(ctx context.Context) error
	// Watch calls recheck on every change of the packet filter and every interval until ctx
	// ends, saying which (netfilter.Tick), and counts the changes its monitor reported in
	// changes.
	Watch(ctx context.Context, interval time.Duration, changes *netfilter.Changes, recheck func(context.Context, netfilter.Tick)) error
	// Retire disables the found firewall, never flushing it; Restore gives a retired one back;
	// Saved is what Retire saved before it removed anything (a found nftables ruleset's dumps).
	Retire(ctx context.Context, found netfilter.Found) (netfilter.Retired, error)
	Restore(ctx context.Context, r netfilter.Retired) error
	Saved() (netfilter.Retired, error)
	// KeepForBoot keeps the table just loaded where `meshd boot` finds it at the next boot;
	// wrote says whether it had to be written.
	KeepForBoot(t netfilter.BootTables) (wrote bool, err error)
}

// kernelFilter is the machine's packet filter through netfilter/, in env.
type kernelFilter struct{ env netfilter.Env }

func (k kernelFilter) Detect(ctx context.Context) (netfilter.Found, error) {
	return firewall.Detect(ctx, k.env)
}

func (k kernelFilter) Stamp(ctx context.Context) string { return firewall.Stamp(ctx, k.env) }

func (k kernelFilter) NewDriver(found netfilter.Found, priv netfilter.Private) (netfilter.Driver, error) {
	return firewall.NewDriver(k.env, found, priv)
}

func (k kernelFilter) Guard(ctx context.Context, spec netfilter.GuardSpec) (bool, error) {
	return netfilter.Guard(ctx, k.env, spec)
}

func (k kernelFilter) RemoveGuard(ctx context.Context) error {
	return netfilter.RemoveGuard(ctx, k.env)
}

func (k kernelFilter) LoadFilter(ctx context.Context, spec netfilter.FilterSpec) (bool, error) {
	return netfilter.LoadFilter(ctx, k.env, spec)
}

func (k kernelFilter) RemoveFilter(ctx context.Context) error {
	return netfilter.RemoveFilter(ctx, k.env)
}

func (k kernelFilter) KeepForBoot(t netfilter.BootTables) (bool, error) {
	return netfilter.KeepForBoot(k.env, t)
}

func (k kernelFilter) Retire(ctx context.Context, found netfilter.Found) (netfilter.Retired, error) {
	return firewall.Retire(ctx, k.env, found)
}

func (k kernelFilter) Restore(ctx context.Context, r netfilter.Retired) error {
	return firewall.Restore(ctx, k.env, r)
}

func (k kernelFilter) Saved() (netfilter.Retired, error) {
	if k.env.StateDir == "" {
		return netfilter.Retired{}, fmt.Errorf("no state directory: nothing was saved")
	}
	return netfilter.LoadRetired(k.env.StateDir)
}

func (k kernelFilter) Watch(ctx context.Context, interval time.Duration, changes *netfilter.Changes, recheck func(context.Context, netfilter.Tick)) error {
	return netfilter.WatchChanges(ctx, k.env, interval, changes, recheck)
}
