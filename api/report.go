package api

import "encoding/json"

// A host report (report.Report) travels as it is: a client posts it to a server's bus (POST
// /v1/report) while its gossip reaches no server, and NodeView carries it. Its Kinds hold each
// driver's part, a typed value in the agent that made the report and generic JSON once it came
// by gossip or the bus.

// DecodeInto decodes a driver's part of a report into its type; false when there is none or it
// does not decode.
func DecodeInto(raw any, into any) bool {
	b, err := json.Marshal(raw)
	return err == nil && raw != nil && json.Unmarshal(b, into) == nil
}
