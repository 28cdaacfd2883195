package e2e

// Issue 38's `meshd module draft`, on the hub of a lab already up: a container found as Compose
// leaves it is drafted on the hub, the manifest added, assigned and taken, and the take adopts
// it in place (the same container, not restarted).

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"meshd/draft"
	"meshd/internal/testenv"
	"meshd/lab"
)

// draftedPort is the host port the drafted container publishes (its container port is 8080).
const draftedPort = 28431

// takeDrafted walks draft → add → assign → take on hub (an adopted hub with its agent running
// and network appnet made by takeFoundAsItIs).
func takeDrafted(ctx context.Context, t *testing.T, hub *lab.Machine) {
	t.Helper()
	t.Run("a container drafted with module draft is adopted in place", func(t *testing.T) {
		run := []string{"run", "-d", "--name", "shopapi", "--restart", "unless-stopped",
			"--label", "com.docker.compose.project=shop", "--label", "com.docker.compose.service=api",
			"--network", "appnet", "--network-alias", "shop-api", "--cap-add", "NET_ADMIN", "--user", "65534",
			"--memory", "64m", "--health-cmd", "/labsvc probe", "--health-interval", "30s", "-e", "SHOP_TOKEN=s3cret",
			"-p", fmt.Sprintf("%d:8080", draftedPort), lab.ImageName, "serve", "--listen", ":8080", "--name", "shopapi"}
		if out, err := hub.Docker(ctx, run...); err != nil {
			t.Fatalf("docker run shopapi: %v\n%s", err, out)
		}
		const idStarted = "{{.Id}} {{.State.StartedAt}}"
		before := inspectHub(ctx, hub, idStarted, "shopapi")

		var pv draft.Result
		if err := meshdJSON(ctx, hub, &pv, "module", "draft", "hub", "shopapi", "--preview"); err != nil {
			t.Fatalf("module draft --preview: %v", err)
		}
		if len(pv.Refused) > 0 || len(pv.Modules) != 1 || pv.Modules[0].Name != "shop" {
			t.Fatalf("the preview: %+v", pv)
		}
		text, _ := meshd(ctx, hub, "module", "draft", "hub", "shopapi", "--preview")
		t.Logf("meshd module draft hub shopapi --preview:\n%s", text)
		if !strings.Contains(text, "env: SHOP_TOKEN") || strings.Contains(text, "s3cret") {
			t.Errorf("the preview shows env values, or not the names:\n%s", text)
		}
		if out, err := meshd(ctx, hub, "module", "draft", "hub", "shopapi", "--out", "/var/lib/drafts"); err != nil {
			t.Fatalf("module draft: %v\n%s", err, out)
		}
		if mode, err := hub.Exec(ctx, "stat", "-c", "%a", "/var/lib/drafts/shop.yaml"); err != nil || strings.TrimSpace(mode) != "600" {
			t.Errorf("/var/lib/drafts/shop.yaml: mode %q, %v; want 600", mode, err)
		}
		for _, args := range [][]string{{"module", "add", "--privileged", "/var/lib/drafts/shop.yaml"}, {"module", "assign", "hub", "shop"}} {
			if out, err := meshd(ctx, hub, args...); err != nil {
				t.Fatalf("%v: %v\n%s", args, err, out)
			}
		}
		if err := testenv.Poll(t, 30*time.Second, func() error {
			c, ok := takePreviewJSON(ctx, t, hub, "shop")["shopapi"]
			if !ok || c.FoundID == "" {
				return fmt.Errorf("shopapi not held yet: %+v", c)
			}
			if c.Aside != "" || len(c.Differences) > 0 {
				return fmt.Errorf("shopapi is not adopted in place: %+v", c)
			}
			return nil
		}); err != nil {
			out, _ := hub.Exec(ctx, "cat", "/var/lib/drafts/shop.yaml")
			t.Fatalf("%v\nmanifest:\n%s", err, out)
		}
		if out, err := meshd(ctx, hub, "module", "take", "hub", "shop"); err != nil {
			t.Fatalf("take shop: %v\n%s", err, out)
		}
		if after := inspectHub(ctx, hub, idStarted, "shopapi"); after != before {
			t.Errorf("shopapi was recreated or restarted by the take: %s, was %s", after, before)
		}
	})
}
