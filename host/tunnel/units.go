package tunnel

import (
	"os"
	"path/filepath"

	"meshd/report"
)

// foundUnit says what the found interface's wg-quick@ unit is on the machine, as systemctl
// would: masked (/etc/systemd/system/wg-quick@FOUND.service a link to /dev/null, as
// disableUnits leaves it), enabled (a target still wants it), else disabled. "" where no
// interface was found.
func (d *Driver) foundUnit(found string) string {
	if found == "" {
		return ""
	}
	unit := "wg-quick@" + found + ".service"
	if t, err := os.Readlink(filepath.Join(d.root, "etc/systemd/system", unit)); err == nil && t == "/dev/null" {
		return report.FoundUnitMasked
	}
	if links, _ := filepath.Glob(filepath.Join(d.root, "etc/systemd/system/*.wants", unit)); len(links) > 0 {
		return report.FoundUnitEnabled
	}
	return report.FoundUnitDisabled
}
