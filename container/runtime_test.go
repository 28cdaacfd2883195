package container

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"meshd/catalogue"
	"meshd/ctrspec"
	"meshd/fsm"
	"meshd/internal/testenv"
	"meshd/report"
)

// fullSpec is a module's manifest declaring every field a container on user-defined networks can
// have, parsed by the catalogue and made a Spec as the host makes one (report.SpecOf).
func fullSpec(t *testing.T, name, image string, port int) ctrspec.Spec {
	t.Helper()
	net1, net2, vol := name+"-a", name+"-b", name+"-data"
	t.Cleanup(func() {
		testenv.RemoveContainers(t, DefaultHost, name)
		_ = exec.Command("docker", "network", "rm", net1, net2).Run()
		_ = exec.Command("docker", "volume", "rm", "-f", vol).Run()
	})
	manifest := fmt.Sprintf(`name: full
privileged: true
containers:
  - name: %s
    image: %q
    entrypoint: [/labsvc]
    command: [serve, --listen, ":8080", --name, full]
    env: {GREETING: full}
    ports: ["127.0.0.1:%d:8080"]
    volumes: ["%s:/data", "%s:/bind:ro"]
    restart: always
    labels: {com.example.team: core}
    working_dir: /work
    user: "65534:65534"
    hostname: fullhost
    networks:
      - {name: %s, aliases: [api, api2], ipv4_address: 10.213.7.5}
      - {name: %s, aliases: [other]}
    cap_add: [NET_ADMIN, cap_sys_time]
    cap_drop: [MKNOD]
    devices: ["/dev/zero:/dev/zero2:r"]
    memory: 64m
    memory_swap: 256m
    cpus: 0.5
    pids_limit: 100
    ulimits: ["nofile=1024:2048"]
    healthcheck: {test: [CMD, /labsvc, health], interval: 5s, timeout: 2s, start_period: 1s, retries: 3}
    logging: {driver: json-file, options: {max-size: 1m}}
    extra_hosts: ["db:10.1.2.3"]
    dns: [10.1.2.53]
    dns_search: [example.internal]
    dns_opt: ["ndots:2"]
    stop_signal: SIGINT
    stop_timeout: 3
    tmpfs: ["/run:size=1m"]
    read_only: true
    init: true
    security_opt: [no-new-privileges]
`, name, image, port, vol, t.TempDir(), net1, net2)
	m, err := catalogue.Parse("full.yaml", []byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	r, err := m.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	return report.SpecOf(fsm.Resource{Module: "full", Kind: fsm.KindContainer, Container: &r.Containers[0]})
}

// TestInspectEveryKeyClassified creates a container with every field from a manifest,
// then reads `docker inspect` of it: every key is classified (reproduced, or why not), the
// container reads back as the Spec it was made from, and Diff finds nothing. A key the engine
// adds that nobody classified fails it.
func TestInspectEveryKeyClassified(t *testing.T) {
	e := requireEngine(t)
	requireDockerCLI(t)
	img := labsvcImages(t, e)
	ctx := testCtx(t)
	host := fullSpec(t, testName(t, "full"), img.echo, testenv.FreePort(t))
	// Created, not started: a privileged container cannot start in every lab (a rootless engine).
	hostMode := ctrspec.Spec{Name: testName(t, "hostmode"), Image: img.echo, Labels: ctrspec.ManagedLabels("full"),
		Cmd: []string{"--listen", "127.0.0.1:0"}, Runtime: ctrspec.Runtime{NetworkMode: "host", PID: "host", Privileged: true}}
	for _, spec := range []ctrspec.Spec{host, hostMode} {
		if err := spec.Validate(); err != nil {
			t.Fatal(err)
		}
		create := e.Create
		if spec.Privileged {
			create = func(ctx context.Context, spec ctrspec.Spec) (string, error) { return e.Prepare(ctx, spec, spec.Name) }
		}
		if _, err := create(ctx, spec); err != nil {
			t.Fatalf("create %s: %v", spec.Name, err)
		}
		out, err := exec.Command("docker", "inspect", spec.Name).Output()
		if err != nil {
			t.Fatalf("docker inspect %s: %v", spec.Name, err)
		}
		var raws []json.RawMessage
		if err := json.Unmarshal(out, &raws); err != nil || len(raws) != 1 {
			t.Fatalf("docker inspect %s: %v (%d objects)", spec.Name, err, len(raws))
		}
		keys, err := unclassified(raws[0])
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			t.Errorf("container %s: inspect key %s is not classified in inspectKeys: reproduce it from the Spec or say why not", spec.Name, k)
		}
		o, found, err := e.Inspect(ctx, spec.Name)
		if err != nil || !found {
			t.Fatalf("Inspect(%s) = %v, %v", spec.Name, found, err)
		}
		if d := Diff(spec, o); len(d) > 0 {
			t.Errorf("container %s created from its Spec differs from it:\n%s", spec.Name, strings.Join(d, "\n"))
		}
		want := spec.Runtime
		want.CapAdd, want.CapDrop = normCaps(want.CapAdd), normCaps(want.CapDrop)
		got, _ := json.Marshal(o.Spec.Runtime)
		wantJSON, _ := json.Marshal(want)
		if string(got) != string(wantJSON) {
			t.Errorf("container %s reads back as\n%s\nwant\n%s", spec.Name, got, wantJSON)
		}
		if len(o.Spec.Unexpressed) > 0 {
			t.Errorf("container %s made from a Spec has what a Spec cannot say: %v", spec.Name, o.Spec.Unexpressed)
		}
	}
	serves(t, portOf(t, host), "from full")
}

