// Package ratelog bounds how often each kind of warning reaches a log, for lines anyone on the
// network can cause (a refused enrolment, a refused Raft handshake): a flood of them cannot fill
// the disk. Clip cuts a caller's text before it goes into such a line.
package ratelog
