package tunnel

// What the driver does of wg-quick's part when it raises the found interface anew (a boot): the
// kept nftables tables, the file's DNS, its PreUp/PostUp lines (see Driver.converge), and the
// machine's side of it.

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"time"

	"meshd/wg"
)

func (wgMachine) QuickTables(ctx context.Context, iface string) ([]wg.QuickTable, error) {
	return wg.ReadQuickTables(ctx, iface)
}

func (wgMachine) LoadQuickTables(ctx context.Context, ts []wg.QuickTable) error {
	return wg.LoadQuickTables(ctx, ts)
}

// hookUmask is the umask a hook line runs under: wg-quick@.service's (systemd's default), not the
// agent's unit's 0077, so what a line writes (resolvconf's resolv.conf, say) is as readable as
// when wg-quick ran it.
const hookUmask = "umask 022\n"

func (wgMachine) Hook(ctx context.Context, line string) error {
	out, err := exec.CommandContext(ctx, "bash", "-c", hookUmask+line).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// anewHooks does, after the interface was raised anew, the rest of what wg-quick did at up:
// its own nftables tables put back, the file's DNS handed to resolvconf, its PostUp lines run.
// It says what it did, after pre (what PreUp did), for the report; "" when there was nothing.
func (d *Driver) anewHooks(ctx context.Context, name string, k wg.Kept, pre string) string {
	var put string
	if len(k.Tables) > 0 {
		put = "wg-quick's tables put back"
		if err := d.m.LoadQuickTables(ctx, k.Tables); err != nil {
			d.log.Error("putting back wg-quick's tables for the found interface", "err", err)
			put = err.Error()
		}
	}
	var setDNS string
	if l := wg.DNSLine(k.DNS, name); l != "" {
		setDNS = d.runHooks(ctx, "DNS", []string{l})
	}
	ran := []string{pre, put, setDNS, d.runHooks(ctx, "PostUp", wg.For(k.Hooks.PostUp, name))}
	return strings.Join(slices.DeleteFunc(ran, func(s string) bool { return s == "" }), "; ")
}

// runHooks runs one stage of the found file's hooks, line by line as wg-quick does, and notes
// what ran for the report (report.TunnelDetail.Hooks). A line that fails is named and the rest
// still run: the tunnel stays up (wg-quick would have taken it down again, peers and all).
func (d *Driver) runHooks(ctx context.Context, stage string, lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	at := time.Now().UTC().Format(time.RFC3339)
	var failed []string
	for i, l := range lines {
		hctx, cancel := context.WithTimeout(ctx, hookWait)
		err := d.m.Hook(hctx, l)
		cancel()
		if err != nil {
			d.log.Error("a hook of the found wg-quick file failed", "stage", stage, "line", i+1, "command", l, "err", err)
			failed = append(failed, fmt.Sprintf("%s line %d (%s): %v", stage, i+1, l, err))
			continue
		}
		d.log.Info("ran a hook of the found wg-quick file", "stage", stage, "line", i+1, "command", l)
	}
	if failed != nil {
		return fmt.Sprintf("%s at %s: %d of %d lines failed: %s", stage, at, len(failed), len(lines), strings.Join(failed, "; "))
	}
	return fmt.Sprintf("%s at %s: %d lines ran", stage, at, len(lines))
}

// hookWait bounds one hook line (an iptables or sysctl call takes milliseconds).
const hookWait = 30 * time.Second
