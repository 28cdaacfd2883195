package agent

import (
	"sync"
	"time"

	"meshd/api"
	"meshd/board"
	"meshd/fsm"
	"meshd/gossip"
	"meshd/report"
)

// fleet is what a server knows of every node besides the record: each node's last host report
// (its own host's, one gossip carried and verified, one posted to this server's bus) and
// gossip's word on who is alive. The operator's API, the page and the metrics read it.
type fleet struct {
	// self is the serving node's name; own its host's report now.
	self string
	own  func() report.Report
	rec  reader
	// gossip is the node's gossip member as the reads need it.
	gossip gossipReader
	// pulse wakes the pages' event streams when a report arrives.
	pulse *pulse

	mu sync.Mutex
	// posted are the clients' last reports as they posted them to this server's bus.
	posted map[string]report.Report
}

// gossipReader is what the handler sets read of the node's gossip member (gossip.go).
type gossipReader interface {
	// member is the running member; nil before gossip starts.
	member() *gossip.Gossip
	// gossipReport is node's last report gossip carried and verified.
	gossipReport(node string) (*report.Report, bool)
	// membersByName is every member gossip knows, by node name.
	membersByName() map[string]gossip.Member
}

func newFleet(self string, own func() report.Report, rec reader, g gossipReader, p *pulse) *fleet {
	return &fleet{self: self, own: own, rec: rec, gossip: g, pulse: p, posted: map[string]report.Report{}}
}

// members is every gossip member this node knows, by name; gossipMember the running member
// (nil before gossip starts); changed waits for the next report to arrive.
func (f *fleet) members() map[string]gossip.Member { return f.gossip.membersByName() }
func (f *fleet) gossipMember() *gossip.Gossip      { return f.gossip.member() }
func (f *fleet) changed() <-chan struct{}          { return f.pulse.wait() }

// post keeps a report node posted to the bus and wakes the pages.
func (f *fleet) post(node string, rep report.Report) {
	f.mu.Lock()
	f.posted[node] = rep
	f.mu.Unlock()
	f.pulse.fire()
}

// report returns a node's last host report, if this server has it.
func (f *fleet) report(node string) *report.Report {
	rep, _ := f.reportFrom(node)
	return rep
}

// reportFrom returns a node's last host report and how it came: its own ("local"), one gossip
// carried and this node verified with the node's enrolled key ("gossip"), else one the node
// posted to this server's bus over mTLS while its gossip reached no server ("bus").
func (f *fleet) reportFrom(node string) (*report.Report, string) {
	if node == f.self {
		rep := f.own()
		if rep.When.IsZero() {
			return nil, ""
		}
		return &rep, "local"
	}
	gossiped, ok := f.gossip.gossipReport(node)
	f.mu.Lock()
	posted, posts := f.posted[node]
	f.mu.Unlock()
	switch {
	case ok && (!posts || !posted.When.After(gossiped.When)):
		return gossiped, "gossip"
	case posts:
		return &posted, "bus"
	}
	return nil, ""
}

// reports are the last reports of every node the record holds, by node.
func (f *fleet) reports() map[string]*report.Report {
	out := map[string]*report.Report{}
	var names []string
	f.rec.Read(func(r *fsm.Record, _ uint64) { names = r.NodeNames() })
	for _, n := range names {
		if rep := f.report(n); rep != nil {
			out[n] = rep
		}
	}
	return out
}

// board is where each node stands now (package board).
func (f *fleet) board() api.Board {
	reports := f.reports()
	var b api.Board
	f.rec.Read(func(r *fsm.Record, _ uint64) { b = board.Build(r, reports, time.Now()) })
	return b
}

// tunnel is the private network as the record holds it and the hub's report shows it.
func (f *fleet) tunnel() api.TunnelView {
	var v api.TunnelView
	var hub string
	f.rec.Read(func(r *fsm.Record, _ uint64) { hub = r.Tunnel.Hub })
	rep, from := f.reportFrom(hub)
	f.rec.Read(func(r *fsm.Record, _ uint64) { v = tunnelViewOf(r, rep, from) })
	return v
}
