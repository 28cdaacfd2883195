// Package tunnel is the host's tunnel driver (kind "tunnel", over wg/): it raises the private
// network's interface from the declaration's Tunnel section rather than from resources, or takes
// a found WireGuard interface over in place (ADR 0105), and reports report.TunnelDetail. Its
// private key is sealed under the node's seal key (SealedKey).
//
// # Crash points
//
// It reads pass.CrashEnv inside a takeover of a found WireGuard interface (a hub's at
// genesis or `meshd tunnel take`, a spoke's at `meshd tunnel take SPOKE IFACE`):
//
//	tunnel.after-seal-key          the found private key sealed, the takeover not yet recorded; nothing stopped
//	tunnel.after-record-takeover   the takeover recorded in the record store, the found interface still up
//	tunnel.after-stop-found        the found link deleted, the mesh's not up: the peers reach nothing
//	tunnel.after-takeover          the mesh's interface up in its place, the found unit not yet disabled
//
// A new agent finishes each: a takeover not recorded, or recorded while the found interface is
// still up, is made again; after the found link went, the mesh's interface is raised (or attached)
// with the sealed key and the found unit disabled.
package tunnel
