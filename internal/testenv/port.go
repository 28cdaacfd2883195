package testenv

import (
	"fmt"
	"math/rand/v2"
	"net"
	"testing"
)

// Ports a test publishes are drawn below the kernel's ephemeral range (32768 and up by default):
// a port there is never handed to another bind(:0) or to an outgoing connection, which is how a
// port "free just now" was taken between the check and the engine's publish when suites ran side
// by side. Concurrent tests drawing at random rarely meet; the bind check catches the rest.
const (
	portLow  = 20000
	portHigh = 32000
)

// FreePort is a TCP port nothing on this network namespace listens on just now, on any address
// (the engine publishes on 0.0.0.0), drawn at random below the ephemeral range.
func FreePort(t testing.TB) int {
	t.Helper()
	for range 100 {
		p := portLow + rand.IntN(portHigh-portLow)
		ln, err := net.Listen("tcp", fmt.Sprintf(":%d", p))
		if err != nil {
			continue
		}
		ln.Close()
		return p
	}
	t.Fatalf("no free TCP port in %d-%d after 100 draws", portLow, portHigh)
	return 0
}
