// Package systemd owns the lab's systemd machines: a Debian root booted by real systemd under
// systemd-nspawn, in a lab network namespace, where units, Restart=, ordering and a reboot are
// systemd's own rather than the namespace machines' unit runner.
//
// The root is built once by scripts/labroot.sh (debootstrap, cached under /var/cache/meshd-lab by
// a hash of its package list; root-current names it). Each machine boots from an overlay of it
// whose upper layer is the machine's own temporary directory, so a machine never changes the
// cache and what it writes survives its reboots. A machine is run by a supervisor of its own (a
// detached shell loop around nspawn, its state in files in the machine's directory), so it
// outlives the process that booted it and Attach finds it again. A reboot is `systemctl reboot`
// inside: nspawn exits 133, and the supervisor clears what a reboot loses and boots the machine
// again on the same overlay. Commands enter the machine with
// nsenter into its PID 1's namespaces and a clean environment (env -i), so nothing of the
// caller's leaks in.
//
// Each machine runs its own Docker engine (Debian's docker.io in the root), so a module's
// container sees the machine's files; Boot gives it what the engine needs under nspawn.
//
// The namespace machines of package lab stay the fast ones; a systemd machine is for what only
// systemd shows (the package's unit, a real reboot).
package systemd
