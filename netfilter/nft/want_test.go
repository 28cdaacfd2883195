package nft

import (
	"slices"
	"testing"

	"github.com/google/nftables"
	"meshd/netfilter"
)

// A chain of a family an opening's source cannot be matched in needs no rule, so it is never
// planned as missing (and the opening never reported restored for it).
func TestPlanNftWant(t *testing.T) {
	ip := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: "f4"}
	inet := &nftables.Table{Family: nftables.TableFamilyINet, Name: "f"}
	v := &View{input: []*nftables.Chain{{Table: ip, Name: "input"}, {Table: inet, Name: "input"}}}
	v6 := netfilter.Opening{Module: "v6", Proto: "tcp", Port: 7002, From: "2001:db8::/32", Path: netfilter.PathIncoming}
	web := netfilter.Opening{Module: "web", Proto: "tcp", Port: 7000, From: netfilter.FromAnywhere, Path: netfilter.PathIncoming}
	app := netfilter.Opening{Module: "app", Proto: "tcp", Port: 8080, From: netfilter.FromAnywhere, Path: netfilter.PathForwarded}
	store := netfilter.Opening{Module: "store", Proto: "tcp", Port: 7001, From: netfilter.FromPrivate, Path: netfilter.PathIncoming}
	want, keys, _ := netfilter.Dedupe([]netfilter.Opening{v6, web, app, store})
	got, unfiltered := wantedRules(v, want, keys, netfilter.Private{})
	var slots []string
	for _, w := range got {
		s := w.Slot()
		if w.err != nil {
			s += " (error)"
		}
		slots = append(slots, s)
	}
	wantSlots := []string{
		"ip/f4/input/" + store.Mark() + " (error)", "inet/f/input/" + store.Mark() + " (error)",
		"inet/f/input/" + v6.Mark(),
		"ip/f4/input/" + web.Mark(), "inet/f/input/" + web.Mark(),
	}
	if !slices.Equal(slots, wantSlots) {
		t.Fatalf("wanted slots\n%q\nwant\n%q", slots, wantSlots)
	}
	if !unfiltered[app.Mark()] || len(unfiltered) != 1 {
		t.Fatalf("unfiltered %v, want only app's", unfiltered)
	}
}
