package netfilter

import "net/netip"

type netipPrefix = netip.Prefix

func mustParsePrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }
