// Package setup is what runs once on a machine before its daemon: genesis (a new mesh's
// control-node: its secrets, a Raft group of one bootstrapped through agent/raftnode, the
// record's first entry), join (enrolling at a server with a token, the request signed with the
// node's new key (enrolproof.go), resumed from the same machine when its answer was lost), the
// preflight that checks the ports, firewall, tunnel and container engine first, the
// node file that keeps the node's identity in its data dir, reading a found tunnel to take over,
// and the meshd-boot unit that loads meshd's firewall table at boot.
//
// The arrows: the agent imports setup for the node file, enrolment and the port checks it runs
// again when a setting changes; setup never imports package agent. Both import agent/raftnode,
// which sits beneath them: genesis bootstraps the group of one there before any agent runs, and
// the node file names the node as Raft knows it (NodeFile.RaftSelf). raftnode imports neither.
package setup
