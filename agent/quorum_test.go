package agent

import (
	"errors"
	"strings"
	"testing"
)

// A write without a leader names the quorum, the voters and the ones missing, and says what to run
// when they are lost for good; with enough voters reached it says an election may be under way.
func TestNoQuorumErrorNamesTheMissing(t *testing.T) {
	lost := (&NoQuorumError{Server: "hub", Voters: []string{"hub", "s2", "s3"}, Missing: []string{"s2 (refused)", "s3 (refused)"}, Cause: errors.New("no raft leader right now")}).Error()
	for _, want := range []string{"quorum of 2 of its 3 voters (hub, s2, s3)", "server hub reaches 1", "missing: s2 (refused), s3 (refused)", "meshd operator raft recover"} {
		if !strings.Contains(lost, want) {
			t.Errorf("quorum lost: %q lacks %q", lost, want)
		}
	}
	electing := (&NoQuorumError{Server: "hub", Voters: []string{"hub", "s2", "s3"}, Missing: []string{"s3 (refused)"}}).Error()
	if strings.Contains(electing, "recover") || !strings.Contains(electing, "election") {
		t.Errorf("quorum held: %q", electing)
	}
}
