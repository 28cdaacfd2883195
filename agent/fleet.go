package agent

import (
	"encoding/json"
	"log/slog"
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
//
// It works on what changed: each report is decoded once, when gossip or the bus brings a new
// one (gossip.ReportsSince answers only those), and kept decoded, stamped with the fleet's own
// change sequence, so the leader's loops look at the nodes changed since their last look and a
// read of one node copies nothing of the others. The reports it hands out are shared: read only.
type fleet struct {
	// self is the serving node's name; own its host's report now.
	self string
	own  func() report.Report
	rec  reader
	// gossip is the node's gossip member as the reads need it.
	gossip gossipReader
	// pulse wakes the pages' event streams when a report arrives.
	pulse *pulse
	log   *slog.Logger
	// decode turns a report's payload into a report (json; a unit test counts the calls).
	decode func([]byte) (*report.Report, error)

	mu sync.Mutex
	// feed is the member whose reports nodes holds; another one (gossip restarted) starts over.
	feed reportFeed
	// since is feed's index of the last look; seq the fleet's last change.
	since, seq uint64
	nodes      map[string]*known
	// ownRep is the serving node's own last report as reportFrom gave it, stamped ownSeq.
	ownRep *report.Report
	ownSeq uint64
	// boards keeps each node's board row while its report and the record stay (board.Cache).
	boards board.Cache
}

// known is what the fleet holds of one node: its last report as gossip carried it and as the
// node posted it to this server's bus, each decoded once, and the fleet's seq when either changed.
type known struct {
	gossiped, posted *report.Report
	seq              uint64
}

// gossipReader is what the handler sets read of the node's gossip member (gossip.go).
type gossipReader interface {
	// member is the running member; nil before gossip starts.
	member() *gossip.Gossip
	// reportFeed is the running member's verified reports; nil before gossip starts.
	reportFeed() reportFeed
	// membersByName is every member gossip knows, by node name.
	membersByName() map[string]gossip.Member
}

// reportFeed hands out the reports gossip verified and kept since an index (gossip.Gossip).
type reportFeed interface {
	ReportsSince(index uint64) (changed []gossip.Report, dropped []string, next uint64)
}

func newFleet(self string, own func() report.Report, rec reader, g gossipReader, p *pulse, log *slog.Logger) *fleet {
	return &fleet{self: self, own: own, rec: rec, gossip: g, pulse: p, log: log, decode: decodeReport,
		nodes: map[string]*known{}}
}

// decodeReport is a report's payload as the agent publishes it (json), each driver's part the
// fleet's readers read (containers, openings, tunnel) typed at once: the board, status, the
// page and the metrics would otherwise decode it again from generic JSON at each read.
func decodeReport(b []byte) (*report.Report, error) {
	var rep report.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		return nil, err
	}
	typed[report.ContainerReport](&rep, fsm.KindContainer)
	typed[report.OpeningDetail](&rep, fsm.KindOpening)
	typed[report.TunnelDetail](&rep, fsm.KindTunnel)
	return &rep, nil
}

// typed replaces rep's part of kind, if it has one that decodes as T, by a *T.
func typed[T any](rep *report.Report, kind string) {
	if _, ok := rep.Kinds[kind]; !ok {
		return
	}
	if v, ok := report.Detail[T](rep, kind); ok {
		rep.Kinds[kind] = &v
	}
}

// refresh takes in what gossip kept or dropped since the last look, decoding the reports that
// changed and nothing else. f.mu is held.
func (f *fleet) refresh() {
	feed := f.gossip.reportFeed()
	if feed != f.feed {
		for _, k := range f.nodes {
			if k.gossiped != nil {
				k.gossiped = nil
				f.touch(k)
			}
		}
		f.feed, f.since = feed, 0
	}
	if feed == nil {
		return
	}
	changed, dropped, next := feed.ReportsSince(f.since)
	f.since = next
	for _, r := range changed {
		rep, err := f.decode(r.Payload)
		if err != nil {
			f.log.Warn("a verified report does not decode", "about", r.Node, "err", err)
			continue
		}
		k := f.node(r.Node)
		k.gossiped = rep
		f.touch(k)
	}
	for _, n := range dropped {
		if k, ok := f.nodes[n]; ok && k.gossiped != nil {
			k.gossiped = nil
			f.touch(k)
		}
	}
}

