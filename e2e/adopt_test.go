package e2e

// The helpers ADR 0100's checks share (the checks themselves are walked in migration_test.go, in
// the order of the whole migration): a node's host report, a held file in it, and whether the
// found firewall differs only by rules marked as meshd's.

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"meshd/lab"
)

// nodeReport reads `meshd node show NODE --json` on m.
func nodeReport(ctx context.Context, m *lab.Machine, node string) (map[string]any, error) {
	out, err := meshd(ctx, m, "node", "show", node, "--json")
	if err != nil {
		return nil, err
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		return nil, fmt.Errorf("node show --json: %v: %s", err, out)
	}
	rep, _ := v["report"].(map[string]any)
	if rep == nil {
		return nil, fmt.Errorf("no host report yet")
	}
	return rep, nil
}

// heldFile finds a held file in a host report.
func heldFile(rep map[string]any, path string) map[string]any {
	held, _ := rep["held"].([]any)
	for _, h := range held {
		if hm, ok := h.(map[string]any); ok && hm["path"] == path {
			return hm
		}
	}
	return nil
}

// markedOnly says whether after differs from before only by lines carrying meshd's mark. ufw's
// rules are compared in ufw's own terms (`ufw status`, where meshd's comment shows); the kernel
// rules ufw renders them into (the ufw-user-* chains) carry no comment, so they are left to it.
func markedOnly(before, after string) error {
	count := func(s string) map[string]int {
		out := map[string]int{}
		ownTable := false
		for _, l := range strings.Split(s, "\n") {
			l = strings.TrimSpace(l)
			if strings.HasPrefix(l, "table ") {
				// meshd's own nftables tables (the guard) are not the found firewall's.
				ownTable = strings.Contains(l, " meshd_")
			}
			if ownTable || l == "" || strings.HasPrefix(l, "-A ufw-user-") {
				continue
			}
			out[l]++
		}
		return out
	}
	b, a := count(before), count(after)
	for l, n := range a {
		if n > b[l] && !strings.Contains(l, "meshd") {
			return fmt.Errorf("a rule not marked as meshd's was added: %q", l)
		}
	}
	for l, n := range b {
		if n > a[l] {
			return fmt.Errorf("a found rule was removed or changed: %q", l)
		}
	}
	return nil
}
