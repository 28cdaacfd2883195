// Package container drives the Docker engine on one machine for the host reconciler: it creates,
// replaces, starts and removes declared containers, observes every container faithfully (a
// predecessor's as much as meshd's), and lists every published port on the machine.
//
// It owns the words "engine", "image" and "published port", and nothing about found, held or
// taken: whether a container is found (present with no record), held, or taken is the host
// reconciler's decision, made from its own record store (ADR 0100). This package only tells the
// reconciler what is there (Inspect, Published), whether it differs from what a module declares
// (Diff), and carries out the one act the reconciler chose (Create, Replace, Start, Remove).
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
//   - env and labels: a variable or label the container has and the spec does not declare is
//     ignored when the container's image sets it to the same value (PATH, image labels). When the
//     container's image is gone and cannot be asked, undeclared extras are ignored rather than
//     guessed at. Values of env variables are never printed, only their names.
//   - ports: compared as sets of (host address, host port, container port, protocol) from the
//     container's configured bindings, not the runtime list (which the engine doubles for IPv6);
//     "0.0.0.0" and no address are the same, tcp is the default protocol, order is ignored. Ports
//     the image exposes without publishing are ignored.
//   - volumes: compared as sets of (source, target, read-only, options); "rw" is the default, paths
//     are cleaned, order is ignored; bind mounts given with --mount count like --volume ones;
//     anonymous volumes the image declares are ignored.
//   - restart: "" and "no" are the same; the retry limit counts only for on-failure.
//   - cmd: a nil Cmd means the image's default command; only a container running something else is
//     a difference.
//
// The container's name, its running state, engine-chosen values (hostname, IP address, mounts
// the engine adds such as /etc/hosts) and anything the Spec cannot express (networks, resources)
// are not compared.
//
// # Errors
//
// An engine that cannot be reached returns an error matching ErrEngineUnreachable (an
// *UnreachableError naming the socket); the same Engine works again once the engine is back.
// An image that is not on the machine returns an error matching ErrImageMissing (an
// *ImageMissingError naming the image); Replace checks the image before it touches the old
// container, so a missing image never costs the running service.
package container
