package container

import (
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"meshd/catalogue"
	"meshd/ctrspec"
	"meshd/fsm"
	"meshd/report"
)

// specOf is a manifest's one container as the host makes it a Spec (report.SpecOf).
func specOf(t *testing.T, manifest string) ctrspec.Spec {
	t.Helper()
	m, err := catalogue.Parse("m.yaml", []byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	r, err := m.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	return report.SpecOf(fsm.Resource{Module: m.Name, Kind: fsm.KindContainer, Container: &r.Containers[0]})
}

// A container created with `--entrypoint ""` runs its command alone: the engine stores no
// entrypoint where it would otherwise copy the image's. It was read as keeping the image's, so a
// declaration of the image's entrypoint matched it and its draft ran the image's entrypoint.
// It reads as [""] (ctrspec.NoEntrypoint); a manifest's `entrypoint: [""]` creates it so and
// reads back the same.
func TestEmptyEntrypointReadsAsNone(t *testing.T) {
	e := requireEngine(t)
	requireDockerCLI(t)
	img := labsvcImages(t, e) // its entrypoint: /labsvc serve
	ctx := testCtx(t)
	byHand := testName(t, "noentry")
	if out, err := exec.Command("docker", "create", "--name", byHand, "--entrypoint", "", img.echo, "/labsvc", "serve").CombinedOutput(); err != nil {
		t.Fatalf("docker create: %v\n%s", err, out)
	}
	o, found, err := e.Inspect(ctx, byHand)
	if err != nil || !found {
		t.Fatalf("Inspect = %v, %v", found, err)
	}
	if !slices.Equal(o.Spec.Entrypoint, ctrspec.NoEntrypoint()) {
		t.Fatalf("entrypoint read as %q, want %q", o.Spec.Entrypoint, ctrspec.NoEntrypoint())
	}
	imageDefault := ctrspec.Spec{Name: byHand, Image: img.echo, Cmd: []string{"/labsvc", "serve"}}
	if d := Diff(imageDefault, o); !slices.ContainsFunc(d, func(s string) bool { return strings.Contains(s, "entrypoint none → the image's default") }) {
		t.Errorf("against the image's entrypoint, Diff = %q, want the entrypoint named", d)
	}

	name := testName(t, "noentry2")
	spec := specOf(t, fmt.Sprintf("name: noentry\ncontainers:\n  - name: %s\n    image: %q\n    entrypoint: [\"\"]\n    command: [/labsvc, serve]\n", name, img.echo))
	if _, err := e.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	o, _, err = e.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(o.Spec.Entrypoint, ctrspec.NoEntrypoint()) {
		t.Errorf("created with entrypoint [\"\"]: read back %q", o.Spec.Entrypoint)
	}
	if d := Diff(spec, o); len(d) != 0 {
		t.Errorf("created with entrypoint [\"\"]: Diff = %q, want none", d)
	}
}

// A manifest's `restart: on-failure:5` (the catalogue refused it, though docker run and Compose
// take it) creates the container with a retry limit of 5, reads back as on-failure:5, and a
// declaration of another limit is a difference.
func TestRestartRetryLimitRoundTrips(t *testing.T) {
	e := requireEngine(t)
	img := labsvcImages(t, e)
	ctx := testCtx(t)
	name := testName(t, "retry")
	spec := specOf(t, fmt.Sprintf("name: retry\ncontainers:\n  - name: %s\n    image: %q\n    restart: on-failure:5\n", name, img.echo))
	if _, err := e.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	c, err := rawClient(t).ContainerInspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if p := c.HostConfig.RestartPolicy; p.Name != "on-failure" || p.MaximumRetryCount != 5 {
		t.Fatalf("the engine's restart policy: %+v, want on-failure with 5 retries", p)
	}
	o, _, err := e.Inspect(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if o.Spec.Restart != "on-failure:5" {
		t.Errorf("read back restart %q, want on-failure:5", o.Spec.Restart)
	}
	if d := Diff(spec, o); len(d) != 0 {
		t.Errorf("Diff of its own declaration = %q, want none", d)
	}
	other := spec
	other.Restart = "on-failure:3"
	if d := Diff(other, o); !slices.Contains(d, "restart: declared on-failure:3, container has on-failure:5") {
		t.Errorf("Diff against on-failure:3 = %q", d)
	}
}
