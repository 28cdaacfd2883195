package setup

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"meshd/api"
	"meshd/catalogue"
	"meshd/fsm"
	"meshd/internal/testenv"
)

func findingsSay(fs []api.Finding, check, level, says string) bool {
	for _, f := range fs {
		if f.Check == check && f.Level == level && strings.Contains(f.Message, says) {
			return true
		}
	}
	return false
}

// Issue 11: join runs genesis's preflight, in join's words. A port held on the joining machine is
// named with a join remedy (--port for join), a converged join on a machine in use names the
// adopted token as its remedy, and genesis's words stay what they were.
func TestPreflightWordsFitTheAct(t *testing.T) {
	cat, err := catalogue.Default()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	noEngine := "unix://" + t.TempDir() + "/none.sock"

	join := preflight(context.Background(), preflightInput{Act: ActJoin, Mode: fsm.Converged, Catalogue: cat,
		Settings: map[string]string{"mesh.gossip": port}, DockerHost: noEngine})
	if !findingsSay(join, "port.mesh.gossip", api.LevelError, "give join another: --port gossip=N") {
		t.Errorf("the held gossip port is not refused in join's words: %+v", join)
	}
	if !findingsSay(join, "machine.listeners", api.LevelError, "a converged join would close it. This machine is in use: join it with a token made by `meshd token create --adopted`") {
		t.Errorf("the listener is not refused in join's words: %+v", join)
	}
	if !findingsSay(join, "docker.engine", api.LevelWarning, "modules with containers cannot run here") {
		t.Errorf("an unreachable engine is not a join's warning: %+v", join)
	}
	for _, f := range join {
		if strings.Contains(f.Message, "genesis") || strings.Contains(f.Message, "raise it with") {
			t.Errorf("a join's finding speaks of genesis: %s: %s", f.Check, f.Message)
		}
		if f.Check == "port.mesh.raft" {
			t.Errorf("a join checks the Raft port, which a client never binds: %s", f.Message)
		}
	}
	refused := (&PreflightError{Findings: join, Act: ActJoin}).Error()
	if !strings.HasPrefix(refused, "join refused, nothing was sent and nothing was changed") {
		t.Errorf("a refused join says %q", refused)
	}

	// Adopted, the machine in use is no finding; its held port still is.
	adopted := preflight(context.Background(), preflightInput{Act: ActJoin, Mode: fsm.Adopted, Catalogue: cat,
		Settings: map[string]string{"mesh.gossip": port}, DockerHost: noEngine})
	if findingsSay(adopted, "machine.listeners", api.LevelError, "") || !findingsSay(adopted, "port.mesh.gossip", api.LevelError, "--port gossip=N") {
		t.Errorf("an adopted join: %+v", adopted)
	}

	// Genesis keeps its words.
	gen := preflight(context.Background(), preflightInput{Mode: fsm.Converged, Catalogue: cat,
		Settings: map[string]string{"mesh.gossip": port}, Advertise: "127.0.0.1", DockerHost: noEngine})
	if !findingsSay(gen, "port.mesh.gossip", api.LevelError, "give genesis another: --port gossip=N") ||
		!findingsSay(gen, "machine.listeners", api.LevelError, "a converged genesis would close it. This machine is in use: raise it with --adopted") {
		t.Errorf("genesis's words changed: %+v", gen)
	}
	if s := (&PreflightError{Findings: gen}).Error(); !strings.HasPrefix(s, "genesis refused, nothing was changed") {
		t.Errorf("a refused genesis says %q", s)
	}
}

