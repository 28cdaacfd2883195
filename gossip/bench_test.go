package gossip

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// BenchmarkReportSpread is the time a changed host report takes to reach every member, at
// N members in one process with meshd's own timers (memberlist's LAN profile), reported beside
// memberlist's epidemic model: each gossip round every member that has the message passes
// it to GossipNodes others, so N members hear it in about log_(GossipNodes+1)(N) rounds of
// GossipInterval. "ms-to-all" is measured, "model-ms" the model's figure.
func BenchmarkReportSpread(b *testing.B) {
	// Above 10 members the members talk over chanNet (channet_test.go): memberlist's own
	// MockNetwork lost a report among 200 members; and at 200 the failure detector is relaxed.
	for _, n := range []int{10, 50, 100, 200} {
		b.Run(fmt.Sprint(n), func(b *testing.B) { benchSpread(b, n) })
	}
}

func benchSpread(b *testing.B, n int) {
	reg := &gsRegistry{}
	ring := [][]byte{gsKey(b)}
	var mu sync.Mutex
	var after uint64 // the sequence of m0's report before this iteration's
	heard := map[string]bool{}
	all := make(chan struct{}, 1)
	onReport := func(self string) gsOpt {
		return func(c *Config) {
			c.OnReport = func(r Report) {
				mu.Lock()
				defer mu.Unlock()
				if r.Node != "m0" || r.Seq <= after || heard[self] {
					return
				}
				heard[self] = true
				if len(heard) == n-1 {
					select {
					case all <- struct{}{}:
					default:
					}
				}
			}
		}
	}
	// Above 10 members the loopback sockets of one process on two cores starve memberlist's
	// probes (members are marked failed while they wait for CPU): the members talk over an
	// in-process network instead, the same protocol without the kernel.
	var network *chanNet
	if n > 10 {
		network = &chanNet{}
	}
	// The failure detector's timers are relaxed above 100 members in one process: with the LAN
	// profile's (probe every 1 s, ack within 500 ms) 200 members in one process flapped, some
	// marked failed and refuting, and never all saw each other alive in 200 s, though the
	// process used under half a core: acks miss the 500 ms timeout while 200 members' probes,
	// gossip and push-pulls interleave on two shared cores. None of this is the spread
	// measured: gossip's interval and fan-out (what the model counts) stay the LAN profile's.
	tuning := Tuning{}
	if n > 100 {
		tuning = Tuning{ProbeInterval: 5 * time.Second, ProbeTimeout: 3 * time.Second, SuspicionMult: 8}
	}
	began := time.Now()
	var ms []*gsMember
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("m%d", i)
		var join []string
		if i > 0 {
			join = []string{ms[0].Addr()}
		}
		opts := []gsOpt{onReport(names[i])}
		if network != nil {
			tr := network.transport(names[i])
			opts = append(opts, func(c *Config) { c.Transport = tr })
		}
		m, err := gsStart(b, reg, names[i], ring, join, tuning, opts...)
		if err != nil {
			b.Fatalf("start %s: %v", names[i], err)
		}
		ms = append(ms, m)
	}
	joined := time.Now()
	gsAllSee(b, ms, time.Duration(n)*time.Second, names...)
	b.Logf("%d members started in %v, all saw all after %v more", n, joined.Sub(began), time.Since(joined))

	mc := memberlist.DefaultLANConfig()
	rounds := math.Ceil(math.Log(float64(n)) / math.Log(float64(mc.GossipNodes+1)))
	model := rounds * float64(mc.GossipInterval.Milliseconds())

	var total time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		mu.Lock()
		after = ms[0].Reports()["m0"].Seq // 0 before the first: every Publish gets a higher one
		clear(heard)
		mu.Unlock()
		start := time.Now()
		if err := ms[0].Publish([]byte(fmt.Sprintf(`{"pass":%d}`, i))); err != nil {
			b.Fatal(err)
		}
		select {
		case <-all:
		case <-time.After(30 * time.Second):
			mu.Lock()
			got := len(heard)
			mu.Unlock()
			b.Fatalf("%d members: a changed report reached %d of %d others in 30 s", n, got, n-1)
		}
		total += time.Since(start)
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms-to-all")
	b.ReportMetric(model, "model-ms")
}
