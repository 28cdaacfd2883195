package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// probe calls one target again and again and appends one timestamped line per call to --out:
//
//	2026-01-02T15:04:05.123456789Z ok 1.2ms hello from webapp
//	2026-01-02T15:04:05.373456789Z fail 1s dial tcp 198.51.100.10:6379: i/o timeout
//
// A target is http://HOST:PORT/PATH (success: any HTTP response with status < 500) or
// tcp://HOST:PORT (success: the connection was accepted); HOST may be an IPv6 address in
// brackets. Several --target (each with its --out) run side by side in one process. Package lab
// reads the file back into a summary; the format is the contract between the two.
func probe(args []string) error {
	fs := flag.NewFlagSet("probe", flag.ExitOnError)
	var targets, outs listFlag
	fs.Var(&targets, "target", "http://HOST:PORT/PATH or tcp://HOST:PORT (repeatable: one probe each)")
	every := fs.Duration("every", 250*time.Millisecond, "interval between calls")
	timeout := fs.Duration("timeout", time.Second, "timeout of one call")
	fs.Var(&outs, "out", "file to append results to, one per --target in order (default: stdout)")
	_ = fs.Parse(args)
	if len(targets) == 0 {
		return fmt.Errorf("probe: no --target")
	}
	if len(outs) > 0 && len(outs) != len(targets) {
		return fmt.Errorf("probe: %d --target but %d --out: give one --out per --target", len(targets), len(outs))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// Several probes in one process (one container of the lab calling several of its neighbours):
	// each its own loop and record, the first error ending them all.
	errc := make(chan error, len(targets))
	for i, target := range targets {
		out := ""
		if len(outs) > 0 {
			out = outs[i]
		}
		go func() { errc <- probeOne(ctx, target, out, *every, *timeout) }()
	}
	for range targets {
		if err := <-errc; err != nil {
			return err
		}
	}
	return nil
}

// probeOne calls target every interval until ctx ends, appending one line per call to out.
func probeOne(ctx context.Context, target, out string, every, timeout time.Duration) error {
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "tcp") || u.Host == "" {
		return fmt.Errorf("probe: target %q is not http://HOST:PORT/ or tcp://HOST:PORT", target)
	}
	var w io.Writer = os.Stdout
	if out != "" {
		f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("probe: open %s: %w", out, err)
		}
		defer f.Close()
		w = f
	}
	client := &http.Client{
		Timeout: timeout,
		// A fresh connection per call, so a call measures the path as it is now.
		Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil},
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		start := time.Now()
		detail, err := call(ctx, client, u, timeout)
		took := time.Since(start).Round(100 * time.Microsecond)
		status := "ok"
		if err != nil {
			status, detail = "fail", err.Error()
		}
		detail = strings.Join(strings.Fields(detail), " ")
		if _, err := fmt.Fprintf(w, "%s %s %s %s\n", start.UTC().Format(time.RFC3339Nano), status, took, detail); err != nil {
			return fmt.Errorf("probe: write result: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func call(ctx context.Context, client *http.Client, u *url.URL, timeout time.Duration) (string, error) {
	if u.Scheme == "tcp" {
		d := net.Dialer{Timeout: timeout}
		c, err := d.DialContext(ctx, "tcp", u.Host)
		if err != nil {
			return "", err
		}
		_ = c.Close()
		return "connected", nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 200))
	if resp.StatusCode >= 500 {
		return "", fmt.Errorf("status %d: %s", resp.StatusCode, body)
	}
	return string(body), nil
}
