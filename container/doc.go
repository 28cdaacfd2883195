// Package container drives the Docker engine on one machine for the host reconciler: it creates,
// replaces, starts and removes declared containers, observes every container faithfully (a
// predecessor's as much as meshd's), and lists every published port on the machine.
//
// It owns the words "engine", "image" and "published port", and nothing about found, held or
// taken: whether a container is found (present with no record), held, or taken is the host
// reconciler's decision, made from its own record store (ADR 0100). This package only tells the
// reconciler what is there (Inspect, Published), whether it differs from what a module declares
// (Diff), and carries out the one act the reconciler chose (Create, Replace, Start, Remove).
// For `meshd module draft` it observes every container at once (InspectAll), reads a saved
// inspect JSON (FromInspect), and compares two containers' inspect by what inspectKeys says
// each key is (InspectDiff).
//
// # Never recreate an unchanged container
//
// Diff compares a Spec (package ctrspec: a container as declared, which needs no engine)
// with an Observed container and lists only real differences; an empty list means the container
// must be left alone. A container as the engine reports it is never equal to the spec it was
// created from, so Diff normalises both sides first:
//
//   - image: references are compared in the engine's normalised form ("echo" and
//     "docker.io/library/echo:latest" are the same). The same reference resolving now to another
//     image than the one the container runs (a re-import under the same tag) is a difference.
//
//   - env and labels: a variable or label the container has and the spec does not declare is
//     ignored when the container's image sets it to the same value (PATH, image labels). When the
//     container's image is gone and cannot be asked, undeclared extras are ignored rather than
//     guessed at. Values of env variables are never printed, only their names.
//
//   - ports: compared as sets of (host address, host port, container port, protocol) from the
//     container's configured bindings, not the runtime list (which the engine doubles for IPv6);
//     "0.0.0.0" and no address are the same, tcp is the default protocol, order is ignored. Ports
//     the image exposes without publishing are ignored.
//
//   - volumes: compared as sets of (source, target, read-only, options); "rw" is the default, paths
//     are cleaned, order is ignored; bind mounts given with --mount count like --volume ones;
//     anonymous volumes the image declares are ignored.
//
//   - restart: "" and "no" are the same; the retry limit counts only for on-failure.
//
//   - cmd: a nil Cmd means the image's default command; only a container running something else is
//     a difference.
//
//   - the Runtime (user, networks, capabilities, limits, health check...): compared by
//     ctrspec.RuntimeChanges on the container read back as a Spec. What the image sets
//     (entrypoint, working dir, user, stop signal, health check) reads back as unset; the alias
//     the engine adds (the container's host name), the swap limit it sets (twice the memory),
//     the log options it merges into its default driver's, and the label=disable it gives a
//     container sharing the host's namespaces are left out.
//
//   - what no Spec can say (Spec.Unexpressed): a found container away from the engine's default
//     there (an IPC mode, a shm size) differs from every declaration. The defaults are learned
//     once per Engine from a probe container, created from the container's image, never
//     started, and removed.
//
// Every key the engine's inspect shows is classified in inspectKeys (reproduced, runtime state,
// assigned by the engine, the image's, derived, or not expressible), and a real-engine test walks
// a container's inspect JSON and fails on a key nobody classified. The container's name, its
// running state and engine-chosen values (its address, the files it mounts such as /etc/hosts)
// are not compared.
//
// A Spec's user-defined networks are created (a bridge, with the /24 or /64 of a static address
// declared on it) when the engine has none of the name, and joined before the container starts.
//
// # Errors
//
// An engine that cannot be reached returns an error matching ErrEngineUnreachable (an
// *UnreachableError naming the socket); the same Engine works again once the engine is back.
// An image that is not on the machine returns an error matching ErrImageMissing (an
// *ImageMissingError naming the image); Replace checks the image before it touches the old
// container, so a missing image never costs the running service.
package container
