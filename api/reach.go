package api

// ReachCheck is one port probed in one direction.
type ReachCheck struct {
	From    string `json:"from"`
	To      string `json:"to"`
	Port    string `json:"port"` // bus or gossip
	Proto   string `json:"proto"`
	Number  uint16 `json:"number"`
	Address string `json:"address"`
	OK      bool   `json:"ok"`
	Error   string `json:"error,omitempty"`
}

// ReachView is `meshd check reach`.
type ReachView struct {
	From   string       `json:"from"`
	To     string       `json:"to"`
	Checks []ReachCheck `json:"checks"`
	// Reverse is why NODE → this node could not be checked (NODE's bus was not reached), if so.
	Reverse string `json:"reverse_error,omitempty"`
	// Blocked lists every check that failed, in words.
	Blocked []string `json:"blocked"`
}

// ReachRequest asks a node to probe the asker's ports.
type ReachRequest struct {
	Target GossipPeer `json:"target"`
}
