package tunnel

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"

	dcontainer "github.com/docker/docker/api/types/container"
	"github.com/docker/docker/client"
	"github.com/docker/go-connections/nat"

	"meshd/container"
	"meshd/host/hosttest"
)

// A WireGuard in a container, as wg-easy runs it (its own network namespace, NET_ADMIN, the
// tunnel's port published over UDP), on the machine's real engine: Managers names the container,
// its image and the published port, and a found wg0 beside it on another port is not its.
func TestContainerWireGuardManagesTheTunnel(t *testing.T) {
	eng := hosttest.Engine(t)
	img := hosttest.Import(t, eng, "wg-easy", hosttest.Labsvc(t))
	name := hosttest.ContainerName(t, "", "wg-easy")
	// Never the default 51820: other packages' tests join with it beside this one, and their
	// preflight would find this container holding it.
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := c.LocalAddr().(*net.UDPAddr).Port
	c.Close()
	// created the way its installer does, not through meshd: the engine's API as docker run uses it
	cli, err := client.NewClientWithOpts(client.WithHost(container.DefaultHost), client.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx := hosttest.DockerCtx(t)
	udp := nat.Port("51820/udp")
	created, err := cli.ContainerCreate(ctx,
		&dcontainer.Config{Image: img, Cmd: []string{"--listen", ":8080", "--name", "wg-easy"}, ExposedPorts: nat.PortSet{udp: {}}},
		&dcontainer.HostConfig{CapAdd: []string{"NET_ADMIN"}, PortBindings: nat.PortMap{udp: {{HostIP: "127.0.0.1", HostPort: strconv.Itoa(port)}}}},
		nil, nil, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := cli.ContainerStart(ctx, created.ID, dcontainer.StartOptions{}); err != nil {
		t.Fatal(err)
	}

	find := func(p Probe) []Manager {
		t.Helper()
		p.Root, p.Interface, p.Containers = t.TempDir(), "wg0", containersAt("")
		ms, err := Managers(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		var out []Manager
		for _, m := range ms {
			if m.Container == name { // other tests' containers may run beside it
				out = append(out, m)
			}
		}
		return out
	}
	// wg0 not on the machine: the container's
	ms := find(Probe{Port: port})
	if len(ms) != 1 {
		t.Fatalf("managers %+v, want container %s", ms, name)
	}
	m := ms[0]
	pub := fmt.Sprintf("127.0.0.1:%d/udp", port)
	if m.Kind != ManagerContainer || m.Image != img || m.Published != pub || m.HostNetwork {
		t.Errorf("manager %+v, want container %s, image %s, publishing %s", m, name, img, pub)
	}
	r := m.Refusal()
	for _, w := range []string{"container " + name, "image " + img, "publishing " + pub, "docker update --restart=no " + name, "then take it over"} {
		if !strings.Contains(r, w) {
			t.Errorf("refusal %q does not say %q", r, w)
		}
	}
	// the tunnel's port asked for by default (51820), wg0 not on the machine: still the container's
	// (a WireGuard image with NET_ADMIN)
	if port != DefaultWireGuardPort {
		if ms := find(Probe{}); len(ms) != 1 {
			t.Errorf("managers %+v for the default port, want container %s by its image", ms, name)
		}
	}
	// a found wg0 in the machine's namespace on another port: not the container's
	if ms := find(Probe{Port: port + 1, InNamespace: true}); len(ms) != 0 {
		t.Errorf("managers %+v for a found wg0 on %d, want none", ms, port+1)
	}
}
