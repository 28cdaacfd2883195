package netfilter_test

import (
	"context"
	"errors"
	"os"
	"testing"

	"meshd/netfilter"
	"meshd/netfilter/firewall"
	"meshd/netfilter/internal/nflab"
)

// A reboot empties the kernel's tables and the found firewall's boot brings back only its own:
// the kept copy puts meshd's guard back exactly as the agent loaded it (the store refused from off
// the private network again, reachable over it), and the derived filter likewise.
func TestBootLoadsTheKeptTable(t *testing.T) {
	l := nflab.NewNftables(t)
	ctx := context.Background()
	env := l.Env
	env.StateDir = t.TempDir()
	if _, err := netfilter.LoadForBoot(ctx, env); !errors.Is(err, netfilter.ErrNothingKept) {
		t.Fatalf("nothing kept yet: %v, want ErrNothingKept", err)
	}

	spec := netfilter.GuardSpec{Private: l.Private, Ports: []netfilter.Port{{Proto: "tcp", Port: 7001}}}
	if _, err := netfilter.Guard(ctx, env, spec); err != nil {
		t.Fatal(err)
	}
	if wrote, err := netfilter.KeepForBoot(env, netfilter.BootTables{Guard: &spec}); err != nil || !wrote {
		t.Fatalf("keep: wrote=%v err=%v", wrote, err)
	}
	if wrote, err := netfilter.KeepForBoot(env, netfilter.BootTables{Guard: &spec}); err != nil || wrote {
		t.Fatalf("keeping the same table again: wrote=%v err=%v, want nothing written", wrote, err)
	}
	if st, err := os.Stat(netfilter.BootPath(env.StateDir)); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("kept copy: %v %v, want mode 0600", st, err)
	}
	l.WantReach(l.Cli, l.HostAddr+":7001", false)

	// The reboot: every table gone, then the found firewall's own boot, carrying an opening of
	// the port to anyone (as a found firewall may, or Docker's published ports do): without the
	// guard the port is open to the world, the gap meshd-boot closes.
	l.Sh("nft flush ruleset && nft -f /etc/nftables.conf")
	f, err := firewall.Detect(ctx, env)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := firewall.NewDriver(env, f, l.Private)
	nflab.MustConverge(t, d, []netfilter.Opening{{Module: "store", Proto: "tcp", Port: 7001, From: netfilter.FromAnywhere, Path: netfilter.PathIncoming}})
	l.WantReach(l.Cli, l.HostAddr+":7001", true)
	said, err := netfilter.LoadForBoot(ctx, env)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("meshd boot: loaded %s", said)
	l.WantReach(l.Cli, l.HostAddr+":7001", false)
	l.WantReach(l.Peer, l.PeerHost+":7001", true)
	if wrote, err := netfilter.Guard(ctx, env, spec); err != nil || wrote {
		t.Fatalf("the guard loaded at boot differs from the agent's (wrote=%v err=%v)", wrote, err)
	}

	// A converged node: the derived filter is kept and loaded the same way.
	if err := netfilter.RemoveGuard(ctx, env); err != nil {
		t.Fatal(err)
	}
	filter := netfilter.FilterSpec{Private: l.Private, MeshPorts: []netfilter.Port{{Proto: "tcp", Port: 7001}},
		Openings: []netfilter.Opening{{Module: "web", Proto: "tcp", Port: 7000, From: netfilter.FromAnywhere, Path: netfilter.PathIncoming}}}
	if _, err := netfilter.KeepForBoot(env, netfilter.BootTables{Filter: &filter}); err != nil {
		t.Fatal(err)
	}
	l.Sh("nft flush ruleset")
	if _, err := netfilter.LoadForBoot(ctx, env); err != nil {
		t.Fatal(err)
	}
	l.WantReach(l.Cli, l.HostAddr+":7000", true)
	l.WantReach(l.Cli, l.HostAddr+":7001", false)
	if wrote, err := netfilter.LoadFilter(ctx, env, filter); err != nil || wrote {
		t.Fatalf("the filter loaded at boot differs from the agent's (wrote=%v err=%v)", wrote, err)
	}
}
