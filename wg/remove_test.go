package wg

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"meshd/internal/testenv"
)

// Remove deletes a WireGuard (TUN) link of that name, refuses a link of another kind (a bridge) naming it,
// and treats an absent one as done.
func TestRemoveDeletesOnlyAWireGuardLink(t *testing.T) {
	testenv.RequireRoot(t, "network namespaces", "ip")
	ns := fmt.Sprintf("meshd-wgrm-%d", testSeq())
	testenv.NewNetns(t, ns)
	testenv.Run(t, "ip", "-n", ns, "tuntap", "add", "dev", "meshd0", "mode", "tun")
	testenv.Run(t, "ip", "-n", ns, "link", "add", "other0", "type", "bridge")
	err := testenv.InNetns(ns, func() error {
		if err := Remove("meshd0"); err != nil {
			return fmt.Errorf("removing meshd0: %w", err)
		}
		if err := Remove("other0"); err == nil || !strings.Contains(err.Error(), "other0") || !strings.Contains(err.Error(), "not WireGuard") {
			return fmt.Errorf("removing a bridge: %v", err)
		}
		if err := Remove("absent0"); err != nil {
			return fmt.Errorf("removing an absent link: %w", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("ip", "-n", ns, "link", "show", "meshd0").CombinedOutput(); err == nil {
		t.Errorf("meshd0 is still there: %s", out)
	}
	if out, err := exec.Command("ip", "-n", ns, "link", "show", "other0").CombinedOutput(); err != nil {
		t.Errorf("the bridge was removed: %v %s", err, out)
	}
}

func testSeq() int32 { return labSeq.Add(1) }
