package systemd_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"meshd/internal/testenv"
)

// removeGivesBack is `apt remove meshd` on the hub, whose tunnel meshd took, and what the runbook
// promises of it: the mesh's wg0 and its device process go, wg-quick@wg0 is unmasked, enabled
// and started from the file meshd never changed, and the peer reaches the webapp through it
// again; a reboot would raise it. when names the hub's moment (right after the takeover, after
// an agent restart, after a reboot): the device's command line names another interface in each.
func (r *rebootHub) removeGivesBack(ctx context.Context, t *testing.T, when string) {
	t.Helper()
	out := mustRun(ctx, t, r.hub, "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "remove", "-y", "meshd")
	if !strings.Contains(out, "gave wg0 back to wg-quick@wg0") {
		t.Errorf("%s, apt remove does not say it gave wg0 back:\n%s", when, out)
	}
	t.Logf("%s, apt remove gave wg0 back", when)
	if a := unitIs(ctx, r.hub, "is-active", "wg-quick@wg0"); a != "active" {
		t.Errorf("%s, after apt remove wg-quick@wg0 is %s, want active", when, a)
	}
	if e := unitIs(ctx, r.hub, "is-enabled", "wg-quick@wg0"); e != "enabled" {
		t.Errorf("%s, after apt remove wg-quick@wg0 is %s, want enabled (unmasked: a reboot raises it)", when, e)
	}
	if out, err := r.hub.Run(ctx, "pgrep", "-af", "^wireguard-go wg0"); err != nil {
		t.Errorf("%s, after apt remove no wireguard-go serves the found wg0 (wg-quick did not raise it): %v %s", when, err, out)
	}
	if left, _ := r.hub.Run(ctx, "sh", "-c", "pgrep -af '^/usr/bin/meshd ' || true"); strings.TrimSpace(left) != "" {
		t.Errorf("%s, meshd's processes run after apt remove: %s", when, left)
	}
	if err := testenv.Poll(t, 60*time.Second, func() error { return r.probeServes() }); err != nil {
		t.Fatalf("%s, the peer does not reach the webapp through the found wg0 given back: %v\n%s", when, err,
			r.hub.UnitJournal(ctx, "wg-quick@wg0"))
	}
}

// retake installs the package again after a remove and starts the agent: the node is the same
// (its data dir was kept), and it takes the found wg0, raised again by its own unit, over again:
// the mesh's wg0 is up, wg-quick@wg0 is masked, and the peer's probe serves through the mesh's.
func (r *rebootHub) retake(ctx context.Context, t *testing.T) {
	t.Helper()
	mustRun(ctx, t, r.hub, "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", r.pkg)
	mustRun(ctx, t, r.hub, "systemctl", "start", "meshd")
	if err := testenv.Poll(t, 60*time.Second, func() error {
		if _, err := r.meshIface(ctx); err != nil {
			return err
		}
		if e := unitIs(ctx, r.hub, "is-enabled", "wg-quick@wg0"); e != "masked" {
			return fmt.Errorf("wg-quick@wg0 is %s", e)
		}
		return r.probeServes()
	}); err != nil {
		t.Fatalf("installed again, the hub did not take wg0 over again: %v\n%s", err, r.hub.Journal(ctx))
	}
	r.settled = time.Now()
}

// The hub's tunnel given back by apt remove right after the takeover (its device process still
// named meshd-take on its command line) and after an agent restart (the device outlived it): the
// same promise as after a reboot (TestSystemdHubReboot's end), on the same hub.
func (r *rebootHub) removeBeforeReboot(ctx context.Context, t *testing.T) {
	t.Helper()
	r.removeGivesBack(ctx, t, "right after the takeover")
	r.retake(ctx, t)
	pid := strings.TrimSpace(mustRun(ctx, t, r.hub, "systemctl", "show", "-p", "MainPID", "--value", "meshd"))
	mustRun(ctx, t, r.hub, "systemctl", "restart", "meshd")
	if err := testenv.Poll(t, 60*time.Second, func() error {
		now := strings.TrimSpace(mustRun(ctx, t, r.hub, "systemctl", "show", "-p", "MainPID", "--value", "meshd"))
		if now == pid || now == "0" {
			return fmt.Errorf("meshd.service's MainPID is %s (was %s)", now, pid)
		}
		_, err := r.meshIface(ctx)
		return err
	}); err != nil {
		t.Fatalf("the agent restarted: %v\n%s", err, r.hub.Journal(ctx))
	}
	r.removeGivesBack(ctx, t, "after an agent restart")
	r.retake(ctx, t)
}
