package firewall

import (
	"context"
	"fmt"

	"meshd/netfilter"
	"meshd/netfilter/nft"
	"meshd/netfilter/ufw"
	"meshd/netfilter/xt"
)

// NewDriver returns the driver for the found firewall. priv is the private network, needed
// for openings from "private". A found kind meshd does not speak is an error.
func NewDriver(env netfilter.Env, found netfilter.Found, priv netfilter.Private) (netfilter.Driver, error) {
	switch found.Kind {
	case netfilter.KindNftables:
		return nft.New(env, priv, found), nil
	case netfilter.KindIptables:
		return xt.New(env, priv, found.Backend), nil
	case netfilter.KindUFW:
		return ufw.New(env, priv, found), nil
	case netfilter.KindNone:
		return &noneDriver{Base: netfilter.NewBase(env, priv)}, nil
	}
	return nil, fmt.Errorf("found firewall %q: %w", found.Kind, netfilter.ErrUnsupported)
}

// noneDriver: nothing filters, so every opening is in force as it is.
type noneDriver struct{ netfilter.Base }

func (d *noneDriver) Kind() netfilter.Kind { return netfilter.KindNone }

func (d *noneDriver) Converge(ctx context.Context, desired []netfilter.Opening) (netfilter.Report, error) {
	d.Mu.Lock()
	defer d.Mu.Unlock()
	want, keys, err := netfilter.Dedupe(desired)
	if err != nil {
		return netfilter.Report{}, err
	}
	out := netfilter.NewOutcome()
	for _, k := range keys {
		out.Present[k] = true
	}
	return d.Settle(netfilter.KindNone, keys, want, out), nil
}
