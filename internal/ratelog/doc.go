// Package ratelog bounds how often each kind of line reaches a log, for lines anyone on the
// network can cause (a refused enrolment, a refused Raft handshake, junk on the gossip port): a
// flood of them cannot fill the disk. A kind is the line's message, or one the caller names when
// the text varies from line to line (memberlist's lines carry the sender's address): a flood
// from many addresses is still one kind. The kinds kept are bounded too. Clip cuts a caller's
// text before it goes into such a line.
package ratelog
