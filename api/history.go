package api

import "meshd/fsm"

// HistoryView is `meshd history`: the record's events, oldest first, as asked (a node, a
// since), and the bounds the record keeps them to.
type HistoryView struct {
	Index  uint64      `json:"index"`
	Events []fsm.Event `json:"events"`
	// Count and Age are the bounds in force (fsm.HistoryKeep with the defaults filled in).
	Count int    `json:"keep_count"`
	Age   string `json:"keep_age"`
}
