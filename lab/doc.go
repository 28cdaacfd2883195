// Package lab owns the lab bed: machines built on this one host that look the way the
// predecessor leaves them, so every end-to-end and chaos test runs against a firewall, a tunnel,
// containers and files that were not put there by meshd.
//
// A lab machine is a network namespace (ml-LAB-MACHINE) plus its own mount and UTS namespaces,
// kept alive by bind mounts under the lab's state directory. In its mount namespace the machine
// has its own /etc, /usr/local and /var/lib (overlays whose upper layers live in the state
// directory, so they survive a reboot) and a fresh tmpfs on /run (so /run/wireguard, /run/meshd
// and the Docker socket are the machine's, and a reboot clears them). Userspace WireGuard is why
// this matters: wgctrl finds wireguard-go devices through sockets in /var/run/wireguard, which
// would otherwise be shared by every namespace on the host.
//
// Machines share an underlay (198.51.100.0/24) on a bridge that lives in a namespace of its own
// (ml-LAB-sw), so no lab machine has a route to anything outside the lab. A machine boots like a
// small Debian system: it honours the units enabled in its /etc/systemd/system/*.target.wants
// (ufw, nftables, wg-quick@IF, docker, and any unit with an ExecStart such as the meshd agent), in
// the order a real boot would reach them. Stop, Reboot, CutOff and Restore act on a machine the
// way the real events would.
//
// A machine can instead be booted by real systemd (MachineSpec.Systemd, sdmachine.go): the same
// network namespace on the same underlay, but a Debian root under systemd-nspawn (lab/systemd)
// whose units, ordering, Restart= and reboots are systemd's own. Slower to raise, so the fast
// tests keep the namespace machines.
//
// Probes are the lab's instruments: continuous, timestamped calls recorded to files
// (labsvc probe), summarised as successes, failures and the longest outage.
//
// Everything the lab creates is written to a state file first, so Down cleans a lab whose
// driving process died, and Down is idempotent.
package lab
