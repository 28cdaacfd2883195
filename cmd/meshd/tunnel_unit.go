package main

import (
	"fmt"

	"meshd/report"
)

// foundUnitLine is `meshd tunnel show`'s word on the found interface's wg-quick@ unit on the hub,
// from its report (state "" when it has not said: the takeover masks it), and how to give the
// interface back by hand, the runbook's step back: the agent stopped, the mesh's interface of
// that name deleted, the unit unmasked and started.
func foundUnitLine(found, hub, state string) string {
	unit := "wg-quick@" + found
	back := fmt.Sprintf("to give %[1]s back by hand: systemctl stop meshd; ip link del %[1]s (the mesh's); systemctl unmask %[2]s && systemctl enable --now %[2]s", found, unit)
	switch state {
	case report.FoundUnitEnabled:
		return fmt.Sprintf("%s still enabled on %s: the takeover has not masked it yet (a reboot or `systemctl start %s` would raise the found %s again)", unit, hub, unit, found)
	case report.FoundUnitDisabled:
		return fmt.Sprintf("%s disabled, not masked, on %s (a `systemctl start %s` would raise the found %s again); %s", unit, hub, unit, found, back)
	}
	return fmt.Sprintf("%s masked on %s; %s", unit, hub, back)
}