// node is what the fleet holds of name, made empty on first use. f.mu is held.
func (f *fleet) node(name string) *known {
	k, ok := f.nodes[name]
	if !ok {
		k = &known{}
		f.nodes[name] = k
	}
	return k
}

// touch stamps k changed now. f.mu is held.
func (f *fleet) touch(k *known) {
	f.seq++
	k.seq = f.seq
}

// changedSince is every node whose report changed after seq (a value it returned before; 0 for
// every node with a report) and the seq to ask from next. It decodes only what gossip brought
// since the last look.
func (f *fleet) changedSince(seq uint64) ([]string, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.refresh()
	if seq > f.seq {
		seq = 0
	}
	var out []string
	if seq < f.seq {
		for n, k := range f.nodes {
			if k.seq > seq {
				out = append(out, n)
			}
		}
	}
	return out, f.seq
}

// members is every gossip member this node knows, by name; gossipMember the running member
// (nil before gossip starts); changed waits for the next report to arrive.
func (f *fleet) members() map[string]gossip.Member { return f.gossip.membersByName() }
func (f *fleet) gossipMember() *gossip.Gossip      { return f.gossip.member() }
func (f *fleet) changed() <-chan struct{}          { return f.pulse.wait() }

// post keeps a report node posted to the bus and wakes the pages.
func (f *fleet) post(node string, rep report.Report) {
	f.mu.Lock()
	k := f.node(node)
	k.posted = &rep
	f.touch(k)
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
	var own report.Report
	if node == f.self {
		own = f.own()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	rep, from, _ := f.stamped(node, own)
	return rep, from
}

// stamped is reportFrom's answer with the fleet's seq of the node's last change; own is the
// serving node's report when node is that node. f.mu is held.
func (f *fleet) stamped(node string, own report.Report) (*report.Report, string, uint64) {
	if node == f.self {
		if own.When.IsZero() {
			return nil, "", 0
		}
		if f.ownRep == nil || !own.When.Equal(f.ownRep.When) {
			f.ownRep = &own // a new pass of the host: each has its own time
			f.seq++
			f.ownSeq = f.seq
		}
		return f.ownRep, "local", f.ownSeq
	}
	f.refresh()
	k, ok := f.nodes[node]
	if !ok {
		return nil, "", 0
	}
	switch {
	case k.gossiped != nil && (k.posted == nil || !k.posted.When.After(k.gossiped.When)):
		return k.gossiped, "gossip", k.seq
	case k.posted != nil:
		return k.posted, "bus", k.seq
	}
	return nil, "", 0
}

// stampedReport is a node's last report, how it came (reportFrom) and the fleet's seq of its
// last change: a reader that keeps what it made of a report keeps it while seq stays.
type stampedReport struct {
	rep  *report.Report
	from string
	seq  uint64
}

// stampedReports are the last reports of every node the record holds, by node. What the fleet
// holds of a node the record no longer has is dropped, unless it changed since the record was
// read (a node enrolled meanwhile).
func (f *fleet) stampedReports() map[string]stampedReport {
	f.mu.Lock()
	mark := f.seq
	f.mu.Unlock()
	var names []string
	f.rec.Read(func(r *fsm.Record, _ uint64) { names = r.NodeNames() })
	own := f.own()
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]stampedReport, len(names))
	held := make(map[string]bool, len(names))
	for _, n := range names {
		held[n] = true
		if rep, from, seq := f.stamped(n, own); rep != nil {
			out[n] = stampedReport{rep, from, seq}
		}
	}
	for n, k := range f.nodes {
		if !held[n] && k.seq <= mark {
			delete(f.nodes, n)
		}
	}
	return out
}

// reports are the last reports of every node the record holds, by node.
func (f *fleet) reports() map[string]*report.Report {
	st := f.stampedReports()
	out := make(map[string]*report.Report, len(st))
	for n, s := range st {
		out[n] = s.rep
	}
	return out
}

// board is where each node stands now (package board), each node's row built again only when
// its report or the record changed.
func (f *fleet) board() api.Board {
	st := f.stampedReports()
	reports := make(map[string]board.Stamped, len(st))
	for n, s := range st {
		reports[n] = board.Stamped{Report: s.rep, Seq: s.seq}
	}
	var b api.Board
	f.rec.Read(func(r *fsm.Record, index uint64) { b = f.boards.Build(r, index, reports, time.Now()) })
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
