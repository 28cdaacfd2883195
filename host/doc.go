// Package host is the host reconciler's core: it turns a node's declaration (fsm.Declaration)
// into the machine's state, remembers in its record store what it wrote and what it found, and
// reports what it saw (report.Report). It owns the loop, the record store, the files (its own
// first kind), the drift watches (inotify for files, and each driver's own) and the order of a
// pass. It owns the words found, held and taken on the machine (ADR 0100); it knows no firewall
// or container syntax.
//
// The other kinds are Drivers, handed to Open by the agent: host/containers, host/openings and
// host/tunnel, each over the package that speaks its engine (container/, netfilter/, wg/). They
// share with the core only the vocabulary of host/pass (a pass, its outcome, the records, the
// crash seam) and the report types of package report, so the arrows run one way: agent, core,
// drivers, pass and report.
//
// # Decide, then act
//
// Every kind looks first (the record store, the path, the engine, the found firewall), then asks a
// pure function what to do (decideFile here; decideContainer, decideUndeclared and decideOpenings
// in the drivers): functions of the records, what was observed, the declaration, taken and the
// node's mode that return a small action value; only then it acts on it. The drivers reach the
// machine through interfaces they own, holding only what they use; the unit tests put in-memory
// fakes behind them and cover every row of the adopted/converged rules without root in
// milliseconds; the root tests run the same rules against the real engine and kernel.
//
// Every value the host needs comes in the declaration, the mesh's own ports included
// (fsm.Declaration.Mesh); the host reads no catalogue.
//
// # The record store
//
// bbolt at DATA/host.db. For each declared path (never the root prefix) it keeps what the host
// wrote (module, content hash, when) and what it found (module, hash, mode, owner, when, and the
// original bytes, kept after the file is replaced; and, once a take replaced it, the latest
// bytes, mode and owner seen just before). Every write transaction is committed and fsync'd
// before the host acts on it. A file the host wrote in an earlier life of the node has a written
// record, so it is not found after a restart.
//
// Every value in it (those records, the bytes, each driver's records: a found container's
// configuration and env) is sealed under the node's seal key for its bucket and key; the keys,
// declared paths and container names, are not. A store written before the seal is sealed once
// when the host opens it: its values in place, then the file rewritten fresh (pki.RewriteSealed)
// so no page bolt freed keeps them in clear.
//
// # Files
//
// Found means present at a declared path with no record. On an adopted node, for a module not yet
// taken:
//   - a found file's original is recorded first, then the file is held: never touched, reported
//     in Report.Held with the recorded and the current hash; one whose content changes is reported
//     "changed by something else" (Changed) and never reverted;
//   - a declared file that does not exist is created (assigning prepares) and recorded as written.
//
// Taking a module (Resource.Taken), and every module on a converged node, converges its files: a
// found file is recorded first, then replaced; a held file is replaced only now, its original kept
// (Original). A write is atomic: the written record is committed, a temporary file in the same
// directory is written, given the declared mode and owner and fsync'd, renamed over the file, and
// the directory fsync'd. create_once files are written when missing and never rewritten.
//
// Every found file's original is kept with its mode and owner. A take records, just before its
// cutover, the latest bytes, mode and owner of every held file it replaces (Host.Latest,
// Host.FileOriginal) beside the original: both are kept, the original and the last seen.
//
// When a module is unassigned, a held file stays where it is (still reported held, Unassigned)
// and is never removed; a file the host created is removed and its record dropped; a file that
// replaced a found one stays, its original kept.
//
// A confined resource (fsm.Resource.Confined: a module the operator has not said may be root) is
// kept to its module's own places where its path leads on the machine: a file is judged where the
// safe walk of its path ends, a mount where the engine would find it (pass.Confine), and one that
// leads out is that resource's error before anything is recorded or written.
//
// A declared path that is a directory, a symlink leading out of the declared path's directory
// (never followed), something other than a regular file, unreadable, or on a read-only file
// system fails on its own, named with its reason in Report.Errors; every other resource
// still converges and nothing recorded is lost.
//
// # A take is staged
//
// Taking a module prepares everything before it changes anything that serves, then cuts over;
// within one pass, for each module: each file that replaces a found one is rendered and the found
// file's latest bytes, mode and owner recorded; the drivers prepare and cut over their resources
// (host/containers says how); then, after every container of the module, its files are written.
// A container that cannot be cut over blocks the module's files. A file that cannot be written
// has the module's files already written restored from their recorded latest bytes (held again)
// and its containers stepped back (the drivers' StepBack). The report names the resource and why.
//
// # The loop
//
// Run is level-triggered: it reconciles on every new declaration and on a timer (Config.Interval,
// 10 s by default). A pass with nothing to do changes nothing: no file is written and no record
// store write transaction is begun (records are read in one read-only transaction per pass).
//
// # Crash points
//
// For crash-safety tests, setting the environment variable MESHD_TEST_CRASH_AT (pass.CrashEnv) to a
// point's name makes the process SIGKILL itself when it reaches that point ("name#n": the n-th
// time). The points, in the order a write passes them:
//
//	hold.before-record-original   a found file on an adopted node, before its original is recorded
//	hold.after-record-original    its original recorded (committed), before it is reported held
//	take.before-record-original   a found file about to be replaced, before its original is recorded
//	take.after-record-original    its original recorded (committed), nothing written yet
//	take.after-record-written     the written record committed, the file not yet touched
//	take.after-temp-write         the temporary file written and fsync'd, not yet renamed
//	take.after-rename             renamed over the file, the directory not yet fsync'd
//	take.after-dir-sync           the write complete
//	unassign.after-remove         a created file removed, its written record not yet dropped
//
// The take.* points above are on every write (a create on assignment too); a take is where they
// matter. A staged take (see above) passes these too, in this order:
//
//	take.before-record-latest            a held file to replace, before its latest bytes are recorded
//	take.after-record-latest             its latest bytes recorded; its write staged
//	take.container.after-prepare         the new container created under NAME.meshd-new, not started
//	take.container.after-record-cutover  the cutover recorded, the found container untouched
//	take.container.after-move-aside      the found container moved aside, still running; nothing at NAME
//	take.container.after-move-new        the new container at NAME, not started; the found one still running aside
//	take.container.after-stop            the found container stopped aside, the new one not yet started
//	take.before-write-files              the module's containers cut over, its staged files not written
//
// then the write points of each staged file. The drivers have points of their own (see their
// package docs); pass.Crasher is the seam.
package host
