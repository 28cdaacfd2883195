package agent

import (
	"sync"

	"meshd/api"
	"meshd/fsm"
	"meshd/host/preview"
	"meshd/report"
)

// pageNodes keeps each node's part of the status page that the record and its report make (its
// declaration composed and its converge previewed, its report's containers, openings and tunnel
// decoded), built again only when the record moved or the node's report changed. A page streamed
// to an operator is rendered again at every report that arrives: at 1000 nodes, a hundred times
// a second, each of which composed and previewed every node before.
type pageNodes struct {
	mu    sync.Mutex
	index uint64
	kept  map[string]pageKept
	// built counts the nodes built (a unit test reads it).
	built int
}

// pageKept is a node's part of the page (its liveness aside) and the report it was made from.
type pageKept struct {
	seq uint64
	rep *report.Report
	pn  PageNode
}

// pageMiss is a node whose part is built again: its record entry as read, its declaration.
type pageMiss struct {
	n       fsm.Node
	control bool
	decl    *fsm.Declaration
	taken   []string
}

// build is every node's part of the page, in the record's order, from the record and reports;
// also is called in the same read of the record. Only the nodes whose report or record changed
// are composed (inside the read) and previewed (after it).
func (c *pageNodes) build(rec reader, reports map[string]stampedReport, also func(r *fsm.Record, index uint64)) []PageNode {
	c.mu.Lock()
	defer c.mu.Unlock()
	var names []string
	var misses []pageMiss
	rec.Read(func(r *fsm.Record, index uint64) {
		also(r, index)
		if c.kept == nil || index != c.index {
			c.kept, c.index = map[string]pageKept{}, index
		}
		names = r.NodeNames()
		for _, name := range names {
			st := reports[name]
			if k, ok := c.kept[name]; ok && k.seq == st.seq && k.rep == st.rep {
				continue
			}
			n := r.Nodes[name]
			d, _ := fsm.Compose(r, name)
			misses = append(misses, pageMiss{n: *n, control: r.Genesis != nil && r.Genesis.ControlNode == name, decl: d, taken: n.EffectiveTaken()})
		}
	})
	for _, m := range misses {
		st := reports[m.n.Name]
		c.kept[m.n.Name] = pageKept{seq: st.seq, rep: st.rep, pn: pageNodeOf(m, st)}
		c.built++
	}
	out := make([]PageNode, 0, len(names))
	held := make(map[string]bool, len(names))
	for _, name := range names {
		held[name] = true
		out = append(out, c.kept[name].pn)
	}
	for name := range c.kept {
		if !held[name] {
			delete(c.kept, name)
		}
	}
	return out
}

// pageNodeOf is node m's part of the page from its report st, its liveness aside.
func pageNodeOf(m pageMiss, st stampedReport) PageNode {
	n, rep := m.n, st.rep
	pn := PageNode{Name: n.Name, Mode: n.Mode, ModeSince: n.ModeSince, Role: "client", ControlNode: m.control,
		Address: n.Address, Assigned: n.Assigned, Taken: m.taken, Report: rep, ReportFrom: st.from}
	if n.Server {
		pn.Role = "server"
	}
	if rep != nil {
		pn.Held = rep.Held
		var cr report.ContainerReport
		if api.DecodeInto(rep.Kinds[fsm.KindContainer], &cr) {
			pn.Containers, pn.EngineError = cr.Containers, cr.EngineError
		}
		var od report.OpeningDetail
		if api.DecodeInto(rep.Kinds[fsm.KindOpening], &od) {
			pn.Firewall, pn.Openings = od.Firewall, od.Openings
		}
		api.DecodeInto(rep.Kinds[fsm.KindTunnel], &pn.Tunnel)
	}
	if m.decl == nil {
		pn.PreviewError = "no declaration for this node"
		return pn
	}
	pv, err := preview.Converge(rep, m.decl)
	if err != nil {
		pn.PreviewError = err.Error()
	} else {
		pn.Preview = &pv
	}
	return pn
}
