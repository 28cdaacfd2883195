// Package tunnel is the host's tunnel driver (kind "tunnel", over wg/): it raises the private
// network's interface from the declaration's Tunnel section rather than from resources, or takes
// a found WireGuard interface over in place (ADR 0105), and reports report.TunnelDetail. Its
// private key is sealed under the node's seal key (SealedKey).
//
// The device process outlives the agent (the unit's KillMode=process), so an upgrade's restart
// leaves the old binary's running. The new agent does not attach to it: it replaces it with one
// of its own program, with the takeover's own short gap (handOver, wg.Supersede), so no process
// of a program no longer installed is left, and a device serving another name (the first
// packaged builds' meshd0) does not hold the port the mesh's interface needs.
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
