package container

import (
	"strings"
	"testing"

	dcontainer "github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/go-connections/nat"
	dockerspec "github.com/moby/docker-image-spec/specs-go/v1"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"meshd/ctrspec"
)

func TestNormalizeImageRef(t *testing.T) {
	if a, b := NormalizeImageRef("echo"), NormalizeImageRef("docker.io/library/echo:latest"); a != b {
		t.Errorf("%s != %s", a, b)
	}
	if a, b := NormalizeImageRef("ct-test/echo:1"), NormalizeImageRef("ct-test/echo:2"); a == b {
		t.Errorf("different tags normalise equal: %s", a)
	}
}

// syntheticObserved is what the engine reports for a container created from spec by an engine
// whose image sets PATH and a label; used where no engine is needed.
func syntheticObserved(spec ctrspec.Spec) Observed {
	cfg, hc, _ := engineConfig(spec)
	cfg.Env = append([]string{"PATH=/usr/bin:/bin"}, cfg.Env...)
	cfg.Labels["org.example.built-by"] = "ct"
	hc.Mounts = nil
	ns := &dcontainer.NetworkSettings{}
	ns.Ports = nat.PortMap{}
	for p, bs := range hc.PortBindings {
		for _, b := range bs {
			ip := b.HostIP
			if ip == "" {
				ip = "0.0.0.0"
			}
			ns.Ports[p] = append(ns.Ports[p], nat.PortBinding{HostIP: ip, HostPort: b.HostPort})
		}
	}
	c := dcontainer.InspectResponse{
		ContainerJSONBase: &dcontainer.ContainerJSONBase{
			ID: strings.Repeat("ab", 32), Name: "/" + spec.Name, Image: "sha256:" + strings.Repeat("cd", 32),
			State: &dcontainer.State{Running: true, Status: "running"}, HostConfig: hc,
		},
		Config: cfg, NetworkSettings: ns,
	}
	img := &image.InspectResponse{ID: c.Image, Config: &dockerspec.DockerOCIImageConfig{
		ImageConfig: ocispec.ImageConfig{Env: []string{"PATH=/usr/bin:/bin"}, Labels: map[string]string{"org.example.built-by": "ct"}},
	}}
	return observe(c, nil, img, c.Image, nil)
}

var benchSpec = ctrspec.Spec{
	Name:    "ct-bench-webapp",
	Image:   "ct-test/echo:1",
	Env:     map[string]string{"GREETING": "hi", "MODE": "bench", "DB_URL": "postgres://db:5432/app", "LOG": "info"},
	Ports:   []string{"127.0.0.1:18080:8080", "9090:9090/udp", "[::1]:18081:8081"},
	Volumes: []string{"/srv/app:/data:ro", "/srv/app/cache:/cache"},
	Restart: ctrspec.RestartUnlessStopped,
	Labels:  map[string]string{ctrspec.LabelManaged: "true", ctrspec.LabelModule: "webapp", "tier": "front"},
	Cmd:     []string{"--listen", ":8080"},
}

func TestDiffSynthetic(t *testing.T) {
	o := syntheticObserved(benchSpec)
	if d := Diff(benchSpec, o); len(d) != 0 {
		t.Fatalf("Diff of an unchanged spec = %q", d)
	}
	// Engine-added PATH on an image without one is not a difference either.
	o2 := syntheticObserved(benchSpec)
	o2.ImageEnv = map[string]string{}
	o2.Env["PATH"] = enginePath
	if d := Diff(benchSpec, o2); len(d) != 0 {
		t.Errorf("engine default PATH reported: %q", d)
	}
	// A hand-set variable is.
	o2.Env["DEBUG"] = "1"
	if d := Diff(benchSpec, o2); len(d) != 1 || !strings.HasPrefix(d[0], "env DEBUG") {
		t.Errorf("extra env: %q", d)
	}
	// Image gone from the engine: declared values are still compared, extras are not guessed.
	o3 := syntheticObserved(benchSpec)
	o3.ImageKnown, o3.ImageEnv, o3.ImageLabels = false, nil, nil
	if d := Diff(benchSpec, o3); len(d) != 0 {
		t.Errorf("unknown image: %q", d)
	}
	// Same reference, another image behind it now.
	o4 := syntheticObserved(benchSpec)
	o4.RefImageID = "sha256:" + strings.Repeat("ef", 32)
	if d := Diff(benchSpec, o4); len(d) != 1 || !strings.HasPrefix(d[0], "image") {
		t.Errorf("re-tagged image: %q", d)
	}
}

// BenchmarkDiffUnchanged is the cost of the check every reconcile makes for every container.
func BenchmarkDiffUnchanged(b *testing.B) {
	o := syntheticObserved(benchSpec)
	b.ReportAllocs()
	for b.Loop() {
		if d := Diff(benchSpec, o); len(d) != 0 {
			b.Fatal(d)
		}
	}
}
