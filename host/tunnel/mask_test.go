package tunnel

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"meshd/host/hosttest"
)

// The found interface's unit is disabled and masked, its unit file and wg-quick file kept byte
// for byte; a real unit file where the mask would go is refused by name, not replaced.
func TestUnitTheFoundUnitIsMasked(t *testing.T) {
	root := t.TempDir()
	unitFile := filepath.Join(root, "lib/systemd/system/wg-quick@.service")
	conf := filepath.Join(root, "etc/wireguard/wg0.conf")
	wants := filepath.Join(root, "etc/systemd/system/multi-user.target.wants/wg-quick@wg0.service")
	for p, body := range map[string]string{unitFile: "[Unit]\nDescription=WireGuard via wg-quick(8) for %I\n", conf: "[Interface]\nListenPort = 51820\n"} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(wants), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/lib/systemd/system/wg-quick@.service", wants); err != nil {
		t.Fatal(err)
	}
	d := newDriver(Config{Root: root}, nil, nil)
	for range 2 { // a second pass finds it masked and changes nothing
		if err := d.disableUnits("wg0"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Lstat(wants); !os.IsNotExist(err) {
		t.Errorf("wg-quick@wg0 is still wanted: %v", err)
	}
	mask := filepath.Join(root, "etc/systemd/system/wg-quick@wg0.service")
	if target, err := os.Readlink(mask); err != nil || target != "/dev/null" {
		t.Errorf("wg-quick@wg0 is not masked: %q %v", target, err)
	}
	for p, want := range map[string]string{unitFile: "[Unit]\nDescription=WireGuard via wg-quick(8) for %I\n", conf: "[Interface]\nListenPort = 51820\n"} {
		if b, err := os.ReadFile(p); err != nil || string(b) != want {
			t.Errorf("%s changed: %q %v", p, b, err)
		}
	}

	// a copied, edited unit file where the mask would go
	if err := os.WriteFile(filepath.Join(root, "etc/systemd/system/wg-quick@wg1.service"), []byte("[Service]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := d.disableUnits("wg1")
	if err == nil || !strings.Contains(err.Error(), "etc/systemd/system/wg-quick@wg1.service") || !strings.Contains(err.Error(), "unit file of its own") {
		t.Errorf("a real unit file at the mask's path: %v, want a refusal naming it", err)
	}
}

// A unit file of its own at the mask's path refuses the takeover before anything stops: the found
// interface still carries the peers, and the refusal names the file.
func TestUnitAnUnmaskableUnitRefusesTheTakeover(t *testing.T) {
	b := newTestBed(t)
	own := filepath.Join(b.root, "etc/systemd/system/wg-quick@wg0.service")
	if err := os.WriteFile(own, []byte("[Service]\nExecStart=/usr/bin/wg-quick up wg0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep := b.host().Reconcile(hosttest.Ctx(t), b.decl)
	if len(rep.Errors) == 0 || !strings.Contains(rep.Errors[0].Reason, own) {
		t.Fatalf("errors %+v: want a refusal naming %s", rep.Errors, own)
	}
	if slices.Contains(b.wg.ops, "stop wg0") || !b.wg.links["wg0"].up {
		t.Fatalf("ops %v: the found wg0 was stopped", b.wg.ops)
	}
}
