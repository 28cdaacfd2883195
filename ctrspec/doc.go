// Package ctrspec is a container as a module declares it (Spec) and the catalogue's forms
// of its parts: ports, volumes and restart policies parsed and normalised, meshd's labels, and
// Validate, which names each wrong field. It is plain data checked without an engine: the engine
// driver (package container) creates from it, and a host report carries one (a held container's
// configuration) to readers that link no Docker client.
package ctrspec
