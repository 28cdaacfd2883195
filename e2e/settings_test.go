package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"meshd/internal/labtest"
	"meshd/internal/testenv"
	"meshd/lab"
)

// privateLink stands in for the private network between hub and newnode: a veth pair, meshd0 on
// the hub (the interface the guard and the openings let in) with the hub's mesh address, and
// newnode on the range's next address. It is made after genesis, whose preflight refuses a range
// already on an interface.
func privateLink(ctx context.Context, t *testing.T, hub, newnode *lab.Machine) {
	t.Helper()
	hubNS, newNS := filepath.Base(hub.Netns()), filepath.Base(newnode.Netns())
	for _, c := range [][]string{
		{"link", "add", "meshd0", "netns", hubNS, "type", "veth", "peer", "name", "priv0", "netns", newNS},
		{"-n", hubNS, "addr", "add", "10.99.0.1/24", "dev", "meshd0"},
		{"-n", newNS, "addr", "add", "10.99.0.2/24", "dev", "priv0"},
		{"-n", hubNS, "link", "set", "meshd0", "up"},
		{"-n", newNS, "link", "set", "priv0", "up"},
	} {
		if out, err := exec.CommandContext(ctx, "ip", c...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v %s", c, err, out)
		}
	}
}

// nodeSettings is a node's settings in the record, as `meshd node show --json` gives them.
func nodeSettings(ctx context.Context, t *testing.T, m *lab.Machine, node string) string {
	t.Helper()
	out, err := meshd(ctx, m, "node", "show", node, "--json")
	var v struct {
		Node struct {
			Settings map[string]string `json:"settings"`
		} `json:"node"`
	}
	if err != nil || json.Unmarshal([]byte(out), &v) != nil {
		t.Fatalf("node show %s: %v\n%s", node, err, out)
	}
	return fmt.Sprint(v.Node.Settings)
}

