package hosttest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"meshd/catalogue"
	"meshd/container"
	"meshd/ctrspec"
	"meshd/fsm"
	"meshd/internal/testenv"
	"meshd/report"
)

// The container tests run against this machine's Docker engine (and one private engine of their
// own, in its own network namespace). Everything they make is named hc-<random>-… and removed.

// Rand is n random bytes in hex, for names no other test run uses.
func Rand(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Engine returns the machine's engine, or skips (fails under CI=true) when there is none.
func Engine(t *testing.T) *container.Engine {
	t.Helper()
	eng, err := container.New("", container.WithLogger(Log()), container.WithStopTimeout(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := eng.Ping(ctx); err != nil {
		testenv.Prereq(t, "docker engine at %s: %v", container.DefaultHost, err)
	}
	t.Cleanup(func() { eng.Close() })
	return eng
}

// Labsvc builds cmd/labsvc, the static program every test image is made of.
func Labsvc(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "labsvc")
	cmd := exec.Command("go", "build", "-o", bin, "meshd/cmd/labsvc")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build cmd/labsvc: %v\n%s", err, out)
	}
	return bin
}

// Import makes an image of labsvc on eng (`docker import`), removed when the test ends.
func Import(t *testing.T, eng *container.Engine, what, bin string, changes ...string) string {
	t.Helper()
	ref := fmt.Sprintf("hc-test/%s:%s", what, Rand(4))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	changes = append([]string{"ENV GREETING=hello"}, changes...)
	if _, err := eng.ImportImage(ctx, ref, bin, []string{"/labsvc", "serve"}, changes...); err != nil {
		t.Fatalf("import %s: %v", ref, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := eng.RemoveImage(ctx, ref); err != nil {
			t.Logf("cleanup image %s: %v", ref, err)
		}
	})
	return ref
}

// ContainerName returns a unique container name on the engine at host, and removes whatever carries
// it (or was moved aside by a replace) when the test ends.
func ContainerName(t *testing.T, host, what string) string {
	t.Helper()
	name := fmt.Sprintf("hc-%s-%s", Rand(3), what)
	if host == "" {
		host = container.DefaultHost
	}
	t.Cleanup(func() { testenv.RemoveContainers(t, host, name) })
	return name
}

// FreePort is a TCP port free just now (testenv.FreePort).
func FreePort(t *testing.T) int { t.Helper(); return testenv.FreePort(t) }

// Serves polls http://127.0.0.1:port/ until the answer holds want.
func Serves(t *testing.T, port int, want string) {
	t.Helper()
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(20 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		resp, err := hc.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(body), want) {
				return
			}
			last = fmt.Sprintf("status %d body %q", resp.StatusCode, body)
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("GET %s never answered %q; last: %s", url, want, last)
}

// DockerCtx is a context for engine calls, ended after two minutes or with the test.
func DockerCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// Predecessor creates a container the way the predecessor did: no meshd labels.
func Predecessor(t *testing.T, eng *container.Engine, name, image string, port int, greeting string) string {
	t.Helper()
	id, err := eng.Create(DockerCtx(t), ctrspec.Spec{Name: name, Image: image, Env: map[string]string{"GREETING": greeting},
		Ports: []string{fmt.Sprintf("127.0.0.1:%d:8080", port)}, Restart: ctrspec.RestartUnlessStopped,
		Cmd: []string{"--listen", ":8080", "--name", "predecessor"}})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// Inspect reads the container name on eng, and whether it is there.
func Inspect(t *testing.T, eng *container.Engine, name string) (container.Observed, bool) {
	t.Helper()
	o, found, err := eng.Inspect(DockerCtx(t), name)
	if err != nil {
		t.Fatal(err)
	}
	return o, found
}

// webapp is a module's declaration of one labsvc container answering "GREETING from NAME" on
// 127.0.0.1:port.
func Webapp(module, name, image string, port int, greeting string, taken bool) fsm.Resource {
	return fsm.Resource{Module: module, Kind: fsm.KindContainer, Taken: taken, Container: &catalogue.Container{
		Name: name, Image: image, Env: map[string]string{"GREETING": greeting},
		Ports:   []string{fmt.Sprintf("127.0.0.1:%d:8080/tcp", port)},
		Restart: ctrspec.RestartUnlessStopped,
		Command: []string{"--listen", ":8080", "--name", name},
	}}
}

// ContainersOf is the container driver's part of rep; the test fails without one.
func ContainersOf(t *testing.T, rep report.Report) *report.ContainerReport {
	t.Helper()
	cr, ok := rep.Kinds[fsm.KindContainer].(*report.ContainerReport)
	if !ok {
		t.Fatalf("no container report in %+v", rep.Kinds)
	}
	return cr
}

// ContainerOf is the container name in rep; the test fails without it.
func ContainerOf(t *testing.T, rep report.Report, name string) report.ContainerView {
	t.Helper()
	for _, v := range ContainersOf(t, rep).Containers {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("container %s not in the report: %+v", name, ContainersOf(t, rep).Containers)
	return report.ContainerView{}
}
