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
