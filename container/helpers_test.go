package container

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
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"meshd/internal/testenv"
)

// The tests run against the machine's real engine. Everything they make is named with the ct
// prefix and a random run id, and removed again.

var runID = randHex(4)

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

var (
	dockerOnce sync.Once
	dockerErr  error
)

// requireEngine returns an Engine on the machine's engine, or skips/fails when there is none.
func requireEngine(t testing.TB) *Engine {
	t.Helper()
	e, err := New("")
	if err != nil {
		t.Fatal(err)
	}
	dockerOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		dockerErr = e.Ping(ctx)
	})
	if dockerErr != nil {
		testenv.Prereq(t, "docker engine at %s: %v", DefaultHost, dockerErr)
	}
	return e
}

// rawClient is the Docker API without this package: how a predecessor creates its containers.
func rawClient(t testing.TB) *client.Client {
	t.Helper()
	cli, err := client.NewClientWithOpts(client.WithHost(DefaultHost), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// testImages are the two images the tests run, built once per test binary from cmd/labsvc.
type testImages struct {
	echo, echo2 string // two images of the same binary, different ids
	binary      string
}

var (
	imagesOnce  sync.Once
	images      testImages
	imagesErr   error
	imagesBuilt []string
	buildDir    string
)

func labsvcImages(t testing.TB, e *Engine) testImages {
	t.Helper()
	imagesOnce.Do(func() {
		buildDir, imagesErr = os.MkdirTemp("", "ct-build-")
		if imagesErr != nil {
			return
		}
		bin := filepath.Join(buildDir, "labsvc")
		cmd := exec.Command("go", "build", "-o", bin, "./cmd/labsvc")
		cmd.Dir = ".."
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			imagesErr = fmt.Errorf("build cmd/labsvc: %v\n%s", err, out)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		images = testImages{echo: "ct-test/echo:" + runID, echo2: "ct-test/echo2:" + runID, binary: bin}
		for _, ref := range []string{images.echo, images.echo2} {
			if _, err := e.ImportImage(ctx, ref, bin, []string{"/labsvc", "serve"},
				// like a real image: an env and a label every container inherits
				"ENV PATH=/usr/local/bin:/usr/bin:/bin", "ENV GREETING=hello", "LABEL org.example.built-by=ct"); err != nil {
				imagesErr = err
				return
			}
			imagesBuilt = append(imagesBuilt, ref)
		}
	})
	if imagesErr != nil {
		t.Fatalf("test images: %v", imagesErr)
	}
	return images
}

func TestMain(m *testing.M) {
	code := m.Run()
	if len(imagesBuilt) > 0 {
		e, err := New("")
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			for _, ref := range imagesBuilt {
				if err := e.RemoveImage(ctx, ref); err != nil {
					fmt.Fprintf(os.Stderr, "cleanup: %v\n", err)
					code = 1
				}
			}
			cancel()
		}
	}
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// containerName returns a unique container name and removes whatever carries it (or was moved
// aside by Replace) when the test ends.
func testName(t testing.TB, what string) string {
	t.Helper()
	name := fmt.Sprintf("ct-%s-%s", randHex(3), what)
	t.Cleanup(func() { testenv.RemoveContainers(t, DefaultHost, name) })
	return name
}

// serves polls http://127.0.0.1:port/ until it answers with want in the body, or fails after
// the deadline with the last thing it saw.
func serves(t testing.TB, port int, want string) {
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
			if resp.StatusCode == http.StatusOK && strings.Contains(string(body), want) {
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

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}
