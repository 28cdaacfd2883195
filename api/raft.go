package api

// PeerView is one Raft server.
type PeerView struct {
	Node     string `json:"node,omitempty"`
	ID       string `json:"id"`
	Address  string `json:"address"`
	Suffrage string `json:"suffrage"`
	Leader   bool   `json:"leader"`
}

// RaftStateView is one server's Raft as it sees it: `meshd operator raft list-peers` and the
// autopilot ask it of each server.
type RaftStateView struct {
	Node  string `json:"node"`
	ID    string `json:"id"`
	State string `json:"state"`
	Term  uint64 `json:"term"`
	// LastIndex is the last entry in its log; CommitIndex the last it knows committed; Applied
	// the last its record applied.
	LastIndex   uint64 `json:"last_index"`
	CommitIndex uint64 `json:"commit_index"`
	Applied     uint64 `json:"applied"`
	// LastContact is how long ago it last heard from the leader ("" on the leader).
	LastContact string `json:"last_contact,omitempty"`
	Leader      string `json:"leader,omitempty"`
}

// RemovePeerView is what remove-peer did.
type RemovePeerView struct {
	Node  string `json:"node"`
	ID    string `json:"id"`
	Index uint64 `json:"index"`
	// Voters are the voters left.
	Voters []string `json:"voters"`
	// Warning is said when the voters left are an even count.
	Warning string `json:"warning,omitempty"`
}

// TransferRequest names the server to hand leadership to; empty is the control-node.
type TransferRequest struct {
	Node string `json:"node,omitempty"`
}

// TransferView is what transfer-leader did.
type TransferView struct {
	From string `json:"from"`
	To   string `json:"to"`
	// Note says what happens next (the control-node takes leadership back once current).
	Note string `json:"note,omitempty"`
}
