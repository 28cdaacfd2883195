package gossip

import (
	"container/list"
	"crypto/sha256"
)

// reportStore is the reports a member keeps, one per node. Each change (a report kept, a
// report dropped) takes the next index and moves its node to the end of a list in index order,
// so a reader asks for what changed since the index it last saw (ReportsSince) and the store
// walks back over the changes only, never the fleet; a message is checked against the store by
// its digest, in constant time, however many reports are kept. The Gossip's mu guards it.
type reportStore struct {
	byNode   map[string]*stored
	byDigest map[[sha256.Size]byte]string // the digest of each kept report's exact bytes: its node
	index    uint64                       // the last change's
	gone     map[string]uint64            // nodes whose report was dropped, at which index
	order    *list.List                   // node names, by the index of their last change
	at       map[string]*list.Element     // each node's place in order
}

func newReportStore() reportStore {
	return reportStore{byNode: map[string]*stored{}, byDigest: map[[sha256.Size]byte]string{}, gone: map[string]uint64{},
		order: list.New(), at: map[string]*list.Element{}}
}

// moved puts node last in order: its change is the newest.
func (s *reportStore) moved(node string) {
	if e, ok := s.at[node]; ok {
		s.order.MoveToBack(e)
		return
	}
	s.at[node] = s.order.PushBack(node)
}

// holder is the node whose kept report has these exact bytes, if one has.
func (s *reportStore) holder(digest [sha256.Size]byte) (string, bool) {
	n, ok := s.byDigest[digest]
	return n, ok
}

func (s *reportStore) get(node string) (*stored, bool) {
	st, ok := s.byNode[node]
	return st, ok
}

// put keeps st as its node's report, replacing the one before, at the next index.
func (s *reportStore) put(st *stored) {
	if old, ok := s.byNode[st.Node]; ok {
		delete(s.byDigest, old.digest)
	}
	s.index++
	st.index = s.index
	st.digest = sha256.Sum256(st.raw)
	s.byNode[st.Node] = st
	s.byDigest[st.digest] = st.Node
	delete(s.gone, st.Node)
	s.moved(st.Node)
}

// drop forgets node's report, at the next index.
func (s *reportStore) drop(node string) {
	old, ok := s.byNode[node]
	if !ok {
		return
	}
	delete(s.byDigest, old.digest)
	delete(s.byNode, node)
	s.index++
	s.gone[node] = s.index
	s.moved(node)
}

// since is every report kept after index, and every node whose report was dropped after it:
// a walk back from the newest change to the first at or before index.
func (s *reportStore) since(index uint64) (changed []*stored, gone []string) {
	for e := s.order.Back(); e != nil; e = e.Prev() {
		node := e.Value.(string)
		if st, ok := s.byNode[node]; ok {
			if st.index <= index {
				break
			}
			changed = append(changed, st)
		} else {
			if s.gone[node] <= index {
				break
			}
			gone = append(gone, node)
		}
	}
	return changed, gone
}

// ReportsSince returns the reports kept since index (one an earlier call returned; 0 for
// every report held), the nodes whose report was dropped since (their key revoked) and the
// index to ask from next. Its cost is that of the changes: an unchanged store answers nothing
// and copies nothing, so a server reads the fleet's reports this way, decoding only those that
// changed. It does not look for revoked keys itself (that is a look at every report): Members,
// Reports and push-pull do, and what they drop is in the next answer.
func (g *Gossip) ReportsSince(index uint64) (changed []Report, dropped []string, next uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if index > g.store.index {
		index = 0 // an index of another member's life: start over
	}
	kept, dropped := g.store.since(index)
	changed = make([]Report, 0, len(kept))
	for _, st := range kept {
		r := st.Report
		r.Payload = append([]byte(nil), r.Payload...)
		changed = append(changed, r)
	}
	return changed, dropped, g.store.index
}

// Report returns node's latest verified report, if this member holds one. It copies that
// report only.
func (g *Gossip) Report(node string) (Report, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	st, ok := g.store.get(node)
	if !ok {
		return Report{}, false
	}
	if node != g.cfg.Name && g.cfg.Revoked != nil && g.cfg.Revoked(st.key) {
		g.store.drop(node)
		return Report{}, false
	}
	r := st.Report
	r.Payload = append([]byte(nil), r.Payload...)
	return r, true
}
