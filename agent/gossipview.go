package agent

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"net/http"
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

// viewCache is a server's gossip view, composed again only when the record moved.
type viewCache struct {
	rec reader

	mu sync.Mutex
	at uint64         // the record's index view was composed at
	v  api.GossipView // for no node in particular (Node empty); Index set
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

// answer is node's answer to GET /v1/gossip?index=held: "unchanged" when held names the current
// view, else the view (held "": a node that sends no index).
func (c *viewCache) answer(node, held string) api.GossipView {
	v := c.current()
	if held != "" && held == strconv.FormatUint(v.Index, 10) {
		return api.GossipView{Node: node, Index: v.Index, Unchanged: true}
	}
	v.Node = node
	return v
}

// getGossipView serves a node its gossip view on the bus: "unchanged" while the index it sends
// names the current one.
func (s *bus) getGossipView(w http.ResponseWriter, req *http.Request, peer string) {
	api.WriteJSON(w, http.StatusOK, s.views.answer(peer, req.URL.Query().Get("index")))
}
