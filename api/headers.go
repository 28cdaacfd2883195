package api

// The headers the record's answers carry.
const (
	// HeaderIndex is the record's index an answer was made at; on a write, the index of the command
	// committed and applied.
	HeaderIndex = "X-Meshd-Index"
	// HeaderServedBy names the server that answered, and whether it leads.
	HeaderServedBy = "X-Meshd-Served-By"
	// HeaderStale says how far behind a follower's own record (asked with ?stale=1) may be.
	HeaderStale = "X-Meshd-Stale"
	// HeaderNotProposed marks a not-leader answer given before anything was proposed: the forwarder
	// may send it again to the new leader without a command being applied twice.
	HeaderNotProposed = "X-Meshd-Not-Proposed"
	// HeaderForwardedBy names the server that forwarded a request to the leader; such a request is
	// not forwarded again.
	HeaderForwardedBy = "X-Meshd-Forwarded-By"
	// HeaderRemoteAddr is the address an enrolment came from, as the forwarding server saw it.
	HeaderRemoteAddr = "X-Meshd-Remote-Addr"
	// HeaderAskedBy says who gave an operator request ("operator NAME", "root on NODE's socket"):
	// set by the socket or the bus (/v1/op) itself, kept only when a server forwards it. The
	// record keeps it as the command's By.
	HeaderAskedBy = "X-Meshd-Asked-By"
)
