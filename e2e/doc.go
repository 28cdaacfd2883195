// Package e2e holds the acceptance tests: each walks a seed's "How it is checked" (docs and
// /work/shared/seeds) end to end on the lab bed (package lab), with the real meshd binary
// installed on lab machines — the whole migration as an operator runs it, with a ufw, an nftables
// and a plain-iptables hub (migration_test.go: both ADRs' checks walked in the migration's order,
// the probes read back per step), the flip and the return, enrolment with adopted tokens, gossip liveness and signed reports, key rotation, failure
// detection and leave.
//
// Each test raises its own lab (a random name, its own directory and namespaces, each machine
// its own Docker engine), so the tests run in parallel (t.Parallel): they wait on machines far
// more than they compute, and in turn they took most of the suite's wall time. A helper's state
// shared between tests is kept per lab.
//
// It is apart from lab, which is the bed these tests stand on, and from chaos, which owns the
// faults injected into it. The package has no code outside its tests.
package e2e
