package netfilter

import (
	"net/netip"
	"strings"
	"testing"
)

// The routed opening is every protocol between the private network's addresses, in and out of
// its interface, and nothing wider: any other shape is refused, and the derived filter's rule
// names the interface twice and the range twice (the iptables rule's test is in xt).
func TestUnitRoutedOpening(t *testing.T) {
	priv := Private{Interface: "meshd0", Range: netip.MustParsePrefix("10.44.0.0/24")}
	o := RoutedOpening("mesh")
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if back, ok := ParseMark(o.Mark()); !ok || back != o {
		t.Fatalf("mark %q reads back as %+v (%v)", o.Mark(), back, ok)
	}
	for _, bad := range []Opening{
		{Module: "mesh", Proto: ProtoAll, From: FromAnywhere, Path: PathRouted},
		{Module: "mesh", Proto: ProtoAll, From: "10.0.0.0/8", Path: PathRouted},
		{Module: "mesh", Proto: "tcp", Port: 80, From: FromPrivate, Path: PathRouted},
		{Module: "mesh", Proto: ProtoAll, From: FromPrivate, Path: PathForwarded},
	} {
		if bad.Validate() == nil {
			t.Errorf("%+v validates", bad)
		}
	}

	text, err := FilterText(FilterSpec{Private: priv, Openings: []Opening{o}})
	if err != nil {
		t.Fatal(err)
	}
	want := `iifname "meshd0" oifname "meshd0" ip saddr 10.44.0.0/24 ip daddr 10.44.0.0/24 accept comment "` + o.Mark() + `"`
	if strings.Count(text, want) != 1 || strings.Contains(text, o.Mark()+":proxy") {
		t.Errorf("the derived filter does not forward the range once, in the forward chain alone:\n%s", text)
	}
	if !strings.Contains(text[strings.Index(text, "chain forward"):], want) {
		t.Errorf("the routed rule is not in the forward chain:\n%s", text)
	}
}
