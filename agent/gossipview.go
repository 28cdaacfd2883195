package agent

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"sync"

	"meshd/api"
	"meshd/fsm"
)

// A node reads the gossip view from a server every few seconds (runGossip): every node's
// endpoints and key, O(N) to compose and to send. A server composes it once per change of the
// record and names it by an index (a digest of its content, the same on every server); a node
// sends the index it holds and, while the view is that one, is answered "unchanged" in a few
// bytes. A node that sends no index (an agent from before, in a rolling upgrade) gets the
// whole view as it always did.
//
// A changed view is a node's and its enrolment's alone, but every node reads it: sent whole, one
// join costs every node O(N) bytes, the fleet O(N²). A node that asks with &delta=1 and holds one
// of the last viewHistory views gets the change since it (the nodes added or changed, the names
// removed), O(1) for a join, composed once per view for all who held the same one. A node that
// holds an older view, or does not ask for a delta (an agent from before), gets the whole view.

// viewHistory is how many past views a server keeps to answer deltas from.
const viewHistory = 32

// viewCache is a server's gossip view, composed again only when the record moved.
type viewCache struct {
	rec reader

	mu sync.Mutex
	at uint64         // the record's index view was composed at
	v  api.GossipView // for no node in particular (Node empty); Index set
	// past are the last views before v, oldest first; deltas the deltas to v from them, made
	// when first asked.
	past   []api.GossipView
	deltas map[uint64]api.GossipView
	// composed counts the compositions (a unit test reads it).
	composed int
}

// current is the view at the record's index now, composed only if the record moved since the
// last call. It is shared: read only.
func (c *viewCache) current() api.GossipView {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rec.Read(func(r *fsm.Record, index uint64) {
		if c.v.Index != 0 && index == c.at {
			return
		}
		v := gossipViewOf(r, "")
		v.Index = viewIndex(v)
		if c.v.Index != 0 && v.Index != c.v.Index {
			c.past = append(c.past, c.v)
			if len(c.past) > viewHistory {
				c.past = slices.Delete(c.past, 0, len(c.past)-viewHistory)
			}
			c.deltas = nil
		}
		c.v, c.at = v, index
		c.composed++
	})
	return c.v
}

// viewIndex is v's index: the first 8 bytes of the digest of its nodes and revoked keys (never 0,
// which says a node holds no index).
func viewIndex(v api.GossipView) uint64 {
	b, _ := json.Marshal(struct {
		Nodes   []api.GossipPeer
		Revoked []string
	}{v.Nodes, v.Revoked})
	sum := sha256.Sum256(b)
	return max(binary.BigEndian.Uint64(sum[:8]), 1)
}

// answer is node's answer to GET /v1/gossip?index=held[&delta=1]: "unchanged" when held names
// the current view; the change since held when delta and held is a recent view; else the whole
// view (held "": a node that sends no index).
func (c *viewCache) answer(node, held string, delta bool) api.GossipView {
	v := c.current()
	if held != "" && held == strconv.FormatUint(v.Index, 10) {
		return api.GossipView{Node: node, Index: v.Index, Unchanged: true}
	}
	if delta {
		if since, err := strconv.ParseUint(held, 10, 64); err == nil {
			if d, ok := c.deltaTo(v, since); ok {
				d.Node = node
				return d
			}
		}
	}
	v.Node = node
	return v
}

// deltaTo is the delta from the past view since to v (the current one), if it is kept.
func (c *viewCache) deltaTo(v api.GossipView, since uint64) (api.GossipView, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.v.Index != v.Index {
		return api.GossipView{}, false // moved on meanwhile: the whole view
	}
	if d, ok := c.deltas[since]; ok {
		return d, true
	}
	for _, old := range c.past {
		if old.Index == since {
			d, ok := api.DeltaOf(old, v)
			if !ok {
				return api.GossipView{}, false
			}
			if c.deltas == nil {
				c.deltas = map[uint64]api.GossipView{}
			}
			c.deltas[since] = d
			return d, true
		}
	}
	return api.GossipView{}, false
}

// getGossipView serves a node its gossip view on the bus: "unchanged" while the index it sends
// names the current one, the change since it when it asks for a delta.
func (s *bus) getGossipView(w http.ResponseWriter, req *http.Request, peer string) {
	q := req.URL.Query()
	api.WriteJSON(w, http.StatusOK, s.views.answer(peer, q.Get("index"), q.Get("delta") == "1"))
}
