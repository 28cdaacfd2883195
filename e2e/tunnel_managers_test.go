package e2e

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"meshd/internal/labtest"
	"meshd/internal/testenv"
	"meshd/lab"
)

// A hub whose wg0 systemd-networkd defines (a .netdev beside the running wg-quick tunnel, as a
// half-finished migration to networkd leaves it): `genesis --adopted --take-tunnel wg0` is
// refused, --dry-run too, exit 1, naming networkd, the file and what to do; nothing is stopped or
// written (wg0 up with its key, wg-quick@wg0 enabled and not masked, no node in the data dir).
func TestTakeoverRefusesANetworkdInterface(t *testing.T) {
	bin := labtest.Meshd(t)
	l := labtest.Up(t, lab.Predecessor(lab.FirewallUFW))
	ctx := testenv.Context(t, 4*time.Minute)
	hub := l.Machine("hub")
	installMeshd(ctx, t, bin, hub)
	stopPredecessorControl(ctx, t, hub)
	keyBefore, err := hub.Exec(ctx, "wg", "show", lab.TunnelIface, "public-key")
	if err != nil {
		t.Fatal(err)
	}
	idxBefore, err := linkIndex(ctx, hub, lab.TunnelIface)
	if err != nil {
		t.Fatal(err)
	}
	netdev := "/etc/systemd/network/50-" + lab.TunnelIface + ".netdev"
	if err := hub.WriteFile(ctx, netdev, []byte("[NetDev]\nName="+lab.TunnelIface+"\nKind=wireguard\n\n[WireGuard]\nListenPort=51820\nPrivateKeyFile=/etc/systemd/network/wg0.key\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, extra := range [][]string{{"--dry-run"}, nil} {
		args := hubGenesis(append([]string{"--adopted", "--take-tunnel", lab.TunnelIface, "--port", "registry=5001"}, extra...)...)
		out, err := meshd(ctx, hub, args...)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("meshd %s: %v, want exit 1\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("meshd %s:\n%s", strings.Join(args, " "), out)
		for _, w := range []string{"1 problem(s) found", "tunnel.manager", lab.TunnelIface + " is managed by systemd-networkd", netdev, "networkctl reload", "then take it over"} {
			if !strings.Contains(out, w) {
				t.Errorf("meshd %s does not say %q:\n%s", strings.Join(args, " "), w, out)
			}
		}
	}
	if key, err := hub.Exec(ctx, "wg", "show", lab.TunnelIface, "public-key"); err != nil || key != keyBefore {
		t.Errorf("wg0 after the refusal: key %q (%v), want %q", key, err, keyBefore)
	}
	if idx, err := linkIndex(ctx, hub, lab.TunnelIface); err != nil || idx != idxBefore {
		t.Errorf("wg0 after the refusal: link %s (%v), want the same link %s", idx, err, idxBefore)
	}
	if out, err := hub.Exec(ctx, "ip", "-o", "link", "show", lab.TunnelIface); err != nil || !strings.Contains(out, "UP") {
		t.Errorf("wg0 is not up after the refusal: %v %s", err, out)
	}
	if _, err := hub.Exec(ctx, "test", "-L", "/etc/systemd/system/multi-user.target.wants/wg-quick@"+lab.TunnelIface+".service"); err != nil {
		t.Error("wg-quick@wg0 is no longer enabled after the refusal")
	}
	if hub.UnitMasked(ctx, "wg-quick@"+lab.TunnelIface) {
		t.Error("wg-quick@wg0 was masked by a refused takeover")
	}
	if _, err := hub.Exec(ctx, "test", "-e", "/var/lib/meshd/node.json"); err == nil {
		t.Error("a refused genesis wrote a node to /var/lib/meshd")
	}
}
