package main

import (
	"strings"
	"testing"

	"meshd/report"
)

// tunnel show says the found unit is masked and how to give the interface back by hand, or that
// it is not masked yet.
func TestFoundUnitLineSaysHowToUndoTheMask(t *testing.T) {
	for state, want := range map[string][]string{
		report.FoundUnitMasked:   {"wg-quick@wg0 masked on hub", "systemctl stop meshd", "ip link del wg0", "systemctl unmask wg-quick@wg0 && systemctl enable --now wg-quick@wg0"},
		"":                       {"wg-quick@wg0 masked on hub", "systemctl unmask wg-quick@wg0"},
		report.FoundUnitEnabled:  {"still enabled", "has not masked it yet"},
		report.FoundUnitDisabled: {"disabled, not masked", "systemctl unmask wg-quick@wg0"},
	} {
		got := foundUnitLine("wg0", "hub", state)
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("%q: %q does not say %q", state, got, w)
			}
		}
	}
}
