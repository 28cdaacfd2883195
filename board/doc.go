// Package board says where each node stands in its migration: a pure function of the record and
// the nodes' last host reports (and the time now) that gives, per node, its steps (enrolled,
// adopted, tunnel taken, each assigned module prepared then taken, converged), what is in the way
// of its next step, how long it has been adopted, and a summary line for the whole mesh. A node
// converged since it enrolled never was adopted: its adopted step is skipped ("joined
// converged"), neither done nor next. It reads no clock and changes nothing; `meshd status` and
// the status page show what it returns. Cache builds the same board keeping each node's row
// between builds, built again only when the record's index or the sequence of the node's report
// moved: a server's looks at a fleet at rest build no row again (issue 37). The shape it returns
// is api's (api.Board): it reads the converge preview through host/preview, and a reader of the
// API must not link that.
package board
