package api

import (
	"os/exec"
	"strings"
	"testing"
)

// notLinked are what a program that only speaks the API must not compile: the host and its
// drivers, and the libraries they speak the machine through (Docker, OCI, nftables, netlink).
var notLinked = []string{
	"meshd/host", "meshd/netfilter", "meshd/container", "meshd/wg", "meshd/board", "meshd/agent",
	"github.com/docker", "github.com/moby", "github.com/opencontainers", "github.com/containerd",
	"github.com/distribution", "github.com/google/nftables", "github.com/vishvananda",
	"github.com/mdlayher",
}

// The wire contract links no driver: the CLI's client half, a dashboard or a test that imports
// api compiles none of the host, the firewall, the container engine or the tunnel.
func TestUnitImportsNoDriver(t *testing.T) {
	goCmd, err := exec.LookPath("go") // go test puts its own toolchain first on PATH
	if err != nil {
		t.Fatalf("no go command to list api's imports with: %v", err)
	}
	out, err := exec.Command(goCmd, "list", "-deps", "-f", "{{.ImportPath}}", "meshd/api").Output()
	if err != nil {
		msg := err.Error()
		if ee, ok := err.(*exec.ExitError); ok {
			msg += ": " + string(ee.Stderr)
		}
		t.Fatalf("go list -deps meshd/api: %s", msg)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 || deps[len(deps)-1] != "meshd/api" {
		t.Fatalf("go list -deps meshd/api listed no api: %q", out)
	}
	for _, p := range deps {
		for _, bad := range notLinked {
			if p == bad || strings.HasPrefix(p, bad+"/") {
				t.Errorf("api links %s (under %s)", p, bad)
			}
		}
	}
}
