package xt

import (
	"net/netip"
	"strings"
	"testing"

	"meshd/netfilter"
)

// The routed opening's iptables rule names the private network's interface twice and its range
// twice, and every protocol; without the range there is no rule (netfilter's TestUnitRoutedOpening
// holds the opening's shape and the derived filter's rule).
func TestUnitRoutedOpening(t *testing.T) {
	priv := netfilter.Private{Interface: "meshd0", Range: netip.MustParsePrefix("10.44.0.0/24")}
	o := netfilter.RoutedOpening("mesh")
	args, err := openingArgs(o, priv, false)
	if err != nil || !strings.HasPrefix(args, "-i meshd0 -o meshd0 -s 10.44.0.0/24 -d 10.44.0.0/24 ") || strings.Contains(args, "-p ") {
		t.Errorf("iptables rule %q (%v)", args, err)
	}
	if _, err := openingArgs(o, netfilter.Private{Interface: "meshd0"}, false); err == nil {
		t.Error("a routed rule without the range is built: it would forward anything in and out of meshd0")
	}
}
