// Package api is the wire contract: the request, view and result types that cross the operator
// socket or the bus, and the JSON-over-HTTP helper every caller goes through (Endpoint).
package api
