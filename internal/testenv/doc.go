// Package testenv is the one place the root tests of every package get their environment from:
// the root-or-CI rule for prerequisites (skip with a printed reason on a developer's machine,
// fail under CI=true, where a missing prerequisite means the suite did not run), network
// namespaces and entering them, a mount namespace held open for a test, a private Docker engine in
// a network namespace of its own, containers removed by name when a test ends, and polling with a
// deadline.
//
// It exists so netfilter, host, container, cmd/meshd and the lab's tests do not each carry a copy
// of the same namespace and engine plumbing. It imports testing and is for _test.go files only.
package testenv
