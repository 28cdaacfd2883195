package container

import (
	"encoding/json"
	"fmt"
	"maps"
	"os/exec"
	"strings"
	"testing"

	"meshd/catalogue"
	"meshd/ctrspec"
	"meshd/draft"
	"meshd/fsm"
	"meshd/internal/testenv"
	"meshd/report"
)

// dockerInspect is `docker inspect NAME`'s one object.
func dockerInspect(t *testing.T, name string) json.RawMessage {
	t.Helper()
	out, err := exec.Command("docker", "inspect", name).Output()
	if err != nil {
		t.Fatalf("docker inspect %s: %v", name, err)
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(out, &raws); err != nil || len(raws) != 1 {
		t.Fatalf("docker inspect %s: %v (%d objects)", name, err, len(raws))
	}
	return raws[0]
}

// TestDraftedContainerInspectsTheSame: a container made by hand as Compose leaves one (project
// label, user-defined network with an alias, non-root user, added capability, memory limit,
// health check, a container port differing from the published one, a bind and a named
// volume...) is drafted, the manifest parsed by the catalogue and made a Spec as the host does,
// the found container removed and one created from the Spec in its place: `docker inspect` of
// the two is the same but for meshd's labels and what the engine assigns.
func TestDraftedContainerInspectsTheSame(t *testing.T) {
	e := requireEngine(t)
	img := labsvcImages(t, e)
	ctx := testCtx(t)
	name := testName(t, "drafted")
	net, vol, port := name+"-net", name+"-data", testenv.FreePort(t)
	t.Cleanup(func() {
		testenv.RemoveContainers(t, DefaultHost, name)
		_ = exec.Command("docker", "network", "rm", net).Run()
		_ = exec.Command("docker", "volume", "rm", "-f", vol).Run()
	})
	if out, err := exec.Command("docker", "network", "create", net).CombinedOutput(); err != nil {
		t.Fatalf("docker network create: %v\n%s", err, out)
	}
	run := exec.Command("docker", "run", "-d", "--name", name, "--network", net, "--network-alias", "api",
		"--label", "com.docker.compose.project=shop", "--label", "com.docker.compose.service=api",
		"--cap-add", "NET_ADMIN", "--cap-drop", "MKNOD", "--user", "65534:65534", "--memory", "64m",
		"--health-cmd", "/labsvc health", "--health-interval", "5s", "-e", "API_TOKEN=s3cret", "-e", "MODE=prod",
		"-p", fmt.Sprintf("127.0.0.1:%d:8080", port), "-v", t.TempDir()+":/bind:ro", "-v", vol+":/data",
		"--restart", "unless-stopped", "--workdir", "/work", "--stop-signal", "SIGINT", "--stop-timeout", "3",
		"--tmpfs", "/run:size=1m", "--read-only", "--init", "--security-opt", "no-new-privileges",
		"--ulimit", "nofile=1024:2048", "--dns", "10.1.2.53", "--add-host", "db:10.1.2.3", "--hostname", "apihost",
		"--log-opt", "max-size=1m", img.echo, "serve", "--listen", ":8080")
	if out, err := run.CombinedOutput(); err != nil {
		t.Fatalf("docker run: %v\n%s", err, out)
	}
	o, found, err := e.Inspect(ctx, name)
	if err != nil || !found {
		t.Fatalf("Inspect = %v, %v", found, err)
	}
	before := dockerInspect(t, name)
	res := draft.Draft(draft.Input{Node: "hub", Containers: []draft.Container{
		{Spec: o.Spec, ImageID: o.ImageID, RefImageID: o.RefImageID, Labels: o.Labels}}})
	if len(res.Refused) > 0 || len(res.Modules) != 1 {
		t.Fatalf("draft: %d modules, refused %v", len(res.Modules), res.Refused)
	}
	m := res.Modules[0]
	parsed, err := catalogue.Parse(m.File, m.Manifest)
	if err != nil {
		t.Fatalf("the catalogue refuses the draft: %v\n%s", err, m.Manifest)
	}
	r, err := parsed.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	spec := report.SpecOf(fsm.Resource{Module: m.Name, Kind: fsm.KindContainer, Container: &r.Containers[0]})
	own := spec
	own.Labels = maps.Clone(spec.Labels)
	for k := range ctrspec.ManagedLabels(m.Name) {
		delete(own.Labels, k)
	}
	if d := Diff(own, o); len(d) > 0 {
		t.Errorf("the drafted Spec differs from the found container:\n%s", strings.Join(d, "\n"))
	}
	testenv.RemoveContainers(t, DefaultHost, name)
	if _, err := e.Create(ctx, spec); err != nil {
		t.Fatalf("create from the draft: %v\n%s", err, m.Manifest)
	}
	diff, err := InspectDiff(before, dockerInspect(t, name), "meshd.")
	if err != nil {
		t.Fatal(err)
	}
	if len(diff) > 0 {
		t.Errorf("docker inspect of the container made from the draft differs from the found one's:\n%s\nmanifest:\n%s",
			strings.Join(diff, "\n"), m.Manifest)
	}
	serves(t, port, "from apihost")
}
