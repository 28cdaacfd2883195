// Package chaos owns fault injection over the lab bed and the chaos tests: random faults under a
// real workload of operator commands, and a checker that cannot be fooled.
//
// The primitive events are methods of lab.Machine (Stop, Boot, Reboot, CutOff, Restore,
// StartService, StopService), because each needs the lab's own state (the machine's namespaces,
// its processes, its port on the underlay's switch). This package composes them into faults
// (Injector: an agent SIGKILLed, a machine stopped and booted or rebooted, cut off, a server
// partitioned from the others, an agent crashed at a named crash point), drives a seeded workload
// (Workload) that records every command's call, answer and time in a History, and checks it:
// Model is the record as the operator sees it, and porcupine searches for an order of the
// commands that the model accepts; an acknowledged command lost or a command applied twice has
// none. Execute is one run: the hub adopted on a fresh chaos lab (Scenario) and its tunnel taken
// on the running mesh under a fault of its own, the rest of the mesh raised, then the workload
// (random clients, and the Migration: p1 enrolled and migrated, the hub and the other servers
// previewed and converged) under the scheduler's faults, some aimed at the migration's steps;
// after every fault the invariants that hold at every moment (the history, held files, the store
// unreachable from outside, the service through the tunnel), at the end all of them (modes, a
// second pass writing nothing, openings back after a reboot too). docs/chaos.md says how to run it
// and read a failure. The lab bed itself is package lab; the acceptance tests are package e2e.
package chaos
