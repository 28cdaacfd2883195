package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"meshd/api"
	"meshd/container"
	"meshd/ctrspec"
	"meshd/fsm"
	"meshd/internal/testenv"
	"meshd/report"
)

// driftBound is issue 20's promise: drift is seen (held) or put back (taken) within a second of
// the change, through the CLI, where the 10 s timer alone took up to 10 s. The agents here run
// with a 10-minute timer, so whatever they notice within a test, a watch noticed.
const driftBound = time.Second

// driftView is what the drift tests read of `meshd node show NODE --json`.
type driftView struct {
	Report *struct {
		Held  []report.HeldFile `json:"held"`
		Kinds struct {
			Container *report.ContainerReport `json:"container"`
		} `json:"kinds"`
	} `json:"report"`
}

// seenWithin polls check (through the CLI: each look costs a process) until it returns "" and
// fails unless that came within driftBound of changed; it waits up to 10 s only to say how late.
func seenWithin(t *testing.T, changed time.Time, what string, check func() string) {
	t.Helper()
	seenWithinBound(t, changed, driftBound, what, check)
}

// engineStartAllowance is added to driftBound where meshd converges a container back: starting
// it is the engine's own work inside meshd's pass, which on a loaded two-core machine took up to
// most of a second by itself.
const engineStartAllowance = time.Second

