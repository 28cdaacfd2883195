package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"meshd/internal/testenv"
)

// pageBound is how soon the status page must show a change of the node: the issue's "within a
// second".
const pageBound = time.Second

// pageSettle is how long the page may take to show what the tests wait for without bounding it:
// a poll's deadline, not a measure.
const pageSettle = 10 * time.Second

// proxyInto serves on this machine's loopback what addr serves inside netns, so a browser run
// here reaches an agent's listener in its namespace. It returns the local address.
func proxyInto(t *testing.T, netns, addr string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := dialIn(netns, addr)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, c) }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
	return ln.Addr().String()
}

// browser starts Debian's headless Chromium for the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		testenv.Prereq(t, "the status page test needs Debian's chromium (scripts/deps.sh installs it)")
	}
	actx, cancel := chromedp.NewExecAllocator(context.Background(), chromedp.ExecPath(path), chromedp.Headless,
		chromedp.NoSandbox, chromedp.WindowSize(1400, 1000), chromedp.Flag("disable-gpu", true),
		chromedp.Flag("user-data-dir", t.TempDir()))
	t.Cleanup(cancel)
	ctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	return ctx
}

// liveText is what the page shows, as a reader sees it.
func liveText(ctx context.Context) (string, error) {
	return chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
}

// sectionText is what the page shows in the first element matching selector ("" when none).
func sectionText(ctx context.Context, selector string) (string, error) {
	return chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(
		`(function(){var e=document.querySelector(%q);return e?e.innerText:""})()`, selector)))
}

// pageShows waits until the page's live part contains every want, at most within, and says how
// long it took.
func pageShows(t *testing.T, ctx context.Context, within time.Duration, what string, want ...string) time.Duration {
	t.Helper()
	return shows(t, ctx, within, what, liveText, want...)
}

// sectionShows is pageShows for what the page shows in the element matching selector.
func sectionShows(t *testing.T, ctx context.Context, within time.Duration, what, selector string, want ...string) time.Duration {
	t.Helper()
	return shows(t, ctx, within, what, func(ctx context.Context) (string, error) { return sectionText(ctx, selector) }, want...)
}