// requireDockerCLI skips (fails under CI) without the docker command: these tests read the
// engine as an operator does, and start a found container as a predecessor did.
func requireDockerCLI(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("docker"); err != nil {
		testenv.Prereq(t, "the docker command: %v", err)
	}
}

func portOf(t *testing.T, s ctrspec.Spec) int {
	b, err := ctrspec.ParsePort(s.Ports[0])
	if err != nil {
		t.Fatal(err)
	}
	return int(b.HostPort)
}

// TestFoundContainerNamesWhatItLoses: a container started by hand as the found one was
// (`docker run --network appnet --network-alias api --cap-add NET_ADMIN --user 65534 --memory
// 64m --health-cmd ... --ipc host`) read against a declaration of only its image, command and
// ports names each thing it would lose, and the ipc mode no Spec can say.
func TestFoundContainerNamesWhatItLoses(t *testing.T) {
	e := requireEngine(t)
	requireDockerCLI(t)
	img := labsvcImages(t, e)
	ctx := testCtx(t)
	name := testName(t, "found")
	net := name + "-net"
	t.Cleanup(func() {
		testenv.RemoveContainers(t, DefaultHost, name)
		_ = exec.Command("docker", "network", "rm", net).Run()
	})
	if out, err := exec.Command("docker", "network", "create", net).CombinedOutput(); err != nil {
		t.Fatalf("docker network create: %v\n%s", err, out)
	}
	run := exec.Command("docker", "run", "-d", "--name", name, "--network", net, "--network-alias", "api",
		"--cap-add", "NET_ADMIN", "--user", "65534", "--memory", "64m", "--health-cmd", "/labsvc health",
		"--ipc", "host", img.echo, "--listen", ":8080")
	if out, err := run.CombinedOutput(); err != nil {
		t.Fatalf("docker run: %v\n%s", err, out)
	}
	o, found, err := e.Inspect(ctx, name)
	if err != nil || !found {
		t.Fatalf("Inspect = %v, %v", found, err)
	}
	declared := ctrspec.Spec{Name: name, Image: img.echo, Cmd: []string{"--listen", ":8080"}}
	changes := ctrspec.RuntimeChanges(o.Spec, declared)
	losses := ctrspec.Losses(changes)
	for _, want := range []string{
		"network " + net + " → bridge, alias api lost",
		"capabilities: NET_ADMIN dropped",
		"user 65534 → the image's default",
		"memory limit 64m removed",
		"health check [CMD-SHELL /labsvc health] removed",
		`HostConfig.IpcMode "host" lost (a manifest cannot say it)`,
	} {
		if !slices.Contains(losses, want) {
			t.Errorf("losses %q lack %q", losses, want)
		}
	}
	if d := Diff(declared, o); len(d) < len(losses) {
		t.Errorf("Diff = %q, want at least the %d losses", d, len(losses))
	}
	// The exact declaration, drafted from the container, is no difference.
	exact := o.Spec
	exact.Unexpressed = nil
	exact.Name = name
	if d := Diff(exact, o); len(d) != 1 || !strings.Contains(d[0], "IpcMode") {
		t.Errorf("Diff of its own reconstruction = %q, want only the ipc mode a Spec cannot say", d)
	}
}
