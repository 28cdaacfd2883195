package e2e

// Issue 38's measured case, on the hub of a lab already up: found containers started as Compose
// leaves them (a user-defined network with an alias, an added capability, a non-root user, a
// memory limit, a health check) are taken by a module that says so exactly (adopted in place: the
// same container, not restarted) or by one that says less (the preview names every loss, the
// take is refused until --accept-loss, and the history says who accepted what).

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"meshd/internal/testenv"
	"meshd/lab"
	"meshd/report"
)

// foundAPIArgs is `docker run` of a found container as the issue measured it.
func foundAPIArgs(name, alias string) []string {
	return []string{"run", "-d", "--name", name, "--restart", "unless-stopped", "--network", "appnet",
		"--network-alias", alias, "--cap-add", "NET_ADMIN", "--user", "65534", "--memory", "64m",
		"--health-cmd", "/labsvc probe", "--health-interval", "30s",
		lab.ImageName, "serve", "--listen", ":8080", "--name", name}
}

// apiManifest is module api: api as found (exact), or with only its image, command and restart
// policy; api2 always so.
func apiManifest(exact bool) string {
	simple := func(name string) string {
		return fmt.Sprintf("  - {name: %s, image: %q, command: [serve, --listen, \":8080\", --name, %s], restart: unless-stopped}\n",
			name, lab.ImageName, name)
	}
	m := "name: api\n"
	if exact {
		m += "privileged: true\n" // NET_ADMIN is beyond the engine's default set
	}
	m += "containers:\n"
	if exact {
		m += fmt.Sprintf(`  - name: api
    image: %q
    command: [serve, --listen, ":8080", --name, api]
    restart: unless-stopped
    user: "65534"
    networks: [{name: appnet, aliases: [api]}]
    cap_add: [NET_ADMIN]
    memory: 64m
    healthcheck: {test: [CMD-SHELL, /labsvc probe], interval: 30s}
`, lab.ImageName)
	} else {
		m += simple("api")
	}
	return m + simple("api2")
}

// takePreviewJSON is `meshd module take hub MODULE --preview --json` (MODULE api when none is
// given), by container name.
func takePreviewJSON(ctx context.Context, t *testing.T, hub *lab.Machine, module ...string) map[string]report.PreviewContainer {
	t.Helper()
	mod := "api"
	if len(module) > 0 {
		mod = module[0]
	}
	out, err := meshd(ctx, hub, "module", "take", "hub", mod, "--preview", "--json")
	if err != nil {
		t.Fatalf("take preview: %v\n%s", err, out)
	}
	var pv report.TakePreview
	if err := json.Unmarshal([]byte(out), &pv); err != nil {
		t.Fatalf("take preview --json: %v: %s", err, out)
	}
	by := map[string]report.PreviewContainer{}
	for _, c := range pv.Containers {
		by[c.Name] = c
	}
	return by
}

// wantLosses fails unless c is replaced and its losses are the found container's.
func wantLosses(t *testing.T, c report.PreviewContainer) {
	t.Helper()
	if c.Aside == "" {
		t.Errorf("container %s is adopted in place, though it loses: %+v", c.Name, c)
	}
	for _, w := range []string{"network appnet → bridge, alias " + c.Name + " lost", "capabilities: NET_ADMIN dropped",
		"user 65534 → the image's default", "memory limit 64m removed", "health check [CMD-SHELL /labsvc probe] interval 30s removed"} {
		if !slices.Contains(c.Losses, w) {
			t.Errorf("container %s: the preview's losses %q lack %q", c.Name, c.Losses, w)
		}
	}
}

func inspectHub(ctx context.Context, hub *lab.Machine, format, name string) string {
	out, err := hub.Docker(ctx, "inspect", "-f", format, name)
	if err != nil {
		return "error: " + err.Error()
	}
	return strings.TrimSpace(out)
}

