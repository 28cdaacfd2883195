package lab_test

import (
	"strings"
	"testing"
	"time"

	"meshd/internal/labtest"
	"meshd/internal/testenv"
	"meshd/lab"
)

// The lab's unit runner honours a mask as systemd does: a masked wg-quick@wg0 (its
// /etc/systemd/system file a link to /dev/null) refuses to start with systemctl's words, and a
// reboot does not raise it even though multi-user.target still wants it.
func TestAMaskedUnitIsNotStarted(t *testing.T) {
	l := labtest.Up(t, lab.Predecessor(lab.FirewallUFW))
	ctx := testenv.Context(t, 3*time.Minute)
	hub := l.Machine("hub")
	unit := "wg-quick@" + lab.TunnelIface
	if hub.UnitMasked(ctx, unit) {
		t.Fatalf("%s is masked before the test masked it", unit)
	}
	if err := hub.StopService(ctx, unit); err != nil {
		t.Fatal(err)
	}
	if out, err := hub.Exec(ctx, "ln", "-s", "/dev/null", "/etc/systemd/system/"+unit+".service"); err != nil {
		t.Fatalf("masking %s: %v %s", unit, err, out)
	}
	if !hub.UnitMasked(ctx, unit) {
		t.Fatalf("%s is not seen masked", unit)
	}
	err := hub.StartService(ctx, unit)
	if err == nil || !strings.Contains(err.Error(), "Unit "+unit+".service is masked.") {
		t.Fatalf("starting the masked %s: %v, want systemd's refusal", unit, err)
	}
	if out, err := hub.Exec(ctx, "ip", "link", "show", lab.TunnelIface); err == nil {
		t.Fatalf("%s is up after a refused start: %s", lab.TunnelIface, out)
	}
	if err := hub.Reboot(ctx); err != nil {
		t.Fatal(err)
	}
	if out, err := hub.Exec(ctx, "ip", "link", "show", lab.TunnelIface); err == nil {
		t.Errorf("%s came back at the reboot though its unit is masked: %s", lab.TunnelIface, out)
	}
	if _, err := hub.Exec(ctx, "test", "-L", "/etc/systemd/system/multi-user.target.wants/"+unit+".service"); err != nil {
		t.Errorf("the test meant multi-user.target to still want %s: %v", unit, err)
	}
}
