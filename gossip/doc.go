// Package gossip owns meshd's membership and the host reports that travel
// between agents.
//
// It wraps hashicorp/memberlist: who is in the mesh, who is alive, who failed
// (detected by memberlist's probes and suspicion timer) and who left on
// purpose (a leaving node sends every member a signed leave intent and waits
// for their acknowledgements before memberlist's own leave goes out, so the
// others record "left", not "failed"). Every message is encrypted with
// memberlist's keyring and GossipVerifyIncoming/Outgoing are on, so a
// machine without a key on the ring cannot join or listen in. The keyring can
// be rotated on a running mesh (install, use, remove) without a restart; this
// package does the local side, the agent fans an operation out to every
// member.
//
// The host reports ride on top. A report is opaque to this package: the
// agent hands in the latest one with Publish, gossip signs it with the node's
// enrolled ed25519 identity over a canonical envelope (node, signer, a
// monotonic sequence, time, SHA-256 of the payload) and sends it where it is
// read: to each live server (Config.Server), in one datagram when it fits,
// else over TCP, and to no other member. A server keeps every node's report,
// any other member its own only; what every member gossips is membership
// (memberlist's, with each member's identity key in its metadata) and, in
// push-pull, its own report's version, so a member's cost does not grow with
// the reports of a fleet it never reads. The servers share the reports by a
// path of their own (route.go): two seconds after it starts (a restarted
// server holds nothing) and each push-pull interval after, a server sends
// each other server a digest of what it keeps and is sent the reports it
// lacks; a server that hears a newer version asks the
// node for its report. A receiver
// asks the caller which key each node enrolled with (Config.Verify; servers
// take it from the record) and keeps a report only if that key signed it for
// that node. Anything else — a wrong key, a truncated or garbled envelope, a
// node publishing under another node's name, an unknown node — is rejected,
// counted by reason and never kept, and an older sequence never replaces a
// newer one. The gossip key only says who may talk; the identity says who
// said what. That is how DESIGN.md invariant 8 holds here: a member holding
// the gossip key still cannot forge another node's report, so it cannot move
// that node's keys.
//
// A member keeps one report per node in a store (store.go) where each change
// takes the next index: a reader asks for what changed since the index it
// last saw (ReportsSince) and pays for the changes only, never for the
// fleet, and one node's report is read alone (Report). A message is checked
// against what is kept by the digest of its bytes, one lookup however many
// reports are kept. That is how a server with a thousand nodes works on what
// changed rather than reading the fleet on every tick.
//
// What a member's reports cost it is counted (Stats: reports sent, relayed, received and held,
// its own and other nodes', and the largest push-pull state each way), so a fleet simulator can
// show that a client carries no other client's report.
//
// A node removed from the mesh has its identity key revoked (Config.Revoked).
// Each member carries its identity key in memberlist's node metadata, and
// memberlist's alive delegate refuses a member announcing a revoked one: it
// cannot refute its removal, join again, or be learned by a member that
// starts later. memberlist has no way to push out a member that still
// answers its probes, so this package does it in its own view: such a member
// reads StateRemoved at once, every report its key signed is dropped and no
// longer passed on, and what it sends after is rejected.
//
// Anyone who reaches the gossip port can make memberlist log a line per datagram or connection
// (one no key decrypts, a bad label), each naming its sender. memberlist's logger therefore goes
// through internal/ratelog by kind, not by text, so a flood from many addresses and ports comes
// to a few lines a minute; what was refused before any key let it in is counted by kind
// (Refused, the agent's meshd_gossip_rejected_total).
//
// Ping speaks just enough of memberlist's wire protocol (an encrypted ping)
// to tell whether a member's udp gossip port answers; `meshd check reach`
// uses it so the agent knows nothing of memberlist's packets.
package gossip
