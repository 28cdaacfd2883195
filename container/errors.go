package container

import (
	"errors"
	"fmt"
)

// ErrEngineUnreachable matches (errors.Is) every error returned because the Docker engine could
// not be reached. It is not fatal: the host reports it and tries again on its next reconcile.
var ErrEngineUnreachable = errors.New("docker engine unreachable")

// ErrImageMissing matches every error returned because a declared image is not on the machine.
// Nothing can be pulled; the image has to be imported or loaded first.
var ErrImageMissing = errors.New("image missing")

// UnreachableError is the engine at Host failing to answer during Op.
type UnreachableError struct {
	Host string // the engine's address, e.g. unix:///var/run/docker.sock
	Op   string // what was being done, e.g. "inspect container webapp"
	Err  error  // the transport's error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("%s: docker engine at %s unreachable: %v", e.Op, e.Host, e.Err)
}

// Unwrap lets errors.Is match both ErrEngineUnreachable and the transport's cause.
func (e *UnreachableError) Unwrap() []error { return []error{ErrEngineUnreachable, e.Err} }

// ImageMissingError is a declared image that is not on the machine.
type ImageMissingError struct {
	Image     string // the reference as declared
	Container string // the container that needed it
	Host      string // the engine asked
}

func (e *ImageMissingError) Error() string {
	return fmt.Sprintf("container %s: image %s is not on the engine at %s (nothing is pulled; import it first)",
		e.Container, e.Image, e.Host)
}

// Unwrap lets errors.Is match ErrImageMissing.
func (e *ImageMissingError) Unwrap() error { return ErrImageMissing }
