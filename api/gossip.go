package api

import "time"

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
