// Command statusshot takes the status page's screenshots for docs/img: it opens each page in
// Debian's headless Chromium, waits until the page shows every text asked for, and writes a
// full-page PNG.
//
//	statusshot --base http://127.0.0.1:9180 --out docs/img \
//	  --page status-overview.png=/ --want 'mesh-up' [--page NAME=PATH --want TEXT ...]
//
// Each --want belongs to the --page before it. `make screenshots` runs it from the demo's lab
// (scripts/demo.sh with SCREENSHOTS=DIR), inside the hub's network namespace, so the screenshots
// show a lab whose machines are up, not a test's bed.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/chromedp/chromedp"
)

// page is one screenshot: the page at path, taken once it shows every want.
type page struct {
	name, path string
	want       []string
}

func main() {
	base := flag.String("base", "http://127.0.0.1:9180", "the status page's address")
	out := flag.String("out", "docs/img", "the folder the PNGs are written to")
	wait := flag.Duration("wait", 30*time.Second, "how long a page may take to show what is wanted")
	var pages []page
	flag.Func("page", "NAME=PATH: a screenshot NAME of the page at PATH (repeat)", func(s string) error {
		name, path, ok := strings.Cut(s, "=")
		if !ok || name == "" || !strings.HasPrefix(path, "/") {
			return errors.New("want NAME=/PATH")
		}
		pages = append(pages, page{name: name, path: path})
		return nil
	})
	flag.Func("want", "TEXT the page before must show before it is taken (repeat)", func(s string) error {
		if len(pages) == 0 {
			return errors.New("--want belongs to a --page before it")
		}
		pages[len(pages)-1].want = append(pages[len(pages)-1].want, s)
		return nil
	})
	flag.Parse()
	if len(pages) == 0 {
		fmt.Fprintln(os.Stderr, "statusshot: no --page given")
		os.Exit(2)
	}
	if err := run(*base, *out, *wait, pages); err != nil {
		fmt.Fprintln(os.Stderr, "statusshot:", err)
		os.Exit(1)
	}
}

func run(base, out string, wait time.Duration, pages []page) error {
	bin, err := exec.LookPath("chromium")
	if err != nil {
		return fmt.Errorf("no chromium (scripts/deps.sh installs it): %w", err)
	}
	profile, err := os.MkdirTemp("", "statusshot-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(profile)
	actx, cancel := chromedp.NewExecAllocator(context.Background(), chromedp.ExecPath(bin),
		chromedp.Headless, chromedp.NoSandbox, chromedp.WindowSize(1400, 1000),
		chromedp.Flag("disable-gpu", true), chromedp.Flag("user-data-dir", profile))
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, p := range pages {
		if err := chromedp.Do(ctx, chromedp.Navigate(base+p.path)); err != nil {
			return fmt.Errorf("%s: %w", p.path, err)
		}
		if err := shows(ctx, wait, p); err != nil {
			return err
		}
		shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			return fmt.Errorf("screenshot %s: %w", p.name, err)
		}
		if err := os.WriteFile(filepath.Join(out, p.name), shot, 0o644); err != nil {
			return err
		}
		fmt.Printf("statusshot: %s from %s\n", filepath.Join(out, p.name), p.path)
	}
	return nil
}

// shows waits until the page's text holds every one of p.want, at most wait.
func shows(ctx context.Context, wait time.Duration, p page) error {
	deadline := time.Now().Add(wait)
	for {
		text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
		missing := ""
		for _, w := range p.want {
			if !strings.Contains(text, w) {
				missing = w
				break
			}
		}
		if err == nil && missing == "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not show %q within %s (err %v); it shows:\n%s",
				p.path, missing, wait, err, text)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
