// Package ctrspec is a container as a module declares it (Spec) and the catalogue's forms
// of its parts: ports, volumes and restart policies parsed and normalised, meshd's labels, and
// Validate, which names each wrong field. Runtime is the rest of what Compose files and `docker
// run` set on a long-running service (entrypoint, user, networks with aliases and static
// addresses, capabilities, devices, limits, health check, logging, DNS, tmpfs...), embedded in
// Spec and in the catalogue's Container alike, so a manifest and a found container's
// reconstruction say it in the same words. RuntimeChanges compares two, each difference in
// plain words and marked when it loses something a service may depend on (a network, an alias,
// a capability, a user, a limit, a health check, or what a Spec cannot say at all).
//
// It is plain data checked without an engine: the engine driver (package container) creates
// from it, and a host report carries one (a held container's configuration) to readers that
// link no Docker client.
package ctrspec
