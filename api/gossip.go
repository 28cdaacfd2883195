package api

import (
	"slices"
	"strings"
	"time"
)

// GossipPeer is one node as gossip and the bus reach it.
type GossipPeer struct {
	Name      string `json:"name"`
	Server    bool   `json:"server,omitempty"`
	Advertise string `json:"advertise"`
	Bus       uint16 `json:"bus"`
	Gossip    uint16 `json:"gossip"`
	PublicKey string `json:"public_key,omitempty"`
}

// GossipView is what a server tells a node about the mesh's gossip: the node's own ports and
// every node's endpoints and enrolled key.
type GossipView struct {
	Node  string       `json:"node"`
	Nodes []GossipPeer `json:"nodes"`
	// Revoked are the identity keys of removed nodes (`meshd node remove`): the node's gossip
	// refuses a member announcing one and drops every report one signed.
	Revoked []string `json:"revoked,omitempty"`
	// Index names this view: a digest of its nodes and revoked keys, so every server gives the
	// same view the same index. A node sends back the index it holds (GET /v1/gossip?index=N)
	// and is answered Unchanged while its view is current. 0 from a server before it.
	Index uint64 `json:"index,omitempty"`
	// Unchanged says the view the asker holds (its index) is current: Nodes and Revoked are not
	// sent again.
	Unchanged bool `json:"unchanged,omitempty"`
	// Delta says this answer is the change from view Since (the index the asker held, which
	// asked with &delta=1): Nodes are the nodes added or changed since, Removed the names gone,
	// Revoked the keys revoked since. ApplyDelta makes the whole view of it.
	Delta   bool     `json:"delta,omitempty"`
	Since   uint64   `json:"since,omitempty"`
	Removed []string `json:"removed,omitempty"`
}

// ApplyDelta is the whole view v becomes with d, a delta from v's index; false when d is not
// one (the asker then asks for the whole view). Nodes stay in name order, as a server sends them.
func (v GossipView) ApplyDelta(d GossipView) (GossipView, bool) {
	if !d.Delta || d.Since != v.Index || v.Index == 0 {
		return GossipView{}, false
	}
	gone := map[string]bool{}
	for _, n := range d.Removed {
		gone[n] = true
	}
	for _, p := range d.Nodes {
		gone[p.Name] = true // replaced below
	}
	out := GossipView{Node: d.Node, Index: d.Index, Nodes: make([]GossipPeer, 0, len(v.Nodes)+len(d.Nodes))}
	for _, p := range v.Nodes {
		if !gone[p.Name] {
			out.Nodes = append(out.Nodes, p)
		}
	}
	out.Nodes = append(out.Nodes, d.Nodes...)
	slices.SortFunc(out.Nodes, func(a, b GossipPeer) int { return strings.Compare(a.Name, b.Name) })
	out.Revoked = append(slices.Clone(v.Revoked), d.Revoked...)
	return out, true
}

// DeltaOf is the delta from old to cur (both whole views with indexes); false when cur cannot be
// told as one (a key no longer revoked), and the whole view is sent.
func DeltaOf(old, cur GossipView) (GossipView, bool) {
	d := GossipView{Index: cur.Index, Since: old.Index, Delta: true, Nodes: []GossipPeer{}}
	was := make(map[string]GossipPeer, len(old.Nodes))
	for _, p := range old.Nodes {
		was[p.Name] = p
	}
	for _, p := range cur.Nodes {
		if o, ok := was[p.Name]; !ok || o != p {
			d.Nodes = append(d.Nodes, p)
		}
		delete(was, p.Name)
	}
	for name := range was {
		d.Removed = append(d.Removed, name)
	}
	slices.Sort(d.Removed)
	revoked := map[string]bool{}
	for _, k := range old.Revoked {
		revoked[k] = true
	}
	for _, k := range cur.Revoked {
		if !revoked[k] {
			d.Revoked = append(d.Revoked, k)
		}
		delete(revoked, k)
	}
	return d, len(revoked) == 0
}

// Peer is the node called name in the view.
func (v GossipView) Peer(name string) (GossipPeer, bool) {
	for _, p := range v.Nodes {
		if p.Name == name {
			return p, true
		}
	}
	return GossipPeer{}, false
}

// MemberView is one line of `meshd members`.
type MemberView struct {
	Name    string    `json:"name"`
	Address string    `json:"address"`
	State   string    `json:"state"`
	Since   time.Time `json:"since"`
}

// MembersView is `meshd members`: this node's gossip view.
type MembersView struct {
	Node    string       `json:"node"`
	Running bool         `json:"running"`
	Members []MemberView `json:"members"`
	// DetectionBound is the longest memberlist may take, with its timers and this many members,
	// to find a dead member failed.
	DetectionBound string `json:"detection_bound,omitempty"`
	// Rejected counts the reports this node rejected, by reason.
	Rejected map[string]uint64 `json:"rejected"`
}

// LeaveView is what `meshd leave` answers before the agent stops.
type LeaveView struct {
	Left bool   `json:"left"`
	Node string `json:"node"`
}
