package lab

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// The measured hub at 60 containers has at least ten Compose services, each as Compose leaves
// it (project and service labels, its project's network with an alias, a non-root user, an added
// capability, a memory limit, a health check, a container port other than the published one),
// and its found firewall still has 54 incoming and 52 forwarding allow rules.
func TestMeasuredComposeServices(t *testing.T) {
	lay, err := measuredLayout(MeasuredContainers)
	if err != nil {
		t.Fatal(err)
	}
	var compose int
	for _, c := range lay.ctrs {
		if c.project == "" {
			continue
		}
		compose++
		args := strings.Join(c.extra, " ")
		for _, want := range []string{"com.docker.compose.project=" + c.project, "com.docker.compose.service=" + c.name,
			"--network " + MeasuredNetwork(c.project), "--network-alias " + c.name, "--user 65534", "--cap-add NET_ADMIN",
			"--memory 64m", "--health-cmd"} {
			if !strings.Contains(args, want) {
				t.Errorf("container %s: %q lacks %q", c.name, args, want)
			}
		}
		if c.served == c.forwardPort || c.publish[0] != fmt.Sprintf("%d:%d", c.served, MeasuredComposePort) {
			t.Errorf("container %s publishes %v: want a container port other than the published one", c.name, c.publish)
		}
		if !slices.Contains(lay.projects, c.project) {
			t.Errorf("container %s: project %s has no network", c.name, c.project)
		}
	}
	if compose < 10 {
		t.Errorf("%d Compose services, want at least 10", compose)
	}
	in, fwd, _ := MeasuredRules(MeasuredContainers)
	rules := measuredNftables(lay, MeasuredFull)
	if in != 54 || fwd != 52 || strings.Count(rules, "accept comment") != in+fwd {
		t.Errorf("%d incoming, %d forwarding rules; the ruleset has %d:\n%s", in, fwd, strings.Count(rules, "accept comment"), rules)
	}
	if !strings.Contains(rules, `oifname "br-*" tcp dport 8080 accept comment "svc03"`) {
		t.Errorf("no forwarding rule for a Compose service's bridge:\n%s", rules)
	}
}
