package e2e

import (
	"encoding/json"
	"slices"
	"testing"
)

// inspectDiff names each field that differs, by its path, and leaves out the health check's
// record and meshd's labels.
func TestInspectDiff(t *testing.T) {
	var before, after map[string]any
	_ = json.Unmarshal([]byte(`{"Id":"a","State":{"StartedAt":"1","Health":{"FailingStreak":1}},"Config":{"User":"65534","Labels":{"x":"1"}}}`), &before)
	_ = json.Unmarshal([]byte(`{"Id":"a","State":{"StartedAt":"2","Health":{"FailingStreak":3}},"Config":{"User":"","Labels":{"x":"1","meshd.module":"m"}}}`), &after)
	got := inspectDiff(before, after, "")
	want := []string{"Config.User: 65534 → ", "State.StartedAt: 1 → 2"}
	if !slices.Equal(got, want) {
		t.Fatalf("inspectDiff: %q, want %q", got, want)
	}
	if n := leaves(before); n != 5 {
		t.Errorf("leaves: %d, want 5", n)
	}
}
