package autopilot

import (
	"strings"
	"testing"
)

// An even count of servers is warned about, with the quorum it needs; an odd count is not.
func TestEvenWarning(t *testing.T) {
	for n, want := range map[int]string{1: "", 2: "a quorum needs 2", 3: "", 4: "a quorum needs 3", 5: ""} {
		got := EvenWarning(n)
		if (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("%d servers: %q, want %q", n, got, want)
		}
	}
}
