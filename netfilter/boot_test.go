package netfilter

import (
	"context"
	"errors"
	"os"
	"testing"
)

// A reboot empties the kernel's tables and the found firewall's boot brings back only its own:
// the kept copy puts meshd's guard back exactly as the agent loaded it (the store refused from off
// the private network again, reachable over it), and the derived filter likewise.
func TestBootLoadsTheKeptTable(t *testing.T) {
	l := newNftLab(t)
	ctx := context.Background()
	env := l.env
	env.StateDir = t.TempDir()
	if _, err := LoadForBoot(ctx, env); !errors.Is(err, ErrNothingKept) {
		t.Fatalf("nothing kept yet: %v, want ErrNothingKept", err)
	}

	spec := GuardSpec{Private: l.private, Ports: []Port{{"tcp", 7001}}}
	if _, err := Guard(ctx, env, spec); err != nil {
		t.Fatal(err)
	}
	if wrote, err := KeepForBoot(env, BootTables{Guard: &spec}); err != nil || !wrote {
		t.Fatalf("keep: wrote=%v err=%v", wrote, err)
	}
	if wrote, err := KeepForBoot(env, BootTables{Guard: &spec}); err != nil || wrote {
		t.Fatalf("keeping the same table again: wrote=%v err=%v, want nothing written", wrote, err)
	}
	if st, err := os.Stat(BootPath(env.StateDir)); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("kept copy: %v %v, want mode 0600", st, err)
	}
	l.wantReach(l.cli, l.hostAddr+":7001", false)

	// The reboot: every table gone, then the found firewall's own boot, carrying an opening of
	// the port to anyone (as a found firewall may, or Docker's published ports do): without the
	// guard the port is open to the world, the gap meshd-boot closes.
	l.sh("nft flush ruleset && nft -f /etc/nftables.conf")
	f, err := Detect(ctx, env)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := NewDriver(env, f, l.private)
	mustConverge(t, d, []Opening{{Module: "store", Proto: "tcp", Port: 7001, From: FromAnywhere, Path: PathIncoming}})
	l.wantReach(l.cli, l.hostAddr+":7001", true)
	said, err := LoadForBoot(ctx, env)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("meshd boot: loaded %s", said)
	l.wantReach(l.cli, l.hostAddr+":7001", false)
	l.wantReach(l.peer, l.peerHost+":7001", true)
	if wrote, err := Guard(ctx, env, spec); err != nil || wrote {
		t.Fatalf("the guard loaded at boot differs from the agent's (wrote=%v err=%v)", wrote, err)
	}

	// A converged node: the derived filter is kept and loaded the same way.
	if err := RemoveGuard(ctx, env); err != nil {
		t.Fatal(err)
	}
	filter := FilterSpec{Private: l.private, MeshPorts: []Port{{"tcp", 7001}},
		Openings: []Opening{{Module: "web", Proto: "tcp", Port: 7000, From: FromAnywhere, Path: PathIncoming}}}
	if _, err := KeepForBoot(env, BootTables{Filter: &filter}); err != nil {
		t.Fatal(err)
	}
	l.sh("nft flush ruleset")
	if _, err := LoadForBoot(ctx, env); err != nil {
		t.Fatal(err)
	}
	l.wantReach(l.cli, l.hostAddr+":7000", true)
	l.wantReach(l.cli, l.hostAddr+":7001", false)
	if wrote, err := LoadFilter(ctx, env, filter); err != nil || wrote {
		t.Fatalf("the filter loaded at boot differs from the agent's (wrote=%v err=%v)", wrote, err)
	}
}
