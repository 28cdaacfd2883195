// Package labtest brings the lab bed (package lab) up for a test: Up starts a scenario and
// tears it down when the test ends, Require applies the root-or-CI rule to the lab's
// prerequisites, and Meshd (Command for any other of the module's commands) builds the meshd binary the
// acceptance tests install on lab machines.
//
// It is apart from lab because these helpers take a testing.TB, and lab is a library that
// cmd/meshlab and the demo link without the testing package.
package labtest
