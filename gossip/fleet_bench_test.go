package gossip

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sort"
	"syscall"
	"testing"
	"time"
)

// BenchmarkFleetAtRest is a fleet at rest in one process over chanNet: N members, three of
// them servers, each publishing a 5 KB report (too large for a datagram) once a second, ten
// times the agent's rate at rest so a short window shows the traffic, with memberlist's LAN
// timers as the agent runs them. Over a 10 s window it reports the bytes a client sends a
// second (client-Bps, the median) and a server (server-Bps), and the process's CPU a member
// (cpu-pct-member, % of a core); then one client is killed and failed-ms is the time until
// every other member marks it failed.
func BenchmarkFleetAtRest(b *testing.B) {
	for _, n := range []int{30} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for range b.N {
				benchFleetAtRest(b, n)
			}
		})
	}
}

func benchFleetAtRest(b *testing.B, n int) {
	reg := &gsRegistry{}
	ring := [][]byte{gsKey(b)}
	network := &chanNet{}
	servers := map[string]bool{"m0": true, "m1": true, "m2": true}
	var ms []*gsMember
	var trs []*chanTransport
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("m%d", i)
		var join []string
		if i > 0 {
			join = []string{ms[0].Addr()}
		}
		tr := network.transport(names[i])
		m, err := gsStart(b, reg, names[i], ring, join, Tuning{}, fleetServers(servers), func(c *Config) { c.Transport = tr })
		if err != nil {
			b.Fatalf("start %s: %v", names[i], err)
		}
		ms, trs = append(ms, m), append(trs, tr)
	}
	gsAllSee(b, ms, time.Duration(n)*time.Second, names...)

	pad := make([]byte, 2500)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // every member publishes once a second, spread over the second
		defer close(done)
		t := time.NewTicker(time.Second / time.Duration(n))
		defer t.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			_, _ = rand.Read(pad)
			_ = ms[i%n].Publish(fmt.Appendf(nil, `{"pass":%d,"pad":%q}`, i, hex.EncodeToString(pad)))
		}
	}()
	time.Sleep(3 * time.Second) // settle: every member has published
	before := make([]uint64, n)
	for i, tr := range trs {
		before[i] = tr.sent.Load()
	}
	cpu0 := processCPU()
	began := time.Now()
	time.Sleep(10 * time.Second)
	window := time.Since(began)
	cpu := processCPU() - cpu0
	var clients []float64
	var server float64
	for i, tr := range trs {
		bps := float64(tr.sent.Load()-before[i]) / window.Seconds()
		if servers[names[i]] {
			server = max(server, bps)
		} else {
			clients = append(clients, bps)
		}
	}
	close(stop)
	<-done
	sort.Float64s(clients)
	b.ReportMetric(clients[len(clients)/2], "client-Bps")
	b.ReportMetric(server, "server-Bps")
	b.ReportMetric(100*cpu.Seconds()/window.Seconds()/float64(n), "cpu-pct-member")

	killed := ms[n-1]
	if err := killed.Shutdown(); err != nil {
		b.Fatal(err)
	}
	took := gsEventually(b, 60*time.Second, "every member sees the killed client failed", func() (bool, string) {
		for _, m := range ms[:n-1] {
			if st, _ := gsState(m.Gossip, killed.Name()); st != StateFailed {
				return false, fmt.Sprintf("%s sees it %s", m.Name(), st)
			}
		}
		return true, ""
	})
	b.ReportMetric(float64(took.Milliseconds()), "failed-ms")
}

// processCPU is the user and system time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
