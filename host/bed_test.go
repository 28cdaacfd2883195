package host

import (
	"testing"

	"meshd/host/hosttest"
)

// openBed opens a host on b with the given drivers, closed when the test ends: what
// drivertest.OpenBed does for the drivers' tests, which the host's own cannot import.
func openBed(b *hosttest.Bed, drivers ...Driver) *Host {
	b.T.Helper()
	h, err := Open(Config{DataDir: b.Data, Seal: hosttest.Seal, Root: b.Root, Logger: hosttest.Log(), Drivers: drivers})
	if err != nil {
		b.T.Fatal(err)
	}
	b.T.Cleanup(func() { h.Close() })
	return h
}

// openTemp opens a host on a new bed and returns it with the bed's root.
func openTemp(t *testing.T, drivers ...Driver) (*Host, string) {
	t.Helper()
	b := hosttest.NewBed(t)
	return openBed(b, drivers...), b.Root
}
