// Package wg owns the private network's WireGuard on one machine: reading a tunnel that was
// found there, raising the mesh's own interface, keeping its peers equal to a desired set, and
// taking a found tunnel over in place (ADR 0105).
//
// Why it is one package: those four acts share the same facts — a private key, a listening
// port, an address and its range, and peers by public key — and the same two traps measured on
// the machines meshd is written for. First, there is no kernel WireGuard there, so the mesh's
// interface is usually wireguard-go embedded in meshd over a TUN device; wgctrl finds such a
// device only through its UAPI socket in /var/run/wireguard, and wireguard-go binds its UDP
// port only while the device is up, so a found interface holding the port must be gone before
// the mesh's can bind it. Second, a peer that is given no endpoint and no persistent keepalive
// takes ~15 s to resume after the hub changes hands; every peer this package configures gets its
// endpoint when known and a keepalive.
//
// What it reads and what it never touches: Discover reads a found interface through wgctrl
// (key, port, peers with their handshakes and bytes), netlink (the addresses, hence the range)
// and its wg-quick file when there is one. The wg-quick file is only ever read: a takeover stops
// the found interface by deleting its link (a userspace wireguard-go exits when its TUN goes),
// which leaves its configuration on disk byte for byte, so the predecessor's own tools can raise
// it again.
//
// Where the device lives: embedded in the calling process (Raise with no Config.Spawn), or in a
// device process of its own (RunDevice, started by DeviceCommand.Spawn), configured from outside
// through its UAPI socket, so the tunnel outlives a restart of the process that configures it;
// Attach takes such a running device back without touching what it already has. A device
// process of another program (the old binary an upgrade leaves running) is not attached to but
// replaced, the way a takeover replaces a found interface (Supersede, handover.go).
//
// Peers change as a diff (planPeers): only the peers that differ are added, updated or removed,
// never the whole list, so an unrelated peer's session survives a change.
//
// The package acts in the network namespace of the calling process; it does not enter
// namespaces itself. Its integration tests run each machine's side in a helper process started
// inside that machine's network and mount namespaces (see lab_test.go for why).
package wg