// A held tunnel port is most often the predecessor's own WireGuard tunnel: the finding names the
// act's way to keep it (join --tunnel, genesis --take-tunnel) beside moving the port.
func TestPreflightHeldTunnelPortNamesTheTunnelFlag(t *testing.T) {
	cat, err := catalogue.Default()
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	port := strconv.Itoa(pc.LocalAddr().(*net.UDPAddr).Port)
	noEngine := "unix://" + t.TempDir() + "/none.sock"

	join := preflight(context.Background(), preflightInput{Act: ActJoin, Mode: fsm.Adopted, Catalogue: cat,
		Settings: map[string]string{"mesh.tunnel": port}, DockerHost: noEngine})
	if !findingsSay(join, "port.mesh.tunnel", api.LevelError, "give join another: --port tunnel=N, or, if it is the predecessor's WireGuard tunnel (say wg0), present it: --tunnel wg0") {
		t.Errorf("a held tunnel port does not name join's --tunnel: %+v", join)
	}
	gen := preflight(context.Background(), preflightInput{Mode: fsm.Adopted, Catalogue: cat,
		Settings: map[string]string{"mesh.tunnel": port}, Advertise: "127.0.0.1", DockerHost: noEngine})
	if !findingsSay(gen, "port.mesh.tunnel", api.LevelError, "give genesis another: --port tunnel=N, or, if it is the predecessor's WireGuard tunnel (say wg0), take it over: --adopted --take-tunnel wg0") {
		t.Errorf("a held tunnel port does not name genesis's --take-tunnel: %+v", gen)
	}
	for _, f := range append(join, gen...) {
		if f.Check != "port.mesh.tunnel" && strings.Contains(f.Message, "--tunnel") {
			t.Errorf("a finding that is not the tunnel port's names --tunnel: %s: %s", f.Check, f.Message)
		}
	}
}

// A client binds the mesh module's ports but Raft, on every address, with its settings over the
// catalogue's defaults.
func TestClientBindPlan(t *testing.T) {
	cat, err := catalogue.Default()
	if err != nil {
		t.Fatal(err)
	}
	plan, err := clientBindPlan(cat, map[string]string{"mesh.tunnel": "51821"}, false)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, b := range plan {
		got = append(got, b.Key+" "+strconv.Itoa(int(b.Port))+"/"+b.Proto+" "+b.Addr.String())
	}
	want := []string{"mesh.bus 7070/tcp 0.0.0.0", "mesh.gossip 7946/tcp 0.0.0.0", "mesh.gossip 7946/udp 0.0.0.0", "mesh.tunnel 51821/udp 0.0.0.0"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Fatalf("client bind plan:\n got %v\nwant %v", got, want)
	}
}

// A preflight with nothing to say says so with an empty list: `--dry-run --json` prints
// "findings": [], never null.
func TestPreflightNothingFoundIsAnEmptyList(t *testing.T) {
	testenv.RequireRoot(t, "reading the machine's firewall (the nftables ruleset)")
	cat, err := catalogue.Default()
	if err != nil {
		t.Fatal(err)
	}
	// A Docker engine that answers, with no containers: the engine is no finding.
	sock := filepath.Join(t.TempDir(), "docker.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	engine := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Api-Version", "1.44")
		switch {
		case strings.HasSuffix(r.URL.Path, "/_ping"):
			_, _ = w.Write([]byte("OK"))
		case strings.HasSuffix(r.URL.Path, "/containers/json"):
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte("[]"))
		default:
			http.NotFound(w, r)
		}
	})}
	go func() { _ = engine.Serve(ln) }()
	t.Cleanup(func() { engine.Close() })
	free := func(network string) string {
		if network == "udp" {
			c, err := net.ListenPacket("udp", "0.0.0.0:0")
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			return strconv.Itoa(c.LocalAddr().(*net.UDPAddr).Port)
		}
		l, err := net.Listen("tcp", "0.0.0.0:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	}
	settings := map[string]string{"mesh.bus": free("tcp"), "mesh.gossip": free("tcp"), "mesh.tunnel": free("udp")}
	got := preflight(context.Background(), preflightInput{Act: ActJoin, Mode: fsm.Adopted, Catalogue: cat,
		Settings: settings, DockerHost: "unix://" + sock})
	if len(got) != 0 {
		t.Fatalf("findings on a free machine: %+v", got)
	}
	b, err := json.Marshal(JoinResult{Findings: got, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"findings":[]`) {
		t.Errorf("a dry run with no findings encodes as %s; want \"findings\":[]", b)
	}
}
