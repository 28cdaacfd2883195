package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"meshd/container"
	"meshd/ctrspec"
	"meshd/internal/testenv"
	"meshd/report"
)

// A take through the CLI on a real agent and the machine's Docker engine: --preview lists the
// held container (found id, image → new image, where it will be kept) and the held file without
// touching either; the take replaces the container, kept stopped under its moved-aside name, and
// `meshd node original hub container NAME` shows that name and the configuration replaced;
// `node original hub file PATH` shows the original's mode and owner and the latest bytes'.
func TestProcessTakePreviewAndOriginalContainer(t *testing.T) {
	n := newNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	eng := machineEngine(ctx, t)
	tag := randomTag()
	name, image := "pt-"+tag+"-web", "pt-test/web:"+tag
	if _, err := eng.ImportImage(ctx, image, labsvcBin, []string{"/labsvc", "serve"}); err != nil {
		t.Fatalf("import %s: %v", image, err)
	}
	t.Cleanup(func() {
		testenv.RemoveContainers(t, container.DefaultHost, name)
		_ = eng.RemoveImage(context.Background(), image)
	})
	predID, err := eng.Create(ctx, ctrspec.Spec{Name: name, Image: image, Env: map[string]string{"GREETING": "old"},
		Cmd: []string{"--listen", ":8080", "--name", "predecessor"}})
	if err != nil {
		t.Fatal(err)
	}
	etc := filepath.Join(t.TempDir(), "etc")
	if err := os.MkdirAll(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(etc, "web.conf")
	if err := os.WriteFile(conf, []byte("predecessor's\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(t.TempDir(), "web.yaml")
	os.WriteFile(manifest, []byte(fmt.Sprintf(`name: web
privileged: true
files:
  - path: %s
    content: "meshd's\n"
    mode: "0644"
containers:
  - name: %s
    image: %s
    env: {GREETING: new}
    command: ["--listen", ":8080", "--name", "web"]
`, conf, name, image)), 0o644)

	n.genesis("--adopted")
	n.startAgent("--docker-host", container.DefaultHost, "--reconcile-interval", "200ms")
	n.ok("module", "add", "--privileged", manifest)
	n.ok("module", "assign", "hub", "web")
	// At once, no poll: the preview waits for a report of a pass that knew of the assignment,
	// never reading the one before it (where nothing of web's is held yet).
	var first report.TakePreview
	n.jsonOf(&first, "module", "take", "hub", "web", "--preview")
	if len(first.Containers) != 1 || len(first.Files) != 1 || len(first.Created) != 0 {
		t.Fatalf("the preview right after the assign: %+v", first)
	}
	// Another edit of the held file while held: the preview says so.
	if err := os.WriteFile(conf, []byte("predecessor's, edited\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	var pv report.TakePreview
	poll(t, 10*time.Second, "preview shows the held file changed", func() string {
		n.jsonOf(&pv, "module", "take", "hub", "web", "--preview", "--json")
		if len(pv.Files) != 1 || !pv.Files[0].Changed {
			return fmt.Sprintf("files %+v", pv.Files)
		}
		return ""
	})
	c := pv.Containers[0]
	aside := name + ".meshd-replaced-" + predID[:12]
	if c.Name != name || c.FoundID != predID || c.NewImage != image || c.Aside != aside || !strings.Contains(strings.Join(c.Differences, ";"), "env GREETING") {
		t.Fatalf("preview of the container: %+v", c)
	}
	text := n.ok("module", "take", "hub", "web", "--preview")
	for _, want := range []string{name, "kept stopped as " + aside, conf, "changed by something else"} {
		if !strings.Contains(text, want) {
			t.Fatalf("preview text does not say %q:\n%s", want, text)
		}
	}
	if o, ok, _ := eng.Inspect(ctx, name); !ok || o.ID != predID || !o.Running {
		t.Fatal("the preview touched the found container")
	}
	// The take follows the node: it returns once the node's report says the module is carried
	// out, so the machine is already there when it does (no poll). Its progress, on a pipe, is
	// plain lines on stderr.
	out, errs, code := n.run("module", "take", "hub", "web")
	if code != 0 {
		t.Fatalf("module take hub web: exit %d\n%s%s", code, out, errs)
	}
	if !strings.Contains(out, "module web taken on node hub") || !strings.Contains(out, "carried out") {
		t.Fatalf("module take's answer does not say the node carried it out:\n%s", out)
	}
	t.Logf("module take hub web:\n%s%s", out, errs)
	if !strings.Contains(errs, "] recording the take of web on hub") || strings.ContainsAny(errs, "\r\033") {
		t.Fatalf("module take's progress on a pipe is not plain lines:\n%q", errs)
	}
	if o, ok, err := eng.Inspect(ctx, name); err != nil || !ok || o.ID == predID || !o.Running {
		t.Fatalf("module take returned before the node took %s: found %v, running %v, %v", name, ok, o.Running, err)
	}
	if b, _ := os.ReadFile(conf); string(b) != "meshd's\n" {
		t.Fatalf("module take returned before the node wrote %s: %q", conf, b)
	}
	if o, ok, _ := eng.Inspect(ctx, aside); !ok || o.ID != predID || o.Running {
		t.Fatalf("the replaced container is not kept stopped as %s", aside)
	}
	var cf report.ContainerFound
	n.jsonOf(&cf, "node", "original", "hub", "container", name, "--json")
	if cf.Aside != aside || cf.ReplacedID != predID || !strings.Contains(string(cf.Replaced), "GREETING=old") {
		t.Fatalf("node original container: %+v", cf)
	}
	if out := n.ok("node", "original", "hub", "container", name); !strings.Contains(out, "kept stopped as "+aside) || !strings.Contains(out, "docker start") {
		t.Fatalf("node original container text:\n%s", out)
	}
	var fo report.FileOriginal
	n.jsonOf(&fo, "node", "original", "hub", "file", conf, "--json")
	if fo.Mode != "0640" || fo.UID == nil || *fo.UID != 0 || fo.Latest == nil || !fo.Latest.ChangedSinceFound {
		t.Fatalf("node original file: %+v", fo)
	}
	if got := n.ok("node", "original", "hub", conf, "--latest"); got != "predecessor's, edited\n" {
		t.Fatalf("node original --latest: %q", got)
	}
	if got := n.ok("node", "original", "hub", conf); got != "predecessor's\n" {
		t.Fatalf("node original: %q", got)
	}
}

// A take the node cannot carry out (the module's image is not on the machine) exits 1 once the
// node's report says so, naming the node, the module, the resource and the node's reason, and the
// found container is back serving; with --json nothing but the error is printed (stdout empty).
// --no-wait returns once the record holds the take; a later take is refused (already taken).
func TestProcessTakeFailedNamesTheResource(t *testing.T) {
	n := newNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	eng := machineEngine(ctx, t)
	tag := randomTag()
	name, image := "pt-"+tag+"-bad", "pt-test/bad:"+tag
	if _, err := eng.ImportImage(ctx, image, labsvcBin, []string{"/labsvc", "serve"}); err != nil {
		t.Fatalf("import %s: %v", image, err)
	}
	t.Cleanup(func() {
		testenv.RemoveContainers(t, container.DefaultHost, name)
		_ = eng.RemoveImage(context.Background(), image)
	})
	predID, err := eng.Create(ctx, ctrspec.Spec{Name: name, Image: image, Cmd: []string{"--listen", ":8080", "--name", "predecessor"}})
	if err != nil {
		t.Fatal(err)
	}
	missing := "pt-test/not-here:" + tag
	manifest := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(manifest, []byte(fmt.Sprintf("name: bad\ncontainers:\n  - name: %s\n    image: %s\n    command: [\"--listen\", \":8080\"]\n", name, missing)), 0o644)
	n.genesis("--adopted")
	n.startAgent("--docker-host", container.DefaultHost, "--reconcile-interval", "200ms")
	n.ok("module", "add", manifest)
	n.ok("module", "assign", "hub", "bad")
	poll(t, 20*time.Second, "the found container held", func() string {
		var pv report.TakePreview
		n.jsonOf(&pv, "module", "take", "hub", "bad", "--preview")
		if len(pv.Containers) != 1 {
			return fmt.Sprintf("preview %+v", pv)
		}
		return ""
	})

	out, errs, code := n.run("module", "take", "hub", "bad", "--json", "--wait", "90s")
	if code != 1 || out != "" {
		t.Fatalf("a take the node cannot carry out: exit %d (want 1), stdout %q (want none)\n%s", code, out, errs)
	}
	t.Logf("the failed take: %s", strings.TrimSpace(errs))
	for _, want := range []string{"node hub could not carry out the take of module bad", "container:" + name, missing} {
		if !strings.Contains(errs, want) {
			t.Fatalf("the failed take's error does not say %q:\n%s", want, errs)
		}
	}
	if o, ok, err := eng.Inspect(ctx, name); err != nil || !ok || o.ID != predID || !o.Running {
		t.Fatalf("after the failed take the found container is not back serving: found %v, id %s, running %v, %v", ok, o.ID, o.Running, err)
	}
	if _, errs, code := n.run("module", "take", "hub", "bad", "--no-wait"); code != 1 || !strings.Contains(errs, "already taken") {
		t.Fatalf("a second take: exit %d, %s; want it refused, already taken", code, errs)
	}
}

// machineEngine is the machine's own Docker engine for a process test (closed with the test);
// without one the test skips locally and fails under CI.
func machineEngine(ctx context.Context, t *testing.T) *container.Engine {
	t.Helper()
	eng, err := container.New("", container.WithStopTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	if err := eng.Ping(ctx); err != nil {
		testenv.Prereq(t, "docker engine at %s: %v", container.DefaultHost, err)
	}
	return eng
}

// randomTag names a test's containers and images apart from another run's.
func randomTag() string {
	rnd := make([]byte, 3)
	_, _ = rand.Read(rnd)
	return hex.EncodeToString(rnd)
}
