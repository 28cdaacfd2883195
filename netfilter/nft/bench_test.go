package nft_test

import (
	"context"
	"testing"

	"meshd/netfilter"
	"meshd/netfilter/firewall"
	"meshd/netfilter/internal/nflab"
)

// BenchmarkNoopConverge is the cost of the re-check every reconcile (and the watcher) pays
// when nothing changed: read the found nftables ruleset, compare, write nothing.
func BenchmarkNoopConverge(b *testing.B) {
	l := nflab.New(b)
	l.WriteHostFile("nftables.conf", nflab.FoundNftConf(l))
	l.Sh("nft -f /etc/nftables.conf")
	f, err := firewall.Detect(context.Background(), l.Env)
	if err != nil {
		b.Fatal(err)
	}
	d, _ := firewall.NewDriver(l.Env, f, l.Private)
	var want []netfilter.Opening
	for i := 0; i < 100; i++ {
		want = append(want, netfilter.Opening{Module: "m", Proto: "tcp", Port: uint16(30000 + i), From: netfilter.FromAnywhere, Path: netfilter.PathIncoming + ""})
	}
	nflab.MustConverge(b, d, want)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, err := d.Converge(context.Background(), want)
		if err != nil || r.Added+r.Removed != 0 {
			b.Fatalf("no-op converge wrote %d/%d: %v", r.Added, r.Removed, err)
		}
	}
}