// ADR 0100's "inputs outlive genesis" in the ADR 0105 context: on a running adopted hub the store
// moves onto another port with `meshd node set`; it answers there over the private network, the
// old port no longer answers, `outside` is refused both, and the found firewall's marked rule moved.
// A port held on a node (checked there, over the bus for a client) is refused naming its holder,
// the record unchanged; a client's moved gossip port is learnt by the others from the record.
func TestNodeSetMovesTheStore(t *testing.T) {
	t.Parallel()
	bin := labtest.Meshd(t)
	l := labtest.Up(t, lab.Predecessor(lab.FirewallUFW))
	ctx := testenv.Context(t, 8*time.Minute)
	hub, newnode, outside := l.Machine("hub"), l.Machine("newnode"), l.Machine("outside")
	installMeshd(ctx, t, bin, hub, newnode)
	agentLogsOnFailure(t, 6000, hub, newnode)
	stopPredecessorControl(ctx, t, hub)
	if out, err := meshd(ctx, hub, hubGenesis("--port", "tunnel=51821", "--adopted", "--port", "registry=5001")...); err != nil {
		t.Fatalf("adopted genesis: %v\n%s", err, out)
	}
	installAgent(ctx, t, hub, bin)
	privateLink(ctx, t, hub, newnode)
	store := func(addr string, port int) string { return fmt.Sprintf("tcp://%s:%d", addr, port) }
	if err := testenv.Poll(t, 60*time.Second, func() error {
		_, err := newnode.Reach(ctx, store("10.99.0.1", lab.StorePort))
		return err
	}); err != nil {
		t.Fatalf("the store does not answer over the private network before the move: %v", err)
	}
	if out, err := outside.Reach(ctx, store(lab.HubAddr, lab.StorePort)); err == nil {
		t.Fatalf("outside reached the store before the move: %s", out)
	}

	t.Run("a port held on the hub is refused naming its holder, the record unchanged", func(t *testing.T) {
		before := nodeSettings(ctx, t, hub, "hub")
		out, err := meshd(ctx, hub, "node", "set", "hub", fmt.Sprintf("store.port=%d", lab.RegistryPort))
		if err == nil {
			t.Fatalf("node set to the predecessor registry's port went ahead:\n%s", out)
		}
		for _, want := range []string{"node hub", "store.port", fmt.Sprint(lab.RegistryPort), "container predecessor-registry", "nothing was changed"} {
			if !strings.Contains(out, want) {
				t.Errorf("the refusal does not name %q:\n%s", want, out)
			}
		}
		if after := nodeSettings(ctx, t, hub, "hub"); after != before {
			t.Fatalf("a refused node set changed the record:\n%s\n%s", before, after)
		}
	})

	const moved = 6380
	t.Run("the store moves: new port over the private network, old port gone, outside refused both", func(t *testing.T) {
		if out, err := meshd(ctx, hub, "node", "set", "hub", fmt.Sprintf("store.port=%d", moved)); err != nil {
			t.Fatalf("node set store.port=%d: %v\n%s", moved, err, out)
		}
		if err := testenv.Poll(t, 90*time.Second, func() error {
			if out, err := newnode.Reach(ctx, fmt.Sprintf("http://10.99.0.1:%d/", moved)); err != nil || !strings.Contains(out, "from store") {
				return fmt.Errorf("the store on %d over the private network: %v %q", moved, err, out)
			}
			if _, err := newnode.Reach(ctx, store("10.99.0.1", lab.StorePort)); err == nil {
				return fmt.Errorf("the old port %d still answers over the private network", lab.StorePort)
			}
			if _, err := hub.Reach(ctx, store("127.0.0.1", lab.StorePort)); err == nil {
				return fmt.Errorf("the old port %d still answers on the hub itself", lab.StorePort)
			}
			return nil
		}); err != nil {
			ports, _ := hub.Docker(ctx, "port", "meshd-store")
			t.Fatalf("%v (meshd-store publishes %q)", err, ports)
		}
		if ports, _ := hub.Docker(ctx, "port", "meshd-store"); !strings.Contains(ports, fmt.Sprintf(":%d", moved)) || strings.Contains(ports, fmt.Sprintf(":%d", lab.StorePort)) {
			t.Fatalf("meshd-store publishes %q, want %d only", ports, moved)
		}
		for _, port := range []int{lab.StorePort, moved} {
			if out, err := outside.Reach(ctx, store(lab.HubAddr, port)); err == nil {
				t.Errorf("outside reached the store on %d: %s", port, out)
			}
		}
		// The found firewall carries the opening on the new port only: the old marked rule removed.
		var dump string
		if err := testenv.Poll(t, 20*time.Second, func() error {
			d, err := hub.FirewallDump(ctx)
			if err != nil {
				return err
			}
			dump = d
			if !strings.Contains(dump, fmt.Sprintf("meshd:store:forwarded:tcp/%d:", moved)) {
				return fmt.Errorf("no marked rule for the store on %d", moved)
			}
			if strings.Contains(dump, fmt.Sprintf("meshd:store:forwarded:tcp/%d:", lab.StorePort)) {
				return fmt.Errorf("the marked rule for the store on %d is still there", lab.StorePort)
			}
			return nil
		}); err != nil {
			t.Fatalf("found firewall: %v\n%s", err, dump)
		}
	})

	t.Run("a client's port is checked on the client; its moved gossip port is learnt from the record", func(t *testing.T) {
		tok := adoptedToken(ctx, t, hub)
		if out, err := meshdJoin(ctx, newnode, tok, "--name", "newnode", "--data-dir", "/var/lib/meshd"); err != nil {
			t.Fatalf("join: %v\n%s", err, out)
		}
		installAgent(ctx, t, newnode, bin)
		if err := testenv.Poll(t, 40*time.Second, func() error { return allAlive(ctx, hub, "hub", "newnode") }); err != nil {
			t.Fatal(err)
		}
		if out, err := newnode.Docker(ctx, "run", "-d", "--name", "pred-cache", "-p", "7960:8080", "lab/echo:1"); err != nil {
			t.Fatalf("a container on newnode: %v %s", err, out)
		}
		before := nodeSettings(ctx, t, hub, "newnode")
		out, err := meshd(ctx, hub, "node", "set", "newnode", "mesh.gossip=7960")
		if err == nil {
			t.Fatalf("node set to a port a container publishes on newnode went ahead:\n%s", out)
		}
		for _, want := range []string{"node newnode", "mesh.gossip", "7960", "container pred-cache"} {
			if !strings.Contains(out, want) {
				t.Errorf("the refusal does not name %q:\n%s", want, out)
			}
		}
		if after := nodeSettings(ctx, t, hub, "newnode"); after != before {
			t.Fatalf("a refused node set changed the record:\n%s\n%s", before, after)
		}
		if out, err := meshd(ctx, hub, "node", "set", "newnode", "mesh.gossip=7961"); err != nil {
			t.Fatalf("node set newnode mesh.gossip=7961: %v\n%s", err, out)
		}
		if err := testenv.Poll(t, 60*time.Second, func() error {
			if err := allAlive(ctx, hub, "newnode"); err != nil {
				return err
			}
			out, err := meshd(ctx, hub, "members")
			if err != nil {
				return err
			}
			if !strings.Contains(out, fmt.Sprintf("%s:7961", lab.NewnodeAddr)) {
				return fmt.Errorf("the hub does not see newnode at its new gossip port:\n%s", out)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	})
}
