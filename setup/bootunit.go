package setup

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"meshd/pki"
)

// BootUnitName is the systemd unit that loads meshd's own firewall table at boot (`meshd boot`).
const BootUnitName = "meshd-boot.service"

// BootUnitText is the meshd-boot unit for the binary at exe and the node kept in dataDir. It runs
// once, early (like nftables.service: no default dependencies, wanted by sysinit.target), after
// the found firewall has loaded (so a `flush ruleset` in /etc/nftables.conf cannot drop it) and
// before the container engine starts publishing ports and before the agent.
func BootUnitText(exe, dataDir string) string {
	return `# Written by meshd. Loads meshd's own firewall table (the guard on an adopted node, the
# derived filter on a converged one) as the agent last loaded it, before the container engine
# publishes ports: a reboot empties the kernel's tables and the agent makes its first pass only
# once it has started. See ` + "`meshd boot --help`" + `.
[Unit]
Description=meshd: load meshd's own firewall table before anything serves
DefaultDependencies=no
Wants=network-pre.target
After=local-fs.target nftables.service ufw.service netfilter-persistent.service
Before=network-pre.target docker.service containerd.service meshd.service shutdown.target
Conflicts=shutdown.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=` + exe + ` boot --data-dir ` + dataDir + `

[Install]
WantedBy=sysinit.target
`
}

// InstallBootUnit writes the meshd-boot unit under root's /etc/systemd/system and enables it
// (the sysinit.target.wants link `systemctl enable` makes), writing nothing that is already so;
// wrote says whether it wrote. A machine without /etc/systemd/system is not run by systemd:
// nothing is written and the answer says so.
func InstallBootUnit(root, exe, dataDir string) (wrote bool, err error) {
	if strings.ContainsAny(exe+dataDir, " \t\n\"'\\%") {
		return false, fmt.Errorf("boot unit: %q or %q holds a character a unit's ExecStart would need quoted", exe, dataDir)
	}
	dir := filepath.Join(root, "etc/systemd/system")
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return false, fmt.Errorf("boot unit: %s is not a directory: this machine is not run by systemd", dir)
	}
	unit := filepath.Join(dir, BootUnitName)
	text := []byte(BootUnitText(exe, dataDir))
	if old, err := os.ReadFile(unit); err != nil || !bytes.Equal(old, text) {
		if err := pki.WriteFileAtomic(unit, text, 0o644); err != nil {
			return false, fmt.Errorf("boot unit %s: %w", unit, err)
		}
		wrote = true
	}
	wants := filepath.Join(dir, "sysinit.target.wants")
	link := filepath.Join(wants, BootUnitName)
	target := "/etc/systemd/system/" + BootUnitName // as the machine sees it, whatever root is
	if got, err := os.Readlink(link); err == nil && got == target {
		return wrote, nil
	}
	if err := os.MkdirAll(wants, 0o755); err != nil {
		return wrote, fmt.Errorf("enable %s: %w", BootUnitName, err)
	}
	_ = os.Remove(link)
	if err := os.Symlink(target, link); err != nil {
		return wrote, fmt.Errorf("enable %s: %w", BootUnitName, err)
	}
	return true, nil
}
