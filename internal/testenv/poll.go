package testenv

import (
	"context"
	"testing"
	"time"
)

// Poll retries f until it returns nil or within has passed, and returns f's last error: after
// 10ms first, the wait doubling to 200ms.
func Poll(t testing.TB, within time.Duration, f func() error) error {
	t.Helper()
	deadline := time.Now().Add(within)
	// Soon first (most waits end within milliseconds), then no more than five times a second.
	step := 10 * time.Millisecond
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(step)
		step = min(2*step, 200*time.Millisecond)
	}
}

// Context is a context that ends after d or with the test, whichever comes first.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
