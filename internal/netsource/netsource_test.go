package netsource

import (
	"net/netip"
	"testing"
)

func TestOfCountsAnIPv6SlashSixtyFourAsOne(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.7":        "192.0.2.7/32",
		"2001:db8::1":      "2001:db8::/64",
		"2001:db8::ffff":   "2001:db8::/64",
		"2001:db8:0:1::1":  "2001:db8:0:1::/64",
		"::ffff:192.0.2.7": "192.0.2.7/32",
	} {
		if got := Of(netip.MustParseAddr(in)); got.String() != want {
			t.Errorf("Of(%s) = %s, want %s", in, got, want)
		}
	}
	if Of(netip.Addr{}).IsValid() {
		t.Error("the zero address has a source")
	}
}
