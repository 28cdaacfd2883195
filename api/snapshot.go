package api

// RestoreView is what POST /v1/snapshot (`meshd snapshot restore`) answers once the record was
// replaced through Raft: the index and the count of nodes it has now. GET /v1/snapshot answers
// the record itself, as fsm writes its snapshot.
type RestoreView struct {
	Index    uint64 `json:"index"`
	Nodes    int    `json:"nodes"`
	Restored bool   `json:"restored"`
}
