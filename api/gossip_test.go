package api

import (
	"reflect"
	"testing"
)

// A delta carries what was added, changed, removed and revoked, and applying it to the view it is
// from gives the view it is to; a key no longer revoked cannot be told as one.
func TestUnitGossipViewDelta(t *testing.T) {
	p := func(name, addr string) GossipPeer { return GossipPeer{Name: name, Advertise: addr, Bus: 1, Gossip: 2} }
	old := GossipView{Index: 7, Nodes: []GossipPeer{p("a", "1"), p("b", "1"), p("c", "1")}, Revoked: []string{"k1"}}
	cur := GossipView{Index: 9, Nodes: []GossipPeer{p("a", "1"), p("b", "2"), p("bb", "1")}, Revoked: []string{"k1", "k2"}}
	d, ok := DeltaOf(old, cur)
	if !ok || !reflect.DeepEqual(d.Nodes, []GossipPeer{p("b", "2"), p("bb", "1")}) || !reflect.DeepEqual(d.Removed, []string{"c"}) ||
		!reflect.DeepEqual(d.Revoked, []string{"k2"}) || d.Since != 7 || d.Index != 9 {
		t.Fatalf("delta: %+v", d)
	}
	got, ok := old.ApplyDelta(d)
	if !ok || !reflect.DeepEqual(got.Nodes, cur.Nodes) || !reflect.DeepEqual(got.Revoked, cur.Revoked) || got.Index != 9 {
		t.Fatalf("applied: %+v; want %+v", got, cur)
	}
	if _, ok := (GossipView{Index: 8}).ApplyDelta(d); ok {
		t.Fatal("a delta from view 7 applied to view 8")
	}
	if _, ok := DeltaOf(cur, old); ok {
		t.Fatal("a key no longer revoked was told as a delta")
	}
}
