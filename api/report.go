package api

import (
	"encoding/json"
	"reflect"
)

// A host report (report.Report) travels as it is: a client posts it to a server's bus (POST
// /v1/report) while its gossip reaches no server, and NodeView carries it. Its Kinds hold each
// driver's part, a typed value in the agent that made the report (and in a server's fleet, which
// types each part once as it decodes a report) and generic JSON once it came by gossip or the bus.

// DecodeInto decodes a driver's part of a report into its type; false when there is none or it
// does not decode. A part already of that type (T or *T for into's *T) is copied, not decoded:
// the copy shares its slices and maps with the report, which its reader must not change.
func DecodeInto(raw any, into any) bool {
	if raw == nil {
		return false
	}
	if iv := reflect.ValueOf(into); iv.Kind() == reflect.Pointer && !iv.IsNil() {
		rv := reflect.ValueOf(raw)
		switch rv.Type() {
		case iv.Type():
			if rv.IsNil() {
				return false
			}
			iv.Elem().Set(rv.Elem())
			return true
		case iv.Type().Elem():
			iv.Elem().Set(rv)
			return true
		}
	}
	b, err := json.Marshal(raw)
	return err == nil && json.Unmarshal(b, into) == nil
}
