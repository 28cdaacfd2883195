package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"meshd/internal/testenv"
	"meshd/report"
)

// The converge preview through the CLI on a real agent in its own network namespace: a service
// listening on the unspecified address that no module declares is named "will close" and the
// preview exits 2; its JSON parses; once a module assigned to the node declares the port, the
// preview exits 0. Converge without --preview is refused, saying only the preview is built.
func TestProcessConvergePreview(t *testing.T) {
	n := newNode(t)
	n.genesis("--adopted")
	n.startAgent("--reconcile-interval", "200ms")
	port := testenv.FreePort(t)
	svc := n.inNetns(labsvcBin, "serve", "--listen", fmt.Sprintf("0.0.0.0:%d", port), "--name", "undeclared")
	if err := svc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Process.Kill(); _ = svc.Wait() })

	// Go's listener on 0.0.0.0 is dual-stack: the socket is tcp [::]:PORT.
	want := fmt.Sprintf(":%d ", port)
	var text string
	poll(t, 20*time.Second, "the preview names the undeclared listener and exits 2", func() string {
		out, errs, code := n.run("converge", "hub", "--preview")
		text = out
		if code != 2 || !strings.Contains(out, want) || !strings.Contains(out, "labsvc") {
			return fmt.Sprintf("exit %d\n%s%s", code, out, errs)
		}
		return ""
	})
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, want) && !strings.Contains(line, "will close") {
			t.Fatalf("the undeclared listener is not marked will close: %q\n%s", line, text)
		}
	}
	if !strings.Contains(text, "plan token") {
		t.Fatalf("the preview does not end with a plan token:\n%s", text)
	}

	out, errs, code := n.run("converge", "hub", "--preview", "--json")
	var pv report.ConvergePreview
	if err := json.Unmarshal([]byte(out), &pv); err != nil || code != 2 {
		t.Fatalf("--json: exit %d, %v\n%s%s", code, err, out, errs)
	}
	found := false
	for _, l := range pv.Listeners {
		if l.Port == uint16(port) && l.Proto == "tcp" {
			found = l.Verdict.Mark == report.MarkWillClose && l.Process != "" && l.PID != 0
		}
	}
	if !found || pv.WillClose == 0 || len(pv.Token) != 16 || pv.Node != "hub" {
		t.Fatalf("--json preview: %+v", pv)
	}

	// The refusal sends the operator to the preview: it does not hand out the token that would
	// close them unread.
	if _, errs, code := n.run("converge", "hub"); code != 1 || !strings.Contains(errs, "will close") || !strings.Contains(errs, "meshd converge hub --preview") || strings.Contains(errs, pv.Token) {
		t.Fatalf("converge without a plan while something will close: exit %d, %s", code, errs)
	}

	manifest := filepath.Join(t.TempDir(), "svc.yaml")
	if err := os.WriteFile(manifest, []byte(fmt.Sprintf("name: svc\nopenings:\n  - {port: \"%d\", from: anywhere, path: incoming}\n", port)), 0o644); err != nil {
		t.Fatal(err)
	}
	n.ok("module", "add", manifest)
	n.ok("module", "assign", "hub", "svc")
	poll(t, 20*time.Second, "the preview exits 0 once the port is declared", func() string {
		out, errs, code := n.run("converge", "hub", "--preview")
		if code != 0 {
			return fmt.Sprintf("exit %d\n%s%s", code, out, errs)
		}
		if !strings.Contains(out, "declared by svc") || !strings.Contains(out, "nothing will close") {
			return out
		}
		return ""
	})
	var after report.ConvergePreview
	n.jsonOf(&after, "converge", "hub", "--preview")
	if after.Token == pv.Token || after.WillClose != 0 || !strings.Contains(","+strings.Join(after.Take, ",")+",", ",svc,") {
		t.Fatalf("after declaring: token %s (was %s), will close %d, take %v", after.Token, pv.Token, after.WillClose, after.Take)
	}
	if !strings.Contains(after.Filter, fmt.Sprintf("tcp dport %d accept", port)) || !strings.Contains(after.Filter, "policy drop") {
		t.Fatalf("the preview's derived filter does not open the declared port %d:\n%s", port, after.Filter)
	}

	// The stale token (made before the port was declared) is refused, naming what changed.
	_, errs, code = n.run("converge", "hub", "--plan", pv.Token)
	if code != 1 || !strings.Contains(errs, "changed since the preview") || !strings.Contains(errs, fmt.Sprintf(":%d (labsvc): declared by svc", port)) {
		t.Fatalf("a stale plan token: exit %d, %s", code, errs)
	}
	// The flip with the token of the preview read: the record says converged, the derived filter
	// is loaded with the declared port, and the return unloads it.
	out, errs, code = n.run("converge", "hub", "--plan", after.Token, "--wait", "60s")
	if code != 0 || !strings.Contains(out, "hub is converged") || !strings.Contains(out, "inet meshd_filter loaded") {
		t.Fatalf("converge --plan: exit %d\n%s%s", code, out, errs)
	}
	table := n.inNetns("nft", "list", "table", "inet", "meshd_filter")
	if b, err := table.CombinedOutput(); err != nil || !strings.Contains(string(b), fmt.Sprintf("tcp dport %d accept", port)) {
		t.Fatalf("the derived filter on the machine: %v\n%s", err, b)
	}
	if _, errs, code := n.run("converge", "hub"); code != 1 || !strings.Contains(errs, "already converged") {
		t.Fatalf("converging a converged node: exit %d, %s", code, errs)
	}
	// A new user's loop: the preview of a converged node handed out a plan token, and the flip
	// with it was refused as already converged. The preview says so and offers no token.
	if out, errs, code := n.run("converge", "hub", "--preview"); code != 0 || !strings.Contains(out, "hub is already converged") || strings.Contains(out, "plan token\t") || strings.Contains(out, "plan token ") {
		t.Fatalf("the preview of a converged node: exit %d\n%s%s", code, out, errs)
	}
	var conv report.ConvergePreview
	n.jsonOf(&conv, "converge", "hub", "--preview")
	if !conv.Converged || conv.Token != "" {
		t.Fatalf("--json preview of a converged node: converged %v, token %q", conv.Converged, conv.Token)
	}
	if _, errs, code := n.run("converge", "hub", "--plan", after.Token); code != 1 || !strings.Contains(errs, "already converged") {
		t.Fatalf("converging a converged node with its old plan: exit %d, %s", code, errs)
	}
	var adopted struct{ Name, Mode string }
	n.jsonOf(&adopted, "adopt", "hub", "--wait", "60s")
	if adopted.Name != "hub" || adopted.Mode != "adopted" {
		t.Fatalf("adopt --json: %+v, want hub adopted", adopted)
	}
	if b, err := n.inNetns("nft", "list", "table", "inet", "meshd_guard").CombinedOutput(); err != nil {
		t.Fatalf("the guard is not loaded after the return: %v\n%s", err, b)
	}
	if b, err := n.inNetns("nft", "list", "table", "inet", "meshd_filter").CombinedOutput(); err == nil {
		t.Fatalf("the derived filter is still loaded after the return:\n%s", b)
	}
}
