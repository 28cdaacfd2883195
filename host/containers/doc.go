// Package containers is the host's container driver (kind "container"): it converges the
// declared containers through a container engine (container/), holds what it finds until its
// module is taken, and replaces a found container at a take in stages. It keeps its records in
// the host's record store (pass.Records) and reports report.ContainerReport.
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
//  2. cut over: the container's take is recorded (record.Cutover); while the found
//     container still serves it is given restart policy "no" (a reboot must not start it beside
//     its replacement; its own is recorded) and moved aside to NAME.meshd-replaced-<short id>,
//     and the new one moved to NAME; only then is the found one stopped and the new one started,
//     so the outage is the swap (stop + start) and nothing more; then, after every container of
//     the module, its files are written.
//  3. put back on failure: a container that cannot be cut over has the new one removed and the
//     found one renamed back, given its restart policy back and started; the module's files are
//     then not written. A file that cannot be written has the module's files already written
//     restored from their recorded latest bytes (held again) and its containers stepped back
//     (Driver.StepBack). The report names the resource and why. A failed cutover stops the
//     found container, so it is tried again only after a wait (takeWaits: 30 s, doubling to 30
//     minutes) unless the declaration or the found container changes.
//
// The replaced container is kept stopped under its moved-aside name until the operator removes
// it, so stepping back is a restart (`docker rename`, `docker start`), not a recovery; `meshd node
// original NODE container NAME` shows its configuration and that name. A process killed during
// a take ends, on restart, in the taken state: a recorded cutover is finished (the found
// container already aside is left there, a half-made new one is made again), never a name
// serving nothing.
//
// # Crash points
//
// It reads pass.CrashEnv too; within a take's cutover:
//
//	take.container.after-prepare         the new container created under NAME.meshd-new, not started
//	take.container.after-record-cutover  the cutover recorded, the found container untouched
//	take.container.after-move-aside      the found container moved aside, still running; nothing at NAME
//	take.container.after-move-new        the new container at NAME, not started; the found one still running aside
//	take.container.after-stop            the found container stopped aside, the new one not yet started
//	take.before-write-files              the module's containers cut over, its staged files not written
package containers
