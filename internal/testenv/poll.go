package testenv

import (
	"context"
	"testing"
	"time"
)

// Poll retries f every 200ms until it returns nil or within has passed, and returns f's last
// error.
func Poll(t testing.TB, within time.Duration, f func() error) error {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Context is a context that ends after d or with the test, whichever comes first.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
