// Package chaos owns fault injection over the lab bed: killing, rebooting and cutting off lab
// machines while the mesh runs, crash points, and the chaos tests that assert what the mesh
// keeps serving through them.
//
// The primitive events are methods of lab.Machine (Stop, Reboot, CutOff, Restore, StopService),
// because each needs the lab's own state (the machine's namespaces, its processes, its port on
// the underlay's switch). This package is where the faults composed from them, and their tests,
// grow; until the chaos issue adds them it holds this statement of ownership only. The lab bed
// itself is package lab; the acceptance tests are package e2e.
package chaos
