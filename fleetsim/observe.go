package fleetsim

import (
	"context"
	"fmt"
	"time"

	"meshd/api"
)

// Stats is what the fleet's nodes carried, summed or at worst over the nodes: the done-criterion
// of issue 37 is that no client holds, sends or receives another client's report, and that a
// member's push-pull state is its own, not the fleet's.
type Stats struct {
	Nodes int `json:"nodes"`
	// ReportsSent sums the reports the nodes sent (one a server each); Published the reports
	// they made.
	ReportsSent uint64 `json:"reports_sent"`
	Published   int    `json:"published"`
	// The most any one node received, held and sent of other nodes' reports.
	MaxReceivedOthers uint64 `json:"max_received_others"`
	MaxHeldOthers     int    `json:"max_held_others"`
	MaxRelayed        uint64 `json:"max_relayed"`
	// MaxStateOut and MaxStateIn are the largest push-pull state any node sent and received.
	MaxStateOut int `json:"max_state_out"`
	MaxStateIn  int `json:"max_state_in"`
	// BytesOut and BytesIn are every node's gossip bytes on the wire so far, summed.
	BytesOut uint64 `json:"bytes_out"`
	BytesIn  uint64 `json:"bytes_in"`
	// ReportBytes is the size of a node's report (its JSON, before signing).
	ReportBytes int `json:"report_bytes"`
}

// Stats reads every node's counters.
func (f *Fleet) Stats() Stats {
	nodes := f.nodes()
	st := Stats{Nodes: len(nodes)}
	for _, c := range nodes {
		g := c.g.Stats()
		st.ReportsSent += g.Sent
		st.MaxReceivedOthers = max(st.MaxReceivedOthers, g.ReceivedOthers)
		st.MaxHeldOthers = max(st.MaxHeldOthers, g.HeldOthers)
		st.MaxRelayed = max(st.MaxRelayed, g.Relayed)
		st.MaxStateOut = max(st.MaxStateOut, g.StateOut)
		st.MaxStateIn = max(st.MaxStateIn, g.StateIn)
		out, in := c.tr.bytes()
		st.BytesOut += out
		st.BytesIn += in
		c.mu.Lock()
		st.Published += c.published
		c.mu.Unlock()
		if r, ok := c.g.Report(c.name); ok && st.ReportBytes == 0 {
			st.ReportBytes = len(r.Payload)
		}
	}
	return st
}

// Traffic is the gossip bytes a node sends and receives a second, on average over the fleet,
// measured over a window.
type Traffic struct {
	Window      time.Duration `json:"window_ns"`
	OutPerNodeS float64       `json:"out_bytes_per_node_s"`
	InPerNodeS  float64       `json:"in_bytes_per_node_s"`
}

// Traffic measures the fleet's gossip bytes over window.
func (f *Fleet) Traffic(ctx context.Context, window time.Duration) (Traffic, error) {
	a := f.Stats()
	start := time.Now()
	select {
	case <-ctx.Done():
		return Traffic{}, ctx.Err()
	case <-time.After(window):
	}
	b := f.Stats()
	secs := time.Since(start).Seconds()
	n := float64(max(1, b.Nodes))
	return Traffic{Window: window, OutPerNodeS: float64(b.BytesOut-a.BytesOut) / n / secs,
		InPerNodeS: float64(b.BytesIn-a.BytesIn) / n / secs}, nil
}

// Reached checks that every server holds every node's report, sent by gossip: each server's own
// status (a stale read, from its own record and reports) lists each node with its report.
func (f *Fleet) Reached(ctx context.Context) error {
	names := map[string]bool{}
	for _, c := range f.nodes() {
		names[c.name] = true
	}
	for _, bus := range f.o.Credential.Bus {
		cl := api.NewBusClient("fleetsim", []string{bus}, f.o.Credential.TLS())
		cl.Stale = true
		var st api.StatusView
		if err := cl.Get(ctx, "/v1/status", &st); err != nil {
			return fmt.Errorf("server at %s: status: %w", bus, err)
		}
		seen := 0
		for _, n := range st.Nodes {
			if !names[n.Name] {
				continue
			}
			if n.ReportFrom != "gossip" {
				return fmt.Errorf("server %s holds node %s's report from %q, want gossip", st.ServedBy, n.Name, n.ReportFrom)
			}
			seen++
		}
		if seen != len(names) {
			return fmt.Errorf("server %s lists %d of the %d simulated nodes", st.ServedBy, seen, len(names))
		}
	}
	return nil
}

// WatchBack waits until every node whose declaration watch was on the server at bus (killed at
// at) has written its watch to another server, and returns how long after at the last one did.
func (f *Fleet) WatchBack(ctx context.Context, bus string, at time.Time, wait time.Duration) (time.Duration, int, error) {
	var moved []*client
	for _, c := range f.nodes() {
		if s, sent := c.watching(); s == bus && sent.Before(at) {
			moved = append(moved, c)
		}
	}
	deadline := time.Now().Add(wait)
	for {
		var last time.Duration
		left := 0
		for _, c := range moved {
			s, sent := c.watching()
			if s == bus || sent.Before(at) {
				left++
				continue
			}
			last = max(last, sent.Sub(at))
		}
		if left == 0 {
			return last, len(moved), nil
		}
		if time.Now().After(deadline) {
			return 0, len(moved), fmt.Errorf("%d of the %d nodes that watched on %s watch nowhere else %s after", left, len(moved), bus, wait)
		}
		select {
		case <-ctx.Done():
			return 0, len(moved), ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
