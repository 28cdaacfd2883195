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
// So is `tunnel take hub wg0` on the running mesh, and a spoke's `join --tunnel wg0` where
// NetworkManager has a connection for its wg0.
func TestTakeoverRefusesAManagedInterface(t *testing.T) {
	t.Parallel()
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

	// The same hub raised without the tunnel (its port moved aside), then `tunnel take hub wg0`
	// on the running mesh: refused before the take is recorded, wg0 untouched.
	if out, err := hub.Exec(ctx, "mv", netdev, "/root/50-wg0.netdev"); err != nil {
		t.Fatal(out)
	}
	if out, err := meshd(ctx, hub, hubGenesis("--adopted", "--port", "registry=5001", "--port", "tunnel=51821")...); err != nil {
		t.Fatalf("adopted genesis without --take-tunnel: %v\n%s", err, out)
	}
	installAgent(ctx, t, hub, bin)
	agentLogsOnFailure(t, 4000, hub)
	if err := testenv.Poll(t, 60*time.Second, func() error {
		_, err := meshd(ctx, hub, "node", "show", "hub", "--json")
		return err
	}); err != nil {
		t.Fatalf("the hub's agent never answered: %v", err)
	}
	if out, err := hub.Exec(ctx, "mv", "/root/50-wg0.netdev", netdev); err != nil {
		t.Fatal(out)
	}
	out, err := meshd(ctx, hub, "tunnel", "take", "hub", lab.TunnelIface)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("tunnel take hub wg0 with a networkd .netdev: %v, want exit 1\n%s", err, out)
	}
	t.Logf("meshd tunnel take hub wg0:\n%s", out)
	for _, w := range []string{lab.TunnelIface + " is managed by systemd-networkd", netdev} {
		if !strings.Contains(out, w) {
			t.Errorf("tunnel take does not say %q:\n%s", w, out)
		}
	}
	if v, err := tunnelShow(ctx, hub); err != nil || v.Taken != "" {
		t.Errorf("tunnel show after the refused take: taken %q (%v), want nothing taken", v.Taken, err)
	}
	if idx, err := linkIndex(ctx, hub, lab.TunnelIface); err != nil || idx != idxBefore {
		t.Errorf("wg0 after the refused take: link %s (%v), want the same link %s", idx, err, idxBefore)
	}
	if hub.UnitMasked(ctx, "wg-quick@"+lab.TunnelIface) {
		t.Error("wg-quick@wg0 was masked by a refused take")
	}

	// A spoke whose wg0 NetworkManager manages: `join --tunnel wg0` is refused by its preflight,
	// --dry-run too, nothing sent or written; without the keyfile the same dry run passes.
	peer1 := l.Machine("peer1")
	installMeshd(ctx, t, bin, peer1)
	keyfile := "/etc/NetworkManager/system-connections/wg0.nmconnection"
	if err := peer1.WriteFile(ctx, keyfile, []byte("[connection]\nid=hub tunnel\ntype=wireguard\ninterface-name="+lab.TunnelIface+"\n\n[wireguard]\nprivate-key-flags=0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	token := adoptedToken(ctx, t, hub)
	join := func(extra ...string) (string, error) {
		return meshdJoin(ctx, peer1, token, append([]string{"--name", "peer1", "--data-dir", "/var/lib/meshd", "--tunnel", lab.TunnelIface, "--advertise", peer1.Addr.String()}, extra...)...)
	}
	p1Before, err := linkIndex(ctx, peer1, lab.TunnelIface)
	if err != nil {
		t.Fatal(err)
	}
	for _, extra := range [][]string{{"--dry-run"}, nil} {
		out, err := join(extra...)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Fatalf("join --tunnel wg0 %v with a NetworkManager connection: %v, want exit 1\n%s", extra, err, out)
		}
		t.Logf("meshd join --tunnel wg0 %v:\n%s", extra, out)
		for _, w := range []string{"join refused, nothing was sent", "tunnel.manager", lab.TunnelIface + " is managed by NetworkManager", `connection "hub tunnel"`, keyfile, "nmcli connection delete 'hub tunnel'"} {
			if !strings.Contains(out, w) {
				t.Errorf("join --tunnel wg0 %v does not say %q:\n%s", extra, w, out)
			}
		}
	}
	if _, err := peer1.Exec(ctx, "test", "-e", "/var/lib/meshd/node.json"); err == nil {
		t.Error("a refused join wrote a node on peer1")
	}
	if idx, err := linkIndex(ctx, peer1, lab.TunnelIface); err != nil || idx != p1Before {
		t.Errorf("peer1's wg0 after the refused join: link %s (%v), want the same link %s", idx, err, p1Before)
	}
	if out, err := peer1.Exec(ctx, "rm", keyfile); err != nil {
		t.Fatal(out)
	}
	if out, err := join("--dry-run"); err != nil {
		t.Errorf("join --tunnel wg0 --dry-run without the keyfile: %v\n%s", err, out)
	}
}
