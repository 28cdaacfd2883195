package netfilter

import (
	"net/netip"
	"strings"
	"testing"
)

// The routed opening is every protocol between the private network's addresses, in and out of
// its interface, and nothing wider: any other shape is refused, and each kind's rule names the
// interface twice and the range twice.
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

	args, err := xtOpeningArgs(o, priv, false)
	if err != nil || !strings.HasPrefix(args, "-i meshd0 -o meshd0 -s 10.44.0.0/24 -d 10.44.0.0/24 ") || strings.Contains(args, "-p ") {
		t.Errorf("iptables rule %q (%v)", args, err)
	}
	if _, err := xtOpeningArgs(o, Private{Interface: "meshd0"}, false); err == nil {
		t.Error("a routed rule without the range is built: it would forward anything in and out of meshd0")
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
