package fleetsim

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"
)

// Figures are what one measured run of the simulator found (docs/performance.md, "A fleet").
type Figures struct {
	Nodes int         `json:"nodes"`
	Shape string      `json:"shape"`
	Enrol EnrolResult `json:"enrol"`
	// Rest is the window at rest; ServerCPU the busiest server's share of a core over it (%),
	// ServerRSS the largest server's resident memory after it (bytes).
	Rest      time.Duration `json:"rest_ns"`
	ServerCPU float64       `json:"server_cpu_pct"`
	ServerRSS int64         `json:"server_rss_bytes"`
	Servers   []Usage       `json:"servers"`
	Traffic   Traffic       `json:"traffic"`
	Stats     Stats         `json:"stats"`
	// Status is `meshd status --json` on the leader, the median of three.
	Status time.Duration `json:"status_ns"`
	Assign AssignResult  `json:"assign"`
	// Failover: the leader killed, how long until a live server answered with a new leader,
	// until every node that watched on the killed one watched elsewhere, and a module assigned
	// to every node after it was in force.
	Killed       string        `json:"killed,omitempty"`
	NewLeader    time.Duration `json:"new_leader_ns,omitempty"`
	WatchBack    time.Duration `json:"watch_back_ns,omitempty"`
	WatchesMoved int           `json:"watches_moved,omitempty"`
	AssignAfter  AssignResult  `json:"assign_after"`
}

// MeasureOptions say how long to rest and what to skip.
type MeasureOptions struct {
	Rest time.Duration
	// NoFailover skips killing the leader (the bed is still whole after).
	NoFailover bool
	// EnrolOnly stops after the enrolment (a profile of the servers then holds it alone).
	EnrolOnly bool
	// Batches enrols the n in this many steps, each while the nodes before it run (their
	// gossip views change under them); 0 or 1 enrols them at once.
	Batches int
	// Log receives each step as it ends.
	Log io.Writer
}

