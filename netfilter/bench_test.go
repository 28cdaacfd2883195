package netfilter

import (
	"context"
	"testing"
)

// BenchmarkNoopConverge is the cost of the re-check every reconcile (and the watcher) pays
// when nothing changed: read the found nftables ruleset, compare, write nothing.
func BenchmarkNoopConverge(b *testing.B) {
	l := newLab(b)
	l.writeHostFile("nftables.conf", foundNftConf(l))
	l.sh("nft -f /etc/nftables.conf")
	f, err := Detect(context.Background(), l.env)
	if err != nil {
		b.Fatal(err)
	}
	d, _ := NewDriver(l.env, f, l.private)
	var want []Opening
	for i := 0; i < 100; i++ {
		want = append(want, Opening{Module: "m", Proto: "tcp", Port: uint16(30000 + i), From: FromAnywhere, Path: PathIncoming + ""})
	}
	mustConverge(b, d, want)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, err := d.Converge(context.Background(), want)
		if err != nil || r.Added+r.Removed != 0 {
			b.Fatalf("no-op converge wrote %d/%d: %v", r.Added, r.Removed, err)
		}
	}
}
