// Package agent is the daemon's wiring: the node's identity on disk, Raft with raft-boltdb on
// servers, the operator's API on a local unix socket, the watch on the node's own declaration,
// and the lifecycle around them (genesis, start, graceful stop on SIGTERM, restart with nothing
// lost).
//
// Every operator command that changes the record is acknowledged only after Raft committed it and
// the record applied it (invariant 7): the API answers from the apply future's response, never
// before. Reads are served from the local record.
package agent
