// Package drivertest opens a host over a hosttest.Bed with the drivers under test: the setup
// the drivers' and the previews' tests share. The host's own tests cannot import it (it imports
// the host); they open theirs with host.Open directly.
package drivertest

import (
	"testing"

	"meshd/host"
	"meshd/host/hosttest"
)

// OpenBed opens a host on b with the given drivers, closed when the test ends.
func OpenBed(b *hosttest.Bed, drivers ...host.Driver) *host.Host {
	b.T.Helper()
	h, err := host.Open(host.Config{DataDir: b.Data, Seal: hosttest.Seal, Root: b.Root, Logger: hosttest.Log(), Drivers: drivers})
	if err != nil {
		b.T.Fatal(err)
	}
	b.T.Cleanup(func() { h.Close() })
	return h
}

// Open opens a host on a new bed with the given drivers and returns it with the bed's root.
func Open(t *testing.T, drivers ...host.Driver) (*host.Host, string) {
	t.Helper()
	b := hosttest.NewBed(t)
	return OpenBed(b, drivers...), b.Root
}
