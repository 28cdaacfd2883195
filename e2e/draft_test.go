package e2e

// Issue 38's `meshd module draft`, on the hub of a lab already up: a container found as Compose
// leaves it is drafted on the hub, the manifest added, assigned and taken, and the take adopts
// it in place (the same container, not restarted); then every other container of the hub's
// predecessor is drafted at once (what a module declares already left out, named), and each
// module added, assigned and taken in place.
//
// Each drafted opening is what the hub's found firewall lets in (issue 38's reach): the
// nftables hub forwards only 8080 and 5000 to docker0, so shopapi (on appnet), metrics (9090)
// and dashboard (9091) get no opening and stay refused to outside after their takes, over IPv4
// and IPv6, while the predecessor's registry (5000) is opened from anywhere and still answers.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"meshd/draft"
	"meshd/internal/testenv"
	"meshd/lab"
)

// idStarted is what a take in place keeps: the container and its start.
const idStarted = "{{.Id}} {{.State.StartedAt}}"

// draftedPort is the host port the drafted container publishes (its container port is 8080).
const draftedPort = 28431

// takeDrafted walks draft → add → assign → take on hub (an adopted hub with its agent running
// and network appnet made by takeFoundAsItIs, its found firewall lab.FirewallNftables's).
func takeDrafted(ctx context.Context, t *testing.T, l *lab.Lab) {
	t.Helper()
	hub, outside := l.Machine("hub"), l.Machine("outside")
	hub6 := fmt.Sprintf("[%s]", hub.Addr6)
	t.Run("a container drafted with module draft is adopted in place", func(t *testing.T) {
		run := []string{"run", "-d", "--name", "shopapi", "--restart", "unless-stopped",
			"--label", "com.docker.compose.project=shop", "--label", "com.docker.compose.service=api",
			"--network", "appnet", "--network-alias", "shop-api", "--cap-add", "NET_ADMIN", "--user", "65534",
			"--memory", "64m", "--health-cmd", "/labsvc probe", "--health-interval", "30s", "-e", "SHOP_TOKEN=s3cret",
			"-p", fmt.Sprintf("%d:8080", draftedPort), lab.ImageName, "serve", "--listen", ":8080", "--name", "shopapi"}
		if out, err := hub.Docker(ctx, run...); err != nil {
			t.Fatalf("docker run shopapi: %v\n%s", err, out)
		}
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
		// The found firewall forwards no new connection to appnet's bridge: no opening.
		if m := pv.Modules[0]; len(m.Openings) > 0 || len(m.Closed) != 1 ||
			!strings.Contains(m.Closed[0], "closed by the found firewall (nft inet filter chain forward policy drop") {
			t.Errorf("shopapi's port: openings %q, closed %q; want none, closed by the forward chain's policy", m.Openings, m.Closed)
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
		outsideRefused(ctx, t, outside, hub6, draftedPort)
	})
	t.Run("every other container of the hub is drafted, and each module taken in place", func(t *testing.T) {
		var all draft.Result
		if err := meshdJSON(ctx, hub, &all, "module", "draft", "hub", "--out", "/var/lib/drafts-all"); err != nil {
			t.Fatalf("module draft hub: %v", err)
		}
		var names []string
		for _, m := range all.Modules {
			names = append(names, fmt.Sprintf("%s (%d containers)", m.Name, len(m.Containers)))
		}
		t.Logf("drafted %s; left out: %s", strings.Join(names, ", "), strings.Join(all.LeftOut, "; "))
		for _, w := range []string{"container shopapi is declared by module shop already", "container api2 is meshd's (module api)"} {
			if !slices.Contains(all.LeftOut, w) {
				t.Errorf("left out %q lacks %q", all.LeftOut, w)
			}
		}
		if len(all.Modules) == 0 {
			t.Fatal("nothing drafted: the hub's predecessor containers are there")
		}
		registryMark := ""
		for _, m := range all.Modules {
			for _, c := range m.Containers {
				switch c.Name {
				case "metrics", "dashboard":
					if len(m.Openings) > 0 || len(m.Closed) != 1 || !strings.Contains(m.Closed[0], "closed by the found firewall") {
						t.Errorf("module %s (%s, a port the found firewall closes): openings %q, closed %q; want no opening", m.Name, c.Name, m.Openings, m.Closed)
					}
				case "predecessor-registry":
					if len(m.Openings) != 1 || !strings.HasSuffix(m.Openings[0], "/tcp forwarded from anywhere") {
						t.Errorf("module %s (the registry, which the found firewall lets in): openings %q, want one from anywhere", m.Name, m.Openings)
					}
					registryMark = fmt.Sprintf("meshd:%s:forwarded:tcp/%d:anywhere", m.Name, lab.RegistryPort)
				}
			}
		}
		if registryMark == "" {
			t.Fatalf("predecessor-registry was not drafted: %q", names)
		}
		takesAt := time.Now()
		before := map[string]string{}
		for _, m := range all.Modules {
			for _, c := range m.Containers {
				before[c.Name] = inspectHub(ctx, hub, idStarted, c.Name)
			}
			add := []string{"module", "add", "/var/lib/drafts-all/" + m.File}
			if len(m.Privileged) > 0 {
				add = []string{"module", "add", "--privileged", "/var/lib/drafts-all/" + m.File}
			}
			for _, args := range [][]string{add, {"module", "assign", "hub", m.Name}} {
				if out, err := meshd(ctx, hub, args...); err != nil {
					t.Fatalf("%v: %v\n%s", args, err, out)
				}
			}
		}
		for _, m := range all.Modules {
			if err := testenv.Poll(t, 30*time.Second, func() error {
				pv := takePreviewJSON(ctx, t, hub, m.Name)
				for _, c := range m.Containers {
					if p := pv[c.Name]; p.FoundID == "" || p.Aside != "" || len(p.Differences) > 0 {
						return fmt.Errorf("module %s: container %s not held, or not adopted in place: %+v", m.Name, c.Name, p)
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if out, err := meshd(ctx, hub, "module", "take", "hub", m.Name); err != nil {
				t.Fatalf("take %s: %v\n%s", m.Name, err, out)
			}
		}
		for name, was := range before {
			if now := inspectHub(ctx, hub, idStarted, name); now != was {
				t.Errorf("container %s was recreated or restarted by its take: %s, was %s", name, now, was)
			}
		}
		// The attack: once the drafted modules' openings are in the found firewall (the
		// registry's is there), outside is still refused what the firewall closed, and the
		// registry it lets in still answers.
		if err := testenv.Poll(t, 30*time.Second, func() error {
			dump, err := hub.FirewallDump(ctx)
			if err != nil || !strings.Contains(dump, registryMark) {
				return fmt.Errorf("the registry's drafted opening %s is not in the found firewall yet (%v)", registryMark, err)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		outsideRefused(ctx, t, outside, hub6, lab.DeniedPort, lab.DashboardPort)
		if out, err := outside.Reach(ctx, fmt.Sprintf("http://%s:%d/", lab.HubAddr, lab.RegistryPort)); err != nil {
			t.Errorf("outside no longer reaches the predecessor's registry, which its firewall lets in: %v %s", err, out)
		}
		callsSince(t, l, time.Now(), 2, "outside-metrics", "outside-dashboard")
		if bad := probeVerdicts(t, l, takesAt, "outside-metrics", "outside-dashboard"); len(bad) > 0 {
			t.Errorf("outside reached a port its found firewall closes, after the drafted takes:\n%s", strings.Join(bad, "\n"))
		}
	})
}
