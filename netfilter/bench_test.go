package netfilter

import (
	"context"
	"strconv"
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

// BenchmarkUFWApply is N openings put in force through a found ufw, and taken away again:
// in meshd's one batch, against one `ufw allow` per rule (what an operator, or meshd without
// sight of ufw's files, does).
func BenchmarkUFWApply(b *testing.B) {
	l := newUFWLab(b)
	f, err := Detect(context.Background(), l.env)
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{10, 100} {
		var want []Opening
		for i := 0; i < n; i++ {
			want = append(want, Opening{Module: "m", Proto: "tcp", Port: uint16(30000 + i), From: FromAnywhere, Path: PathIncoming})
		}
		for _, way := range []struct {
			name string
			env  Env
		}{{"batch", l.env}, {"ufw-allow-per-rule", Env{NetNS: l.env.NetNS, Runner: l.env.Runner}}} {
			b.Run(way.name+"/"+strconv.Itoa(n), func(b *testing.B) {
				d, _ := NewDriver(way.env, f, l.private)
				for i := 0; i < b.N; i++ {
					mustConverge(b, d, want)
					b.StopTimer()
					mustConverge(b, d, nil)
					b.StartTimer()
				}
			})
		}
	}
}