func seenWithinBound(t *testing.T, changed time.Time, bound time.Duration, what string, check func() string) {
	t.Helper()
	last := ""
	for {
		if last = check(); last == "" {
			break
		}
		if time.Since(changed) > 10*time.Second {
			t.Fatalf("%s: not seen within 10s (the bound is %v): %s", what, bound, last)
		}
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(changed)
	if took > bound {
		t.Fatalf("%s: seen after %v, want within %v", what, took.Round(time.Millisecond), bound)
	}
	t.Logf("%s: seen after %v", what, took.Round(time.Millisecond))
}

// heldChanged is a check that node's report, read on n, has the held file at path changed with
// the content want.
func heldChanged(n *node, node, path string, want []byte) func() string {
	return func() string {
		var v driftView
		n.jsonOf(&v, "node", "show", node)
		if v.Report == nil {
			return "no report"
		}
		for _, h := range v.Report.Held {
			if h.Path == path && h.Changed && h.CurrentHash == hashOf(want) {
				return ""
			}
		}
		return fmt.Sprintf("held = %+v", v.Report.Held)
	}
}

// hashOf names content as the host report does.
func hashOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// On a server's own host, through `meshd node show`, with the machine's Docker engine: a held
// file rewritten by something else, a taken file edited by hand, a held container removed, and
// meshd's container stopped, each seen or converged within a second.
func TestProcessDriftSeenAtOnceOnTheServer(t *testing.T) {
	n := newNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	eng := machineEngine(ctx, t)
	tag := randomTag()
	heldName, mineName, image := "pt-"+tag+"-held", "pt-"+tag+"-mine", "pt-test/drift:"+tag
	if _, err := eng.ImportImage(ctx, image, labsvcBin, []string{"/labsvc", "serve"}); err != nil {
		t.Fatalf("import %s: %v", image, err)
	}
	t.Cleanup(func() {
		testenv.RemoveContainers(t, container.DefaultHost, heldName)
		testenv.RemoveContainers(t, container.DefaultHost, mineName)
		_ = eng.RemoveImage(context.Background(), image)
	})
	if _, err := eng.Create(ctx, ctrspec.Spec{Name: heldName, Image: image, Cmd: []string{"--listen", ":8080", "--name", "predecessor"}}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	heldConf, takenConf := filepath.Join(dir, "legacy", "held.conf"), filepath.Join(dir, "mine", "taken.conf")
	os.MkdirAll(filepath.Dir(heldConf), 0o755)
	if err := os.WriteFile(heldConf, []byte("the predecessor's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, m := range map[string]string{
		"legacy": fmt.Sprintf("name: legacy\nprivileged: true\nfiles:\n  - path: %s\n    content: \"meshd's\\n\"\ncontainers:\n  - name: %s\n    image: %s\n    command: [\"--listen\", \":8080\", \"--name\", \"legacy\"]\n", heldConf, heldName, image),
		"mine":   fmt.Sprintf("name: mine\nprivileged: true\nfiles:\n  - path: %s\n    content: \"meshd's\\n\"\n    mode: \"0644\"\ncontainers:\n  - name: %s\n    image: %s\n    command: [\"--listen\", \":8080\", \"--name\", \"mine\"]\n", takenConf, mineName, image),
	} {
		if err := os.WriteFile(filepath.Join(dir, name+".yaml"), []byte(m), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	n.genesis("--adopted")
	n.startAgent("--docker-host", container.DefaultHost, "--reconcile-interval", "10m")
	for _, m := range []string{"legacy", "mine"} {
		n.ok("module", "add", "--privileged", filepath.Join(dir, m+".yaml"))
		n.ok("module", "assign", "hub", m)
	}
	n.ok("module", "take", "hub", "mine")
	var mineID string
	poll(t, 30*time.Second, "held file and container, meshd's file and container", func() string {
		var v driftView
		n.jsonOf(&v, "node", "show", "hub")
		if v.Report == nil || v.Report.Kinds.Container == nil || len(v.Report.Held) != 1 {
			return "no report with a held file and containers yet"
		}
		states := map[string]report.ContainerView{}
		for _, c := range v.Report.Kinds.Container.Containers {
			states[c.Name] = c
		}
		if states[heldName].State != report.ContainerHeld || !states[mineName].Running {
			return fmt.Sprintf("containers %+v", v.Report.Kinds.Container.Containers)
		}
		if b, _ := os.ReadFile(takenConf); string(b) != "meshd's\n" {
			return fmt.Sprintf("%s holds %q", takenConf, b)
		}
		mineID = states[mineName].ID
		return ""
	})

	rewritten := []byte("the predecessor's, still writing\n")
	at := time.Now()
	if err := os.WriteFile(heldConf, rewritten, 0o644); err != nil {
		t.Fatal(err)
	}
	seenWithin(t, at, "held file rewritten, in node show", heldChanged(n, "hub", heldConf, rewritten))

	at = time.Now()
	if err := os.WriteFile(takenConf, []byte("edited by hand\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	seenWithin(t, at, "taken file edited by hand, written back", func() string {
		if b, _ := os.ReadFile(takenConf); string(b) != "meshd's\n" {
			return fmt.Sprintf("%s holds %q", takenConf, b)
		}
		return ""
	})

	if err := eng.Remove(ctx, heldName); err != nil {
		t.Fatal(err)
	}
	seenWithin(t, time.Now(), "held container removed, in node show", heldContainerRemoved(n, "hub", heldName))

	if err := eng.Stop(ctx, mineName); err != nil {
		t.Fatal(err)
	}
	seenWithinBound(t, time.Now(), driftBound+engineStartAllowance, "meshd's container stopped by hand, running again", runningAgain(ctx, eng, mineName, mineID))
}

// heldContainerRemoved is a check that node's report, read on n, has the held container name
// removed by something else.
func heldContainerRemoved(n *node, node, name string) func() string {
	return func() string {
		var v driftView
		n.jsonOf(&v, "node", "show", node)
		if v.Report != nil && v.Report.Kinds.Container != nil {
			for _, c := range v.Report.Kinds.Container.Containers {
				if c.Name == name && c.Changed && c.Reason == report.RemovedBySomethingElse {
					return ""
				}
			}
			return fmt.Sprintf("containers %+v", v.Report.Kinds.Container.Containers)
		}
		return "no container report"
	}
}

// runningAgain is a check that the engine runs the container name again, the same one (id).
func runningAgain(ctx context.Context, eng *container.Engine, name, id string) func() string {
	return func() string {
		o, ok, err := eng.Inspect(ctx, name)
		if err != nil || !ok || !o.Running || o.ID != id {
			return fmt.Sprintf("found %v running %v id %s (want %s): %v", ok, o.Running, o.ID, id, err)
		}
		return ""
	}
}

// On a client node, read from the server: a held file rewritten on the client is in the
// server's `meshd node show CLIENT` within a second (the client's pass, its report carried by
// gossip, the server's read); once taken, the file edited by hand is written back within a second.
// The same lab then runs a module's assign and take on both nodes as one command each (fleetActs).
func TestProcessDriftSeenAtOnceFromAClient(t *testing.T) {
	hub, edge := newNode(t), newNode(t)
	hubAndClient(t, hub, edge, noDocker)

	dir := t.TempDir()
	conf := filepath.Join(dir, "edge-app.conf")
	if err := os.WriteFile(conf, []byte("the predecessor's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(dir, "edgeapp.yaml")
	os.WriteFile(manifest, []byte(fmt.Sprintf("name: edgeapp\nprivileged: true\nfiles:\n  - path: %s\n    content: \"meshd's\\n\"\n", conf)), 0o644)
	hub.ok("module", "add", "--privileged", manifest)
	hub.ok("module", "assign", "edge", "edgeapp")
	poll(t, 30*time.Second, "the client's held file in node show on the server", func() string {
		var v driftView
		hub.jsonOf(&v, "node", "show", "edge")
		if v.Report == nil {
			return "no report from edge yet"
		}
		for _, h := range v.Report.Held {
			if h.Path == conf && !h.Changed {
				return ""
			}
		}
		return fmt.Sprintf("held = %+v", v.Report.Held)
	})

	rewritten := []byte("the predecessor's, still writing\n")
	at := time.Now()
	if err := os.WriteFile(conf, rewritten, 0o644); err != nil {
		t.Fatal(err)
	}
	seenWithin(t, at, "client's held file rewritten, in node show on the server", heldChanged(hub, "edge", conf, rewritten))
	if b, _ := os.ReadFile(conf); string(b) != string(rewritten) {
		t.Fatalf("the client reverted a held file: %q", b)
	}

	// Taken, the file is the module's; edited by hand on the client, it is written back within
	// a second (the client's own watch, no message from the server needed).
	hub.ok("module", "take", "edge", "edgeapp")
	poll(t, 30*time.Second, "the taken file written on the client", func() string {
		if b, _ := os.ReadFile(conf); string(b) != "meshd's\n" {
			return fmt.Sprintf("%s holds %q", conf, b)
		}
		return ""
	})
	at = time.Now()
	if err := os.WriteFile(conf, []byte("edited by hand\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	seenWithin(t, at, "client's taken file edited by hand, written back", func() string {
		if b, _ := os.ReadFile(conf); string(b) != "meshd's\n" {
			return fmt.Sprintf("%s holds %q", conf, b)
		}
		return ""
	})
	fleetActs(t, hub)
}

// On a client node with a Docker engine (this machine's), read from the server: a held container
// removed on the client is in the server's `meshd node show CLIENT` within a second, and meshd's
// container stopped by hand on the client runs again within a second plus the engine's start.
func TestProcessDriftContainersSeenAtOnceFromAClient(t *testing.T) {
	hub, edge := newNode(t), newNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	eng := machineEngine(ctx, t)
	tag := randomTag()
	heldName, mineName, image := "pt-"+tag+"-edgeheld", "pt-"+tag+"-edgemine", "pt-test/drift:"+tag
	if _, err := eng.ImportImage(ctx, image, labsvcBin, []string{"/labsvc", "serve"}); err != nil {
		t.Fatalf("import %s: %v", image, err)
	}
	t.Cleanup(func() {
		testenv.RemoveContainers(t, container.DefaultHost, heldName)
		testenv.RemoveContainers(t, container.DefaultHost, mineName)
		_ = eng.RemoveImage(context.Background(), image)
	})
	if _, err := eng.Create(ctx, ctrspec.Spec{Name: heldName, Image: image, Cmd: []string{"--listen", ":8080", "--name", "predecessor"}}); err != nil {
		t.Fatal(err)
	}

	hubAndClient(t, hub, edge, container.DefaultHost)

	dir := t.TempDir()
	for name, m := range map[string]string{
		"edgelegacy": fmt.Sprintf("name: edgelegacy\ncontainers:\n  - name: %s\n    image: %s\n    command: [\"--listen\", \":8080\", \"--name\", \"legacy\"]\n", heldName, image),
		"edgemine":   fmt.Sprintf("name: edgemine\ncontainers:\n  - name: %s\n    image: %s\n    command: [\"--listen\", \":8080\", \"--name\", \"mine\"]\n", mineName, image),
	} {
		f := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(f, []byte(m), 0o644); err != nil {
			t.Fatal(err)
		}
		hub.ok("module", "add", f)
		hub.ok("module", "assign", "edge", name)
	}
	hub.ok("module", "take", "edge", "edgemine")
	var mineID string
	poll(t, 30*time.Second, "the client's held and meshd's containers, in node show on the server", func() string {
		var v driftView
		hub.jsonOf(&v, "node", "show", "edge")
		if v.Report == nil || v.Report.Kinds.Container == nil {
			return "no container report from edge yet"
		}
		states := map[string]report.ContainerView{}
		for _, c := range v.Report.Kinds.Container.Containers {
			states[c.Name] = c
		}
		if states[heldName].State != report.ContainerHeld || states[heldName].Changed || !states[mineName].Running {
			return fmt.Sprintf("containers %+v", v.Report.Kinds.Container.Containers)
		}
		mineID = states[mineName].ID
		return ""
	})

	if err := eng.Remove(ctx, heldName); err != nil {
		t.Fatal(err)
	}
	seenWithin(t, time.Now(), "the client's held container removed, in node show on the server", heldContainerRemoved(hub, "edge", heldName))

	if err := eng.Stop(ctx, mineName); err != nil {
		t.Fatal(err)
	}
	at := time.Now()
	seenWithinBound(t, at, driftBound+engineStartAllowance, "meshd's container stopped by hand on the client, running again", runningAgain(ctx, eng, mineName, mineID))
	seenWithinBound(t, at, driftBound+engineStartAllowance, "meshd's container running again, in node show on the server", func() string {
		var v driftView
		hub.jsonOf(&v, "node", "show", "edge")
		if v.Report != nil && v.Report.Kinds.Container != nil {
			for _, c := range v.Report.Kinds.Container.Containers {
				if c.Name == mineName && c.Running && c.ID == mineID {
					return ""
				}
			}
			return fmt.Sprintf("containers %+v", v.Report.Kinds.Container.Containers)
		}
		return "no container report"
	})
}

// tunnelView is what the tunnel drift tests read of `meshd node show NODE --json`.
type tunnelView struct {
	Report *struct {
		Kinds struct {
			Tunnel *report.TunnelDetail `json:"tunnel"`
		} `json:"kinds"`
		Errors []report.ResourceError `json:"errors"`
	} `json:"report"`
}

// tunnelState is node's tunnel state and its tunnel errors as n's `node show` says them.
func tunnelState(n *node, name string) (string, []report.ResourceError) {
	var v tunnelView
	n.jsonOf(&v, "node", "show", name)
	if v.Report == nil || v.Report.Kinds.Tunnel == nil {
		return "", nil
	}
	var errs []report.ResourceError
	for _, e := range v.Report.Errors {
		if strings.HasPrefix(e.Resource, "tunnel:") {
			errs = append(errs, e)
		}
	}
	return v.Report.Kinds.Tunnel.State, errs
}

// linkUpIn says whether the link name is there and administratively up in netns, as `ip` reads it.
func linkUpIn(netns, name string) string {
	out, err := exec.Command("ip", "-n", netns, "-j", "link", "show", name).Output()
	if err != nil {
		return fmt.Sprintf("%s is not there", name)
	}
	var links []struct {
		Flags []string `json:"flags"`
	}
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
		return fmt.Sprintf("ip link show %s: %s", name, out)
	}
	if !slices.Contains(links[0].Flags, "UP") {
		return fmt.Sprintf("%s is down (flags %v)", name, links[0].Flags)
	}
	return ""
}

// The mesh's interface taken down or removed by hand on the server is up again within a second,
// through the link watch (the agent's timer is 10 minutes), and node show says mesh-up again.
func TestProcessTunnelRaisedAgainAtOnce(t *testing.T) {
	n := newNode(t)
	n.genesis("--adopted")
	n.startAgent("--docker-host", noDocker, "--reconcile-interval", "10m")
	poll(t, 30*time.Second, "meshd0 up on the hub", func() string {
		if s, errs := tunnelState(n, "hub"); s != report.TunnelMeshUp {
			return fmt.Sprintf("tunnel state %q, errors %+v", s, errs)
		}
		return linkUpIn(n.netns, fsm.MeshInterface)
	})
	upAgain := func() string {
		if why := linkUpIn(n.netns, fsm.MeshInterface); why != "" {
			return why
		}
		if s, errs := tunnelState(n, "hub"); s != report.TunnelMeshUp || len(errs) > 0 {
			return fmt.Sprintf("tunnel state %q, errors %+v", s, errs)
		}
		return ""
	}

	at := time.Now()
	testenv.Run(t, "ip", "-n", n.netns, "link", "set", fsm.MeshInterface, "down")
	seenWithin(t, at, "meshd0 taken down by hand, up again", upAgain)

	at = time.Now()
	testenv.Run(t, "ip", "-n", n.netns, "link", "del", fsm.MeshInterface)
	seenWithin(t, at, "meshd0 removed by hand, raised again", upAgain)
}

// A spoke whose traffic still goes through the found tunnel it enrolled with (join --tunnel wg0,
// not taken over): that tunnel going down is in the server's `node show` within a second (the
// spoke's link watch, its pass, its report carried to the server), and meshd leaves it down.
func TestProcessSpokeFoundTunnelDownSeenAtOnce(t *testing.T) {
	testenv.RequireRoot(t, "a spoke's found tunnel (wireguard-go)", "wireguard-go", "wg")
	hub, edge := newNode(t), newNode(t)
	link(t, hub, edge, "192.0.2.1", "192.0.2.2")
	hub.genesis("--adopted", "--advertise", "192.0.2.1", "--port", "bus=17070")
	hub.startAgent("--docker-host", noDocker, "--reconcile-interval", "10m")
	var tv api.TokenView
	hub.jsonOf(&tv, "token", "create", "--adopted")
	// The predecessor's tunnel on the spoke: a wireguard-go device (its own daemon), keyed and up,
	// then the join that presents it, in the same mount namespace (its UAPI socket is there).
	script := `set -e
WG_I_PREFER_BUGGY_USERSPACE_TO_POLISHED_KMOD=1 wireguard-go wg0 >/dev/null 2>&1
wg genkey > "$OVL/wg0.key"
wg set wg0 listen-port 51830 private-key "$OVL/wg0.key"
ip addr add 10.44.0.9/24 dev wg0
ip link set wg0 up
exec "$@"`
	cmd := edge.inNetns("sh", "-c", script, "sh", meshdBin, "join", "--token-file", "-", "--name", "edge", "--data-dir", edge.dir, "--tunnel", "wg0")
	cmd.Stdin = strings.NewReader(tv.Token + "\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the spoke's found tunnel and join --tunnel wg0: %v\n%s", err, out)
	}
	edge.startAgent("--docker-host", noDocker, "--reconcile-interval", "10m")
	poll(t, 30*time.Second, "the spoke's found tunnel up, in node show on the server", func() string {
		if s, errs := tunnelState(hub, "edge"); s != report.TunnelFoundUp {
			return fmt.Sprintf("edge's tunnel state %q, errors %+v", s, errs)
		}
		return ""
	})

	at := time.Now()
	testenv.Run(t, "ip", "-n", edge.netns, "link", "set", "wg0", "down")
	seenWithin(t, at, "the spoke's found tunnel down, in node show on the server", func() string {
		s, errs := tunnelState(hub, "edge")
		if s != report.TunnelDark || len(errs) != 1 || errs[0].Resource != "tunnel:wg0" {
			return fmt.Sprintf("edge's tunnel state %q, errors %+v", s, errs)
		}
		return ""
	})
	if why := linkUpIn(edge.netns, "wg0"); why == "" {
		t.Fatal("meshd brought the spoke's found tunnel up: it is the predecessor's until taken over")
	}
}

// hubPeers are the public keys of the peers n's meshd0 has, read with `wg` inside the agent's
// network and mount namespaces (its UAPI socket is in its own /run/wireguard).
func hubPeers(t *testing.T, n *node) []string {
	t.Helper()
	out, err := exec.Command("nsenter", "-t", fmt.Sprint(n.agent.Process.Pid), "-m", "-n", "wg", "show", fsm.MeshInterface, "peers").Output()
	if err != nil {
		return nil
	}
	return strings.Fields(string(out))
}

// A peer removed by hand from the server's meshd0 (`wg set meshd0 peer KEY remove`) is put back
// within a second: the device announces every UAPI set on its link, which the link watch sees.
func TestProcessTunnelPeerRemovedByHandPutBack(t *testing.T) {
	testenv.RequireRoot(t, "a peer removed with wg", "wg", "nsenter")
	hub, edge := newNode(t), newNode(t)
	link(t, hub, edge, "192.0.2.1", "192.0.2.2")
	hub.genesis("--adopted", "--advertise", "192.0.2.1", "--port", "bus=17070")
	hub.startAgent("--docker-host", noDocker, "--reconcile-interval", "10m")
	var tv api.TokenView
	hub.jsonOf(&tv, "token", "create", "--adopted")
	if out, errs, code := edge.joinIn(tv.Token, "--name", "edge", "--data-dir", edge.dir, "--advertise", "192.0.2.2"); code != 0 {
		t.Fatalf("join: exit %d\n%s%s", code, out, errs)
	}
	var nv api.NodeView
	hub.jsonOf(&nv, "node", "show", "edge")
	key := nv.Node.WireGuardKey
	poll(t, 30*time.Second, "edge's key a peer of the hub's meshd0", func() string {
		if ps := hubPeers(t, hub); !slices.Contains(ps, key) {
			return fmt.Sprintf("meshd0's peers %v, want %s", ps, key)
		}
		return ""
	})

	// The removal must be seen to take: a pass of the agent's in flight (the join's) could put
	// the peer back before the first look, which would judge nothing; then it is removed again.
	var at time.Time
	for try := 0; ; try++ {
		at = time.Now()
		out, err := exec.Command("nsenter", "-t", fmt.Sprint(hub.agent.Process.Pid), "-m", "-n", "wg", "set", fsm.MeshInterface, "peer", key, "remove").CombinedOutput()
		if err != nil {
			t.Fatalf("wg set meshd0 peer %s remove: %v %s", key, err, out)
		}
		if !slices.Contains(hubPeers(t, hub), key) {
			break
		}
		if try == 5 {
			t.Fatalf("the peer %s removed by hand was never seen gone from meshd0", key)
		}
	}
	seenWithin(t, at, "a peer removed by hand from meshd0, put back", func() string {
		if ps := hubPeers(t, hub); !slices.Contains(ps, key) {
			return fmt.Sprintf("meshd0's peers %v, want %s", ps, key)
		}
		return ""
	})
}