// onFirstScreen fails unless every element matching each selector begins within the browser's
// window as the page opens (unscrolled), and is shown.
func onFirstScreen(t *testing.T, ctx context.Context, selectors ...string) {
	t.Helper()
	for _, sel := range selectors {
		where, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(function(){
  var e=document.querySelector(%q); if(!e) return "not on the page";
  var r=e.getBoundingClientRect(); if(r.height===0||r.width===0) return "not shown";
  if(r.top+window.scrollY>=window.innerHeight) return "below the first screen (at "+Math.round(r.top+window.scrollY)+"px of "+window.innerHeight+")";
  return ""})()`, sel)))
		if err != nil || where != "" {
			t.Errorf("the page's %s: %s (%v)", sel, where, err)
		}
	}
}

// shows waits until read's text contains every want, at most within, and says how long it took.
func shows(t *testing.T, ctx context.Context, within time.Duration, what string, read func(context.Context) (string, error), want ...string) time.Duration {
	t.Helper()
	start := time.Now()
	var text string
	for {
		var err error
		text, err = read(ctx)
		if err == nil {
			missing := ""
			for _, w := range want {
				if !strings.Contains(text, w) {
					missing = w
					break
				}
			}
			if missing == "" {
				return time.Since(start)
			}
		}
		if time.Since(start) > within {
			t.Fatalf("%s: the page did not show %q within %s; it shows:\n%s", what, want, within, text)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// screenshot writes the page as a PNG into $MESHD_SCREENSHOTS when it is set (a relative path is
// the repository's), to look at this test's bed; docs/img's come from `make screenshots`.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("MESHD_SCREENSHOTS")
	if dir == "" {
		return
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join("..", "..", dir)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// The status page in a real headless Chromium: a real agent's page shows the node's state, and
// changes within a second, without a reload, when a held file is changed by something else and
// when a module is taken. Its first screen is the board (the summary, the node's steps, what is
// in the way of the next) beside the timeline of the commands given, by whom, and the host's
// events (issue 29). The node's page shows its last report, and names how to read a held file's
// original without serving it.
func TestProcessStatusPageInChromium(t *testing.T) {
	n := newNode(t)
	ctx := browser(t)
	dir := t.TempDir()
	heldConf := filepath.Join(dir, "legacy", "app.conf")
	if err := os.MkdirAll(filepath.Dir(heldConf), 0o755); err != nil {
		t.Fatal(err)
	}
	original := "the predecessor's config\n"
	if err := os.WriteFile(heldConf, []byte(original), 0o644); err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(dir, "legacy.yaml")
	if err := os.WriteFile(manifest, []byte(fmt.Sprintf("name: legacy\nprivileged: true\nfiles:\n  - path: %s\n    content: \"meshd's\\n\"\n", heldConf)), 0o644); err != nil {
		t.Fatal(err)
	}
	n.genesis("--adopted")
	pagePort := testenv.FreePort(t)
	n.startAgent("--metrics", fmt.Sprintf("127.0.0.1:%d", pagePort), "--reconcile-interval", "10m")
	n.ok("module", "add", "--privileged", manifest)
	n.ok("module", "assign", "hub", "legacy")

	base := "http://" + proxyInto(t, n.netns, fmt.Sprintf("127.0.0.1:%d", pagePort))
	poll(t, 20*time.Second, "the status page served", func() string {
		out, err := exec.Command("curl", "-sf", base+"/").Output()
		if err != nil {
			return err.Error()
		}
		if !strings.Contains(string(out), "meshd") {
			return "no page"
		}
		return ""
	})
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/")); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	pageShows(t, ctx, 20*time.Second, "the node's state", "hub", "adopted", "server", "legacy: prepared", heldConf, "held as found", "live: record index")
	pageShows(t, ctx, pageBound, "the command that shows the original", "meshd node original hub "+heldConf)
	// Issue 29: the first screen is the board (where each node stands) beside what happened.
	onFirstScreen(t, ctx, "section.board", "section.history")
	// The summary counts the mesh's own modules (genesis assigns them) beside legacy.
	sectionShows(t, ctx, pageSettle, "the board's summary", "section.board", "0 of 1 nodes converged; 0 of ")
	summary, _ := sectionText(ctx, "section.board p.summary")
	m := regexp.MustCompile(`^0 of 1 nodes converged; 0 of (\d+) modules taken$`).FindStringSubmatch(strings.TrimSpace(summary))
	if m == nil {
		t.Fatalf("the board's summary is %q, want 0 of 1 nodes converged and none of its modules taken", summary)
	}
	modules := m[1]
	sectionShows(t, ctx, pageSettle, "the hub's row on the board", "#board-hub",
		"hub", "✓ enrolled", "✓ adopted", "✓ prepared legacy", "· taken legacy", "· converged", "taken legacy")
	sectionShows(t, ctx, pageSettle, "the commands in the timeline, with who gave them", "section.history",
		"module legacy added to the catalogue, privileged: root on every machine it is assigned to root on hub's socket",
		"legacy assigned to hub root on hub's socket")
	// Issue 34, finding 1: legacy writes outside its own places (the test's directory), so the
	// page names it root on the machines it is assigned to, with each path and who said so.
	sectionShows(t, ctx, pageSettle, "the privileged modules", "section.privileged",
		"legacy", "said by root on hub's socket", "file "+heldConf)
	screenshot(t, ctx, "status-overview.png")

	if err := os.WriteFile(heldConf, []byte("the predecessor, still writing\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	took := pageShows(t, ctx, pageBound, "a held file changed by something else", "1 changed by something else")
	t.Logf("held file changed by something else: on the page after %s", took.Round(time.Millisecond))
	// The board says what is in the way of the hub's next step, and the timeline has the host's
	// event, both without a reload.
	sectionShows(t, ctx, pageSettle, "what is in the way on the board", "#board-hub .blocking",
		"held file "+heldConf+" (legacy) changed by something else")
	sectionShows(t, ctx, pageSettle, "the host's event in the timeline", "section.history",
		"held file "+heldConf+" changed by something else (host)")
	screenshot(t, ctx, "status-changed.png")

	n.ok("module", "take", "hub", "legacy", "--no-wait") // the page follows the record, not the CLI
	took = pageShows(t, ctx, pageBound, "a module taken", "legacy: taken")
	t.Logf("module taken: on the page after %s", took.Round(time.Millisecond))
	sectionShows(t, ctx, pageSettle, "the take on the board's summary", "section.board", "0 of 1 nodes converged; 1 of "+modules+" modules taken")
	sectionShows(t, ctx, pageSettle, "the take in the timeline, with who gave it", "section.history",
		"legacy taken on hub root on hub's socket")
	if first, err := chromedp.Run(ctx, chromedp.Evaluate[string](
		`(function(){var e=document.querySelector("section.history li.event");return e?e.innerText:""})()`)); err != nil ||
		!strings.Contains(first, "legacy taken on hub") {
		t.Errorf("the timeline's newest event is %q (%v), want the take first", first, err)
	}

	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/node/hub")); err != nil {
		t.Fatal(err)
	}
	pageShows(t, ctx, 10*time.Second, "the node's page", "Last host report", `"node": "hub"`)
	screenshot(t, ctx, "status-node.png")
	// Issue 26, finding 4: the page asks no credential, and it served a held file's recorded
	// original to whoever reached it: an unprivileged user of the machine read a 0600 secret so.
	// The held file's row names the command that shows it, to root on the node (above).
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/node/hub/original?path="+heldConf)); err != nil {
		t.Fatal(err)
	}
	body, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
	if err != nil || strings.Contains(body, strings.TrimSpace(original)) {
		t.Errorf("the page still serves the original of %s: %q (%v)", heldConf, body, err)
	}
	out, err := exec.Command("ip", "netns", "exec", n.netns, "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
		"curl", "-sS", "-w", "\n%{http_code}", fmt.Sprintf("http://127.0.0.1:%d/node/hub/original?path=%s", pagePort, heldConf)).CombinedOutput()
	if err != nil || strings.Contains(string(out), strings.TrimSpace(original)) || !strings.HasSuffix(strings.TrimSpace(string(out)), "404") {
		t.Errorf("an unprivileged user asking the page for the original of %s got %q (%v), want a 404 without it", heldConf, out, err)
	}
}
