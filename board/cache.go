package board

import (
	"sync"
	"time"

	"meshd/api"
	"meshd/fsm"
	"meshd/report"
)

// Stamped is a node's last report with its sequence: a number its holder moves whenever the
// report changes (0 with no report). The report is shared: read only.
type Stamped struct {
	Report *report.Report
	Seq    uint64
}

// Cache is the board built as Build builds it, each node's row kept between builds: a row is built
// again only when the record moved (its index) or the node's report did (its Seq), so the board of
// a fleet at rest costs the time-dependent parts of each row and the summary, never a node's
// report read again or its converge previewed again. A node the record no longer holds is
// dropped. Safe for concurrent use.
type Cache struct {
	mu    sync.Mutex
	index uint64
	rows  map[string]kept
	built uint64
}

// kept is a node's row but for its time-dependent parts, and the report it was built from.
type kept struct {
	seq uint64
	rep *report.Report
	row api.BoardRow
}

// Build is the board of the record r at index with each node's last report at now, rebuilding
// only the rows whose node's report or record changed since the last call.
func (c *Cache) Build(r *fsm.Record, index uint64, reports map[string]Stamped, now time.Time) api.Board {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rows == nil || index != c.index {
		c.rows, c.index = map[string]kept{}, index // the record moved: every row may have
	}
	seen := make(map[string]bool, len(c.rows))
	b := assemble(r, func(n *fsm.Node) api.BoardRow {
		st := reports[n.Name]
		seen[n.Name] = true
		k, ok := c.rows[n.Name]
		if !ok || k.seq != st.Seq || k.rep != st.Report {
			k = kept{seq: st.Seq, rep: st.Report, row: buildRow(r, n, st.Report)}
			c.rows[n.Name] = k
			c.built++
		}
		return timed(k.row, n, k.rep, now)
	})
	for name := range c.rows {
		if !seen[name] {
			delete(c.rows, name)
		}
	}
	return b
}

// Built is how many rows the cache has built since it was made, and how many it keeps now.
func (c *Cache) Built() (built uint64, kept int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.built, len(c.rows)
}
