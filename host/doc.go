// Package host is the host reconciler: it turns a node's declaration (fsm.Declaration) into the
// machine's state, remembers in its record store what it wrote and what it found, and reports what
// it saw. It owns the words found, held and taken on the machine (ADR 0100); it knows no firewall
// or container syntax. Files are its own first kind; containers and openings are Drivers of this
// package (ContainerDriver, OpeningDriver), called with the declared resources of their kind on
// every pass, which speak to the machine through container/ and netfilter/. The private network's
// interface is a Driver too (TunnelDriver, kind "tunnel", over wg/): it reads the declaration's
// Tunnel section rather than resources, and takes a found tunnel over in place (ADR 0105).
//
// # Decide, then act
//
// Every kind looks first (the record store, the path, the engine, the found firewall), then asks a
// pure function what to do — decideFile, decideContainer and decideUndeclared, decideOpenings:
// functions of the records, what was observed, the declaration, taken and the node's mode that
// return a small action value — and only then acts on it. The drivers reach the machine through
// interfaces this package owns, holding only what it uses: engine (what ContainerDriver needs of
// container.Engine) and packetFilter (what OpeningDriver needs of netfilter/, kernelFilter being
// the real one). The unit tests put in-memory fakes behind them (fakes_test.go) and cover every
// row of the adopted/converged rules without root in milliseconds; the root tests run the same
// rules against the real engine and kernel.
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
// # A take is staged
//
// Taking a module prepares everything before it changes anything that serves, then cuts over;
// within one pass, for each module:
//
//  1. prepare: each found container to replace gets its new container created, not started,
//     under NAME.meshd-new (the image must be there); each file that replaces a found one is
//     rendered and the found file's latest bytes, mode and owner recorded. A container that
//     cannot be prepared stops the module's take with nothing touched.
//  2. cut over: the container's take is recorded (containerRecord.Cutover); while the found
//     container still serves it is given restart policy "no" (a reboot must not start it beside
//     its replacement; its own is recorded) and moved aside to NAME.meshd-replaced-<short id>,
//     and the new one moved to NAME; only then is the found one stopped and the new one started,
//     so the outage is the swap (stop + start) and nothing more; then, after every container of
//     the module, its files are written.
//  3. put back on failure: a container that cannot be cut over has the new one removed and the
//     found one renamed back, given its restart policy back and started; the module's files are
//     then not written. A file that cannot be written has the module's files already written
//     restored from their recorded latest bytes (held again) and its containers stepped back
//     (ContainerDriver.StepBack). The report names the resource and why. A failed cutover stops the found container, so it is
//     tried again only after a wait (takeWaits: 30 s, doubling to 30 minutes) unless the
//     declaration or the found container changes.
//
// The replaced container is kept stopped under its moved-aside name until the operator removes
// it, so stepping back is a restart (`docker rename`, `docker start`), not a recovery; `meshd node
// original NODE container NAME` shows its configuration and that name. A process killed during
// a take ends, on restart, in the taken state: a recorded cutover is finished (the found
// container already aside is left there, a half-made new one is made again), never a name
// serving nothing.
//
// When a module is unassigned, a held file stays where it is (still reported held, Unassigned)
// and is never removed; a file the host created is removed and its record dropped; a file that
// replaced a found one stays, its original kept.
//
// A declared path that is a directory, a symlink leading out of the declared path's directory
// (never followed), something other than a regular file, unreadable, or on a read-only file
// system fails on its own, named with its reason in Report.Errors; every other resource still
// converges and nothing recorded is lost.
//
// # The loop
//
// Run is level-triggered: it reconciles on every new declaration and on a timer (Config.Interval,
// 10 s by default). A pass with nothing to do changes nothing: no file is written and no record
// store write transaction is begun (records are read in one read-only transaction per pass).
//
// # Crash points
//
// For crash-safety tests, setting the environment variable MESHD_TEST_CRASH_AT (CrashEnv) to a
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
// then the write points of each staged file. The container driver reads CrashEnv too.
//
// The opening driver reads it as well, for the flip (flip.go) and the return:
//
//	flip.after-filter      the derived filter loaded, the found firewall still active
//	flip.before-retire     the retirement recorded in the record store, the found firewall untouched
//	flip.after-retire      the found firewall retired and recorded, the flip not yet reported done
//	return.after-restore   the found firewall enabled again, its record kept, the filter still loaded
//	return.after-guard     the guard loaded again, the derived filter still loaded
//
// And the tunnel driver (tunnel.go), inside a takeover of a found WireGuard interface (a hub's at
// genesis or `meshd tunnel take`, a spoke's at `meshd tunnel take SPOKE IFACE`):
//
//	tunnel.after-seal-key          the found private key sealed, the takeover not yet recorded; nothing stopped
//	tunnel.after-record-takeover   the takeover recorded in the record store, the found interface still up
//	tunnel.after-stop-found        the found link deleted, the mesh's not up: the peers reach nothing
//	tunnel.after-takeover          the mesh's interface up in its place, the found unit not yet disabled
//
// A new agent finishes each: a takeover not recorded, or recorded while the found interface is
// still up, is made again; after the found link went, the mesh's interface is raised (or attached)
// with the sealed key and the found unit disabled.
//
// # The flip
//
// A declaration with a pending flip (fsm.Declaration.Flip) asks for the mode it flips to. To
// converged, the opening driver loads the derived filter, then retires the found firewall
// (netfilter.Retire: disabled, never flushed), recording the retirement before it starts and
// what Restore needs once it is done. To adopted, it restores the retired firewall first, then
// loads the guard and unloads the filter. The report's opening part says whether the flip is done
// (OpeningDetail.Flip) and which firewall is retired (OpeningDetail.Retired); a server records the
// node's new mode once it reads the flip done.
package host