// takeFoundAsItIs walks issue 38's measured case on hub (an adopted hub with its agent running).
func takeFoundAsItIs(ctx context.Context, t *testing.T, hub *lab.Machine) {
	t.Helper()
	if out, err := hub.Docker(ctx, "network", "create", "appnet"); err != nil {
		t.Fatalf("docker network create appnet: %v\n%s", err, out)
	}
	for _, n := range []string{"api", "api2"} {
		if out, err := hub.Docker(ctx, foundAPIArgs(n, n)...); err != nil {
			t.Fatalf("docker run %s: %v\n%s", n, err, out)
		}
	}
	const idStarted = "{{.Id}} {{.State.StartedAt}}"
	apiBefore, api2Before := inspectHub(ctx, hub, idStarted, "api"), inspectHub(ctx, hub, idStarted, "api2")
	addAPI := func(exact bool) {
		path := "/var/lib/api.yaml"
		if err := hub.WriteFile(ctx, path, []byte(apiManifest(exact)), 0o644); err != nil {
			t.Fatal(err)
		}
		args := []string{"module", "add", path}
		if exact {
			args = []string{"module", "add", "--privileged", path}
		}
		if out, err := meshd(ctx, hub, args...); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	addAPI(false)
	if out, err := meshd(ctx, hub, "module", "assign", "hub", "api"); err != nil {
		t.Fatalf("assign api: %v\n%s", err, out)
	}
	if err := testenv.Poll(t, 30*time.Second, func() error {
		pv := takePreviewJSON(ctx, t, hub)
		if len(pv) != 2 || pv["api"].FoundID == "" || pv["api2"].FoundID == "" {
			return fmt.Errorf("api and api2 not held yet: %+v", pv)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	t.Run("a simplified manifest: the preview names every loss, the take is refused naming them and the flag", func(t *testing.T) {
		pv := takePreviewJSON(ctx, t, hub)
		wantLosses(t, pv["api"])
		wantLosses(t, pv["api2"])
		text, _ := meshd(ctx, hub, "module", "take", "hub", "api", "--preview")
		t.Logf("meshd module take hub api --preview:\n%s", text)
		if strings.Contains(text, "already the declaration") || !strings.Contains(text, "LOSS: capabilities: NET_ADMIN dropped") {
			t.Errorf("the preview's text:\n%s", text)
		}
		out, err := meshd(ctx, hub, "module", "take", "hub", "api")
		if err == nil || !strings.Contains(out, "container api: network appnet → bridge, alias api lost") || !strings.Contains(out, "--accept-loss") {
			t.Fatalf("the take of a simplified manifest: %v\n%s", err, out)
		}
		t.Logf("meshd module take hub api, refused:\n%s", out)
	})

	t.Run("the exact manifest adopts api in place; api2's losses are taken only with --accept-loss", func(t *testing.T) {
		addAPI(true)
		if err := testenv.Poll(t, 20*time.Second, func() error {
			pv := takePreviewJSON(ctx, t, hub)
			if c := pv["api"]; c.Aside != "" || len(c.Differences) > 0 {
				return fmt.Errorf("api is not adopted in place: %+v", c)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		wantLosses(t, takePreviewJSON(ctx, t, hub)["api2"])
		out, err := meshd(ctx, hub, "module", "take", "hub", "api")
		if err == nil || strings.Contains(out, "container api:") || !strings.Contains(out, "container api2: capabilities: NET_ADMIN dropped") {
			t.Fatalf("the take with api2 simplified: %v\n%s", err, out)
		}
		if out, err := meshd(ctx, hub, "module", "take", "hub", "api", "--accept-loss"); err != nil {
			t.Fatalf("take --accept-loss: %v\n%s", err, out)
		}
		if after := inspectHub(ctx, hub, idStarted, "api"); after != apiBefore {
			t.Errorf("api was recreated or restarted: %s, was %s", after, apiBefore)
		}
		if after := inspectHub(ctx, hub, idStarted, "api2"); after == api2Before {
			t.Errorf("api2 was not replaced: %s", after)
		}
		caps := inspectHub(ctx, hub, "{{.HostConfig.CapAdd}} {{.HostConfig.NetworkMode}} {{.Config.User}}", "api2")
		if strings.Contains(caps, "NET_ADMIN") || strings.Contains(caps, "appnet") || strings.Contains(caps, "65534") {
			t.Errorf("api2 as replaced: %s, want what its module declares", caps)
		}
		historyHas(ctx, t, hub, [2]string{"api taken on hub, accepting the loss of: container api2: ", "root on hub's socket"})
		text, _ := meshd(ctx, hub, "history")
		t.Logf("meshd history:\n%s", text)
	})
}
