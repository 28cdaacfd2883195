// Package pass is the vocabulary the host's core and its drivers share, below both: one pass
// as a driver gets it (Pass), what a driver reports of it (Outcome), the record store as a
// driver sees it (Records: its own bucket of keys and values), and the crash seam (CrashEnv,
// Crasher) the crash-safety tests arm. It knows no resource kind.
//
// # Crash points
//
// For crash-safety tests, setting the environment variable MESHD_TEST_CRASH_AT (CrashEnv) to a
// point's name makes the process SIGKILL itself when it reaches that point ("name#n": the n-th
// time). Each part that has points (the host's files, each driver) holds a Crasher of its own;
// the points are listed in the doc of the package that reaches them.
package pass