// Measure enrols n nodes into a fresh bed's fleet and measures: enrolment, the servers at rest
// and the gossip bytes over the rest window, the status, a module assigned to every node, and
// (unless NoFailover) the leader killed under the fleet.
func Measure(ctx context.Context, b *Bed, fleet *Remote, n int, o MeasureOptions) (Figures, error) {
	fig := Figures{Nodes: n, Rest: o.Rest}
	say := func(format string, args ...any) {
		if o.Log != nil {
			fmt.Fprintf(o.Log, "fleetsim: "+format+"\n", args...)
		}
	}
	batches := max(o.Batches, 1)
	fig.Enrol.Nodes = n
	for i := range batches {
		var r EnrolResult
		m := n/batches + min(1, max(0, n%batches-i))
		if err := fleet.Call(Request{Op: "enrol", N: m}, &r); err != nil {
			return fig, err
		}
		if batches > 1 {
			say("batch %d: %d nodes enrolled at %.1f joins/s, up in %s", i+1, m, r.JoinsPerSecond, r.Up.Round(time.Millisecond))
		}
		fig.Enrol.Tokens += r.Tokens
		fig.Enrol.Enrol += r.Enrol
		fig.Enrol.Up += r.Up
		fig.Enrol.UpView += r.UpView * time.Duration(m) / time.Duration(n)
		fig.Enrol.UpGossip += r.UpGossip * time.Duration(m) / time.Duration(n)
		fig.Enrol.UpPublish += r.UpPublish * time.Duration(m) / time.Duration(n)
	}
	fig.Enrol.JoinsPerSecond = float64(n) / fig.Enrol.Enrol.Seconds()
	say("%d nodes enrolled: tokens %s, enrolments %s (%.1f joins/s), gossip and first reports %s", n,
		fig.Enrol.Tokens.Round(time.Millisecond), fig.Enrol.Enrol.Round(time.Millisecond), fig.Enrol.JoinsPerSecond, fig.Enrol.Up.Round(time.Millisecond))
	say("coming up, a node's mean: gossip view %s, gossip joined %s, first report %s", fig.Enrol.UpView.Round(time.Millisecond),
		fig.Enrol.UpGossip.Round(time.Millisecond), fig.Enrol.UpPublish.Round(time.Millisecond))
	if o.EnrolOnly {
		return fig, nil
	}
	if err := b.poll(ctx, 60*time.Second, "every node's report on every server", func() error {
		return fleet.Call(Request{Op: "reached"}, nil)
	}); err != nil {
		return fig, err
	}
	// Let the joins settle (push-pull, the servers' first digests) before the window.
	time.Sleep(5 * time.Second)
	before := b.Usage()
	if err := fleet.Call(Request{Op: "traffic", Window: o.Rest}, &fig.Traffic); err != nil {
		return fig, err
	}
	after := b.Usage()
	for i, u := range after {
		if i < len(before) && before[i].Server == u.Server {
			pct := 100 * (u.CPU - before[i].CPU).Seconds() / o.Rest.Seconds()
			fig.ServerCPU = max(fig.ServerCPU, pct)
		}
		fig.ServerRSS = max(fig.ServerRSS, u.RSS)
	}
	fig.Servers = after
	say("at rest over %s: busiest server %.2f%% of a core, largest %.0f MB; gossip %.0f B/s out, %.0f B/s in a node",
		o.Rest, fig.ServerCPU, float64(fig.ServerRSS)/1e6, fig.Traffic.OutPerNodeS, fig.Traffic.InPerNodeS)
	leader := Servers[0]
	var took []time.Duration
	for range 3 {
		st, d, err := b.Status(ctx, leader)
		if err != nil {
			return fig, err
		}
		leader = st.Leader.Node
		took = append(took, d)
	}
	slices.Sort(took)
	fig.Status = took[1]
	say("meshd status --json on the leader %s: %s (median of 3)", leader, fig.Status.Round(time.Millisecond))
	if err := fleet.Call(Request{Op: "module", Module: "fleet-a"}, nil); err != nil {
		return fig, err
	}
	if err := fleet.Call(Request{Op: "assign", Module: "fleet-a", Window: 5 * time.Minute}, &fig.Assign); err != nil {
		return fig, err
	}
	say("fleet-a assigned to %d nodes in %s, in force on every one after %s", n, fig.Assign.Assigned.Round(time.Millisecond), fig.Assign.InForce.Round(time.Millisecond))
	if err := fleet.Call(Request{Op: "stats"}, &fig.Stats); err != nil {
		return fig, err
	}
	if o.NoFailover {
		return fig, nil
	}
	if err := fleet.Call(Request{Op: "module", Module: "fleet-b"}, nil); err != nil {
		return fig, err
	}
	at, err := b.Kill(leader)
	if err != nil {
		return fig, err
	}
	fig.Killed = leader
	found := make(chan error, 1)
	go func() {
		_, err := b.NewLeader(ctx, time.Minute)
		fig.NewLeader = time.Since(at)
		found <- err
	}()
	var wb WatchBackResult
	err = fleet.Call(Request{Op: "watchback", Bus: Bus(leader), At: at, Window: time.Minute}, &wb)
	if lerr := <-found; lerr != nil {
		return fig, lerr
	}
	if err != nil {
		return fig, err
	}
	fig.WatchBack, fig.WatchesMoved = wb.Last, wb.Moved
	say("leader %s killed: a new leader answered after %s; %d watches moved, the last after %s", leader,
		fig.NewLeader.Round(time.Millisecond), wb.Moved, wb.Last.Round(time.Millisecond))
	if err := fleet.Call(Request{Op: "assign", Module: "fleet-b", Window: 5 * time.Minute}, &fig.AssignAfter); err != nil {
		return fig, err
	}
	say("fleet-b assigned after the failover: in force on every node after %s", fig.AssignAfter.InForce.Round(time.Millisecond))
	return fig, nil
}
