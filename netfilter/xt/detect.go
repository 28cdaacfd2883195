package xt

import (
	"context"

	"meshd/netfilter"
)

// RulesV4 and rulesV6 are where a found plain-iptables firewall's rules are loaded from at boot
// (iptables-persistent).
const (
	RulesV4 = "/etc/iptables/rules.v4"
	rulesV6 = "/etc/iptables/rules.v6"
)

// Detect finds plain iptables: rules of its own besides Docker's, or a closed INPUT
// policy, in iptables or ip6tables (dumps and dumps6: the filter tables Read found, one a
// backend), in the first backend that has them. nil when there is none.
// IPv6 says whether that backend's ip6tables filters too (filtering): the driver then writes
// every opening's IPv6 twin there. A firewall in ip6tables alone is found too: Active says
// whether its rules are in force in either family, which is what the flip retires.
func Detect(ctx context.Context, env netfilter.Env, dumps, dumps6 []*Dump) *netfilter.Found {
	for _, b := range []string{"nft", "legacy"} {
		var d4, d6 *Dump
		for _, d := range dumps {
			if d.Backend == b {
				d4 = d
			}
		}
		for _, d := range dumps6 {
			if d.Backend == b {
				d6 = d
			}
		}
		f := netfilter.Found{Kind: netfilter.KindIptables, Backend: b}
		var filters4 bool
		if d4 != nil {
			f.DockerUser = d4.Has("DOCKER-USER")
			f.Incoming, f.Forwarded, filters4 = filtering(d4)
		}
		if d6 != nil {
			f.Incoming6, f.Forwarded6, f.IPv6 = filtering(d6)
		}
		if filters4 || f.IPv6 {
			// Retire retires both families, saving both before it touches either and going on
			// from what it saved when it was interrupted between them: a firewall whose IPv4
			// rules are retired and whose ip6tables rules are not yet is still active.
			f.Active = true
			if _, ok, _ := env.ReadFile(ctx, RulesV4); ok {
				f.Config = RulesV4
			}
			return &f
		}
	}
	return nil
}
