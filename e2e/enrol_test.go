package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"meshd/api"
	"meshd/fsm"
	"meshd/internal/labtest"
	"meshd/internal/testenv"
	"meshd/lab"
	"meshd/pki"
)

// Issue 7's enrolment and gossip, on lab machines: the predecessor hub (nftables) raised adopted,
// newnode and peer1 joined with adopted tokens, bad tokens refused changing nothing, gossip
// liveness and signed reports in `meshd status`, check reach, a key rotation on the running mesh,
// a forged report rejected, a killed node seen failed, a graceful leave seen at once.
func TestEnrolAndGossip(t *testing.T) {
	t.Parallel()
	bin := labtest.Meshd(t)
	l := labtest.Up(t, lab.Predecessor(lab.FirewallNftables))
	ctx := testenv.Context(t, 8*time.Minute)
	hub, newnode, peer1 := l.Machine("hub"), l.Machine("newnode"), l.Machine("peer1")
	installMeshd(ctx, t, bin, hub, newnode, peer1)
	agentLogsOnFailure(t, 4000, hub, newnode, peer1)
	if out, err := meshd(ctx, hub, hubGenesis("--port", "tunnel=51821", "--adopted", "--port", "registry=5001")...); err != nil {
		t.Fatalf("adopted genesis: %v\n%s", err, out)
	}
	installAgent(ctx, t, hub, bin)
	if err := testenv.Poll(t, 30*time.Second, func() error { _, err := statusOf(ctx, hub); return err }); err != nil {
		t.Fatalf("the hub's agent never answered: %v", err)
	}

	token := func(t *testing.T, args ...string) string {
		t.Helper()
		out, err := meshd(ctx, hub, append([]string{"token", "create", "--json"}, args...)...)
		if err != nil {
			t.Fatalf("token create: %v", err)
		}
		var tv struct{ Token string }
		if err := json.Unmarshal([]byte(out), &tv); err != nil || tv.Token == "" {
			t.Fatalf("token create --json: %v\n%s", err, out)
		}
		return tv.Token
	}
	// A refused join changes nothing: the record's nodes are the same, the data dir is absent.
	refused := func(t *testing.T, what, tok, name, says string, extra ...string) {
		t.Helper()
		before := recordNodes(ctx, t, hub)
		out, err := meshdJoin(ctx, newnode, tok, append([]string{"--name", name, "--data-dir", "/var/lib/meshd-refused"}, extra...)...)
		if err == nil || !strings.Contains(out, says) {
			t.Fatalf("%s token: want a refusal saying %q, got %v:\n%s", what, says, err, out)
		}
		t.Logf("%s token refused: %s", what, strings.TrimSpace(out))
		if after := recordNodes(ctx, t, hub); after != before {
			t.Fatalf("%s token changed the record's nodes:\n%s\n%s", what, before, after)
		}
		if _, err := newnode.Exec(ctx, "test", "-e", "/var/lib/meshd-refused"); err == nil {
			t.Fatalf("%s token: the joining data dir was created", what)
		}
	}

	adopted := token(t, "--adopted")
	t.Run("truncated, forged and expired tokens are refused and change nothing", func(t *testing.T) {
		refused(t, "truncated", adopted[:len(adopted)-12], "newnode", "truncated")
		head, sig, _ := strings.Cut(adopted, ".")
		sb, _ := base64.RawURLEncoding.DecodeString(sig)
		sb[10] ^= 0x55
		refused(t, "forged", head+"."+base64.RawURLEncoding.EncodeToString(sb), "newnode", "forged")
		short := token(t, "--adopted", "--ttl", "1s")
		if err := testenv.Poll(t, 5*time.Second, func() error { return expiredYet(short) }); err != nil {
			t.Fatal(err)
		}
		refused(t, "expired", short, "newnode", "expired")
	})

	t.Run("a converged token on a busy newnode is refused with nothing changed and stays unused", func(t *testing.T) {
		// newnode in use: a container publishing a port on every address.
		if _, err := newnode.Docker(ctx, "run", "-d", "--name", "busy", "-p", "8081:8080", lab.ImageName); err != nil {
			t.Fatal(err)
		}
		converged := token(t, "--converged")
		join := []string{"--name", "newnode", "--data-dir", "/var/lib/meshd-refused", "--docker-host", labDocker}
		before := recordNodes(ctx, t, hub)
		out, err := meshdJoin(ctx, newnode, converged, join...)
		t.Logf("converged join on busy newnode: %s", strings.TrimSpace(out))
		for _, says := range []string{"join refused, nothing was sent", "machine.listeners", "container busy", "a converged join would close it",
			"meshd token create --adopted"} {
			if err == nil || !strings.Contains(out, says) {
				t.Fatalf("a converged join on a busy machine: want a refusal saying %q, got %v:\n%s", says, err, out)
			}
		}
		out, err = meshdJoin(ctx, newnode, converged, append(join, "--dry-run", "--json")...)
		var dry struct {
			OK       bool
			Findings []struct{ Check, Level, Message string }
		}
		// The JSON on stdout, then the refusal on stderr.
		if jerr := json.NewDecoder(strings.NewReader(out)).Decode(&dry); err == nil || jerr != nil || dry.OK || len(dry.Findings) == 0 {
			t.Fatalf("join --dry-run --json on busy newnode: %v %v\n%s", err, jerr, out)
		}
		named := false
		for _, f := range dry.Findings {
			named = named || (f.Check == "machine.listeners" && f.Level == "error" && strings.Contains(f.Message, "container busy"))
		}
		if !named {
			t.Fatalf("the dry run's findings do not name container busy: %+v", dry.Findings)
		}
		if after := recordNodes(ctx, t, hub); after != before {
			t.Fatalf("a refused join changed the record's nodes:\n%s\n%s", before, after)
		}
		if _, err := newnode.Exec(ctx, "test", "-e", "/var/lib/meshd-refused"); err == nil {
			t.Fatal("a refused join created its data dir")
		}
		if used := tokenUsedBy(ctx, t, hub, converged); used != "" {
			t.Fatalf("the refused join's token is spent (used by %s)", used)
		}
		if _, err := newnode.Docker(ctx, "rm", "-f", "busy"); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("newnode joins with an adopted token and is reported adopted and alive", func(t *testing.T) {
		if out, err := meshdJoin(ctx, newnode, adopted, "--name", "newnode", "--data-dir", "/var/lib/meshd"); err != nil {
			t.Fatalf("join: %v\n%s", err, out)
		}
		installAgent(ctx, t, newnode, bin)
		// newnode's agent now holds its mesh ports (the tunnel's once its interface is up, which
		// may be before or after this line), which the join's preflight would name first: other
		// ports let the used token reach the record's refusal.
		refused(t, "used", adopted, "newnode2", "token already used to enrol node newnode at", "--port", "bus=17070", "--port", "gossip=17946", "--port", "tunnel=17820")
		// peer1 runs the predecessor's tunnel on the mesh's default tunnel port: the preflight
		// names it, and the port is an input, as at genesis.
		peerTok := token(t, "--adopted")
		out, err := meshdJoin(ctx, peer1, peerTok, "--name", "peer1", "--data-dir", "/var/lib/meshd", "--dry-run")
		if err == nil || !strings.Contains(out, "port.mesh.tunnel") || !strings.Contains(out, "give join another: --port tunnel=N") {
			t.Fatalf("peer1's held tunnel port is not named by join's preflight: %v\n%s", err, out)
		}
		if out, err := meshdJoin(ctx, peer1, peerTok, "--name", "peer1", "--data-dir", "/var/lib/meshd", "--port", "tunnel=51821"); err != nil {
			t.Fatalf("peer1 join: %v\n%s", err, out)
		}
		var shown struct {
			Node struct{ Settings map[string]string }
		}
		if out, err := meshd(ctx, hub, "node", "show", "peer1", "--json"); err != nil || json.Unmarshal([]byte(out), &shown) != nil ||
			shown.Node.Settings["mesh.tunnel"] != "51821" {
			t.Fatalf("peer1's --port tunnel=51821 is not its setting in the record: %v\n%s", err, out)
		}
		installAgent(ctx, t, peer1, bin)
		if err := testenv.Poll(t, 40*time.Second, func() error { return allAlive(ctx, hub, "hub", "newnode", "peer1") }); err != nil {
			t.Fatal(err)
		}
		var text string
		if err := testenv.Poll(t, 20*time.Second, func() error {
			st, err := statusOf(ctx, hub)
			if err != nil {
				return err
			}
			n := st["newnode"]
			if n.Mode != "adopted" || n.Liveness != "alive" || n.ReportFrom != "gossip" {
				return fmt.Errorf("newnode in the hub's status: %+v (want adopted, alive, its report by gossip)", n)
			}
			text, err = meshd(ctx, hub, "status")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`newnode\s+ADOPTED\s+client\s+\S+\s+alive\s+\d+ files?, \d+ containers?`).MatchString(text) {
			t.Fatalf("the hub's status does not show newnode ADOPTED, alive, with held counts:\n%s", text)
		}
		t.Logf("status on the hub:\n%s", text)
		// What newnode holds reaches the hub's status by gossip: a file found at a path the
		// webapp module declares is held, and counted.
		if err := newnode.WriteFile(ctx, lab.WebappFile, []byte("listen 8080 # newnode's own\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := meshd(ctx, hub, "module", "assign", "newnode", "webapp"); err != nil {
			t.Fatalf("assign webapp to newnode: %v\n%s", err, out)
		}
		if err := testenv.Poll(t, 30*time.Second, func() error {
			st, err := statusOf(ctx, hub)
			if err != nil {
				return err
			}
			if n := st["newnode"]; n.HeldFiles != 1 || n.ReportFrom != "gossip" {
				return fmt.Errorf("newnode in the hub's status: %+v (want 1 held file, by gossip)", n)
			}
			text, err = meshd(ctx, hub, "status")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if !regexp.MustCompile(`newnode\s+ADOPTED\s+client\s+\S+\s+alive\s+1 file, \d+ containers?`).MatchString(text) {
			t.Fatalf("the hub's status does not show newnode's held file:\n%s", text)
		}
		t.Logf("status on the hub once newnode holds a file:\n%s", text)
		if out, err := meshd(ctx, newnode, "members"); err != nil || strings.Count(out, " alive ") < 3 {
			t.Fatalf("members on newnode: %v\n%s", err, out)
		} else {
			t.Logf("members on newnode:\n%s", out)
		}
	})

	t.Run("check reach names a blocked gossip udp port and its direction", func(t *testing.T) {
		out, err := meshd(ctx, hub, "check", "reach", "newnode")
		if err != nil || !strings.Contains(out, "all reachable") {
			t.Fatalf("check reach newnode with nothing blocked: %v\n%s", err, out)
		}
		t.Logf("check reach newnode:\n%s", out)
		var reach api.ReachView
		if err := meshdJSON(ctx, hub, &reach, "check", "reach", "newnode"); err != nil || len(reach.Blocked) != 0 || len(reach.Checks) == 0 {
			t.Fatalf("check reach newnode --json with nothing blocked: %v: %+v", err, reach)
		}
		const table = "meshtest_reach"
		// Dropped before routing (a cut on the path, not a firewall meshd adopts): an input-chain
		// drop would be a found firewall on newnode, and meshd would rightly open its gossip
		// port through it.
		if _, err := newnode.Run(ctx, fmt.Sprintf(`nft add table netdev %[1]s
nft add chain netdev %[1]s ingress '{ type filter hook ingress device eth0 priority -500; policy accept; }'
nft add rule netdev %[1]s ingress udp dport 7946 drop`, table)); err != nil {
			t.Fatal(err)
		}
		defer newnode.Exec(context.Background(), "nft", "delete", "table", "netdev", table)
		out, err = meshd(ctx, hub, "check", "reach", "newnode")
		t.Logf("check reach newnode with udp 7946 dropped on newnode:\n%s", out)
		want := "gossip udp port 7946 (" + lab.NewnodeAddr + ":7946): blocked hub → newnode"
		if err == nil || !strings.Contains(out, want) {
			t.Fatalf("check reach does not name the blocked port and direction (want %q): %v\n%s", want, err, out)
		}
		for _, wrong := range []string{"blocked newnode → hub", "bus tcp port 7070 (" + lab.NewnodeAddr + ":7070): blocked", "gossip tcp port 7946 (" + lab.NewnodeAddr + ":7946): blocked"} {
			if strings.Contains(out, wrong) {
				t.Fatalf("check reach blames %q, which is open:\n%s", wrong, out)
			}
		}
	})

	t.Run("the gossip key is rotated on the running mesh with no member lost", func(t *testing.T) {
		list := func() map[string][]string {
			out, err := meshd(ctx, hub, "keyring", "list", "--json")
			if err != nil {
				t.Fatalf("keyring list: %v\n%s", err, out)
			}
			var res struct {
				Members []struct {
					Node string
					Keys []struct {
						ID      string
						Primary bool
					}
				}
			}
			if err := json.Unmarshal([]byte(out), &res); err != nil {
				t.Fatal(err)
			}
			ids := map[string][]string{}
			for _, m := range res.Members {
				for _, k := range m.Keys {
					id := k.ID
					if k.Primary {
						id += "*"
					}
					ids[m.Node] = append(ids[m.Node], id)
				}
				sort.Strings(ids[m.Node])
			}
			return ids
		}
		before := list()
		if len(before["hub"]) != 1 || fmt.Sprint(before["hub"]) != fmt.Sprint(before["newnode"]) || fmt.Sprint(before["hub"]) != fmt.Sprint(before["peer1"]) {
			t.Fatalf("keyrings before the rotation differ: %v", before)
		}
		old := strings.TrimSuffix(before["hub"][0], "*")
		out, err := meshd(ctx, hub, "keyring", "install", "--json")
		if err != nil {
			t.Fatalf("keyring install: %v\n%s", err, out)
		}
		var inst struct {
			Key   string `json:"key"`
			KeyID string `json:"key_id"`
		}
		_ = json.Unmarshal([]byte(out), &inst)
		newKey := inst.Key
		if newKey == "" {
			t.Fatalf("keyring install printed no key:\n%s", out)
		}
		oldKey := sealedKeyOf(ctx, t, hub, old)
		if out, err := meshd(ctx, hub, "keyring", "remove", oldKey); err == nil || !strings.Contains(out, "primary") {
			t.Fatalf("removing the key in use was not refused: %v\n%s", err, out)
		}
		steps := [][]string{{"use", newKey}, {"remove", oldKey}}
		for _, step := range steps {
			if err := allAlive(ctx, hub, "hub", "newnode", "peer1"); err != nil {
				t.Fatalf("before keyring %s: %v", step[0], err)
			}
			if out, err := meshd(ctx, hub, "keyring", step[0], step[1]); err != nil {
				t.Fatalf("keyring %s: %v\n%s", step[0], err, out)
			} else {
				t.Logf("keyring %s:\n%s", step[0], out)
			}
		}
		after := list()
		for _, n := range []string{"hub", "newnode", "peer1"} {
			if fmt.Sprint(after[n]) != fmt.Sprint([]string{inst.KeyID + "*"}) {
				t.Fatalf("node %s's ring after the rotation: %v, want only %s (primary)", n, after[n], inst.KeyID)
			}
		}
		rotated := time.Now()
		// No member lost, and reports still flow: each client's report made after the rotation
		// reaches the hub (every member republishes at least every 10 s).
		if err := testenv.Poll(t, 30*time.Second, func() error {
			if err := allAlive(ctx, hub, "hub", "newnode", "peer1"); err != nil {
				return err
			}
			if err := allAlive(ctx, newnode, "hub", "newnode", "peer1"); err != nil {
				return err
			}
			for _, n := range []string{"newnode", "peer1"} {
				when, err := reportWhen(ctx, hub, n)
				if err != nil {
					return err
				}
				if !when.After(rotated) {
					return fmt.Errorf("%s's report on the hub is from %s, before the rotation", n, when.Format(time.RFC3339Nano))
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		// The sealed keyring was rewritten: newnode's file holds only the new key.
		if ring := sealedRing(ctx, t, newnode); len(ring) != 1 || base64.StdEncoding.EncodeToString(ring[0]) != newKey {
			t.Fatalf("newnode's sealed keyring after the rotation holds %d key(s), not just the new one", len(ring))
		}
	})

	t.Run("a report signed by the wrong key is rejected and never used", func(t *testing.T) {
		// newnode's agent stops; a process on newnode takes its place in gossip under its name, with
		// the mesh's real gossip key but an identity key that is not the one newnode enrolled with,
		// and publishes a report holding a file newnode never had.
		rejectedBefore := rejected(ctx, t, hub)
		if err := newnode.StopService(ctx, "meshd"); err != nil {
			t.Fatal(err)
		}
		// The genuine report newnode sent last may still be on its way when its agent stops: the
		// report the hub keeps is the one it holds once a second has passed with no change.
		var keep time.Time
		if err := testenv.Poll(t, 15*time.Second, func() error {
			a, err := reportWhen(ctx, hub, "newnode")
			if err != nil {
				return err
			}
			time.Sleep(time.Second)
			b, err := reportWhen(ctx, hub, "newnode")
			if err != nil || !a.Equal(b) {
				return fmt.Errorf("newnode's report on the hub still moving (%s, %s, %v)", a, b, err)
			}
			keep = b
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		ring := sealedRing(ctx, t, newnode)
		var keys []string
		for _, k := range ring {
			keys = append(keys, base64.StdEncoding.EncodeToString(k))
		}
		self, _ := os.Executable()
		fctx, stopForger := context.WithCancel(ctx)
		forger := newnode.Command(fctx, self)
		forger.Env = append(forger.Env, "MESHD_E2E_FORGER=1", "FORGER_NAME=newnode", "FORGER_KEYS="+strings.Join(keys, ","),
			"FORGER_ADVERTISE="+lab.NewnodeAddr, "FORGER_JOIN="+lab.HubAddr+":7946",
			`FORGER_REPORT={"node":"newnode","mode":"adopted","when":"`+time.Now().UTC().Format(time.RFC3339Nano)+`","held":[{"path":"/etc/forged","module":"webapp"}]}`)
		flog, _ := os.Create(filepath.Join(t.TempDir(), "forger.log"))
		forger.Stdout, forger.Stderr = flog, flog
		if err := forger.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { stopForger(); _ = forger.Wait() }()
		if err := testenv.Poll(t, 30*time.Second, func() error {
			now := rejected(ctx, t, hub)
			if now["bad-signature"] <= rejectedBefore["bad-signature"] {
				return fmt.Errorf("the hub counted no bad-signature rejection yet: %v", now)
			}
			return nil
		}); err != nil {
			b, _ := os.ReadFile(flog.Name())
			t.Fatalf("%v\nforger:\n%s", err, b)
		}
		out, err := meshd(ctx, hub, "node", "show", "newnode", "--json")
		if err != nil || strings.Contains(out, "/etc/forged") {
			t.Fatalf("the forged report was used: %v\n%s", err, out)
		}
		if when, err := reportWhen(ctx, hub, "newnode"); err != nil || !when.Equal(keep) {
			t.Fatalf("the hub's report of newnode moved from %s to %s (%v): it should keep the old one", keep, when, err)
		}
		st, _ := meshd(ctx, hub, "status")
		t.Logf("status on the hub after the forged report:\n%s", st)
		stopForger()
		_ = forger.Wait()
		if err := newnode.StartService(ctx, "meshd"); err != nil {
			t.Fatal(err)
		}
		if err := testenv.Poll(t, 40*time.Second, func() error {
			when, err := reportWhen(ctx, hub, "newnode")
			if err != nil || !when.After(keep) {
				return fmt.Errorf("newnode's genuine report not back on the hub (%v, %v)", when, err)
			}
			return allAlive(ctx, hub, "hub", "newnode", "peer1")
		}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a killed node is seen failed by every member within the suspicion time", func(t *testing.T) {
		bound, err := detectionBound(ctx, hub)
		if err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		if err := peer1.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		for _, m := range []*lab.Machine{hub, newnode} {
			if err := testenv.Poll(t, bound+2*time.Second, func() error { return memberState(ctx, m, "peer1", "failed") }); err != nil {
				t.Fatalf("%s did not see peer1 failed within %s: %v", m.Name, bound, err)
			}
			t.Logf("%s saw peer1 failed %s after it was killed (bound %s)", m.Name, time.Since(killed).Round(100*time.Millisecond), bound)
		}
		st, err := statusOf(ctx, hub)
		if err != nil || st["peer1"].Liveness != "failed" {
			t.Fatalf("status on the hub: peer1 %+v %v", st["peer1"], err)
		}
	})

	t.Run("a graceful leave is seen at once", func(t *testing.T) {
		left := time.Now()
		if out, err := meshd(ctx, newnode, "leave"); err != nil {
			t.Fatalf("leave: %v\n%s", err, out)
		}
		if err := testenv.Poll(t, 3*time.Second, func() error { return memberState(ctx, hub, "newnode", "left") }); err != nil {
			t.Fatalf("the hub did not see newnode left at once: %v", err)
		}
		t.Logf("the hub saw newnode left %s after `meshd leave`", time.Since(left).Round(10*time.Millisecond))
		st, err := statusOf(ctx, hub)
		if err != nil || st["newnode"].Liveness != "left" {
			t.Fatalf("status on the hub: newnode %+v %v", st["newnode"], err)
		}
	})
}

type statusNode struct {
	Name       string `json:"name"`
	Mode       string `json:"mode"`
	Server     bool   `json:"server"`
	Address    string `json:"address"`
	Liveness   string `json:"liveness"`
	ReportFrom string `json:"report_from"`
	HeldFiles  int    `json:"held_files"`
}

// statusOf reads `meshd status --json` on m, by node.
func statusOf(ctx context.Context, m *lab.Machine) (map[string]statusNode, error) {
	out, err := meshd(ctx, m, "status", "--json")
	if err != nil {
		return nil, err
	}
	var st struct {
		Leader struct{ ID string } `json:"leader"`
		Nodes  []statusNode        `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		return nil, fmt.Errorf("status --json: %v: %s", err, out)
	}
	if st.Leader.ID == "" {
		return nil, fmt.Errorf("no leader yet")
	}
	by := map[string]statusNode{}
	for _, n := range st.Nodes {
		by[n.Name] = n
	}
	return by, nil
}

// recordNodes is the record's nodes as status shows them, without what gossip says.
func recordNodes(ctx context.Context, t *testing.T, m *lab.Machine) string {
	t.Helper()
	st, err := statusOf(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range st {
		out = append(out, fmt.Sprintf("%s %s server=%v %s", n.Name, n.Mode, n.Server, n.Address))
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

// tokenUsedBy reads the record (a snapshot saved on m) for the node that spent tok; "" if none.
func tokenUsedBy(ctx context.Context, t *testing.T, m *lab.Machine, tok string) string {
	t.Helper()
	const file = "/tmp/meshd-record.snap"
	if out, err := meshd(ctx, m, "snapshot", "save", file); err != nil {
		t.Fatalf("snapshot save: %v\n%s", err, out)
	}
	b, err := m.ReadFile(ctx, file)
	if err != nil {
		t.Fatal(err)
	}
	r, _, err := fsm.DecodeSnapshot(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	rec := r.Tokens[pki.TokenHash(tok)]
	if rec == nil {
		t.Fatalf("the record holds no token with the hash of the one made")
	}
	return rec.UsedBy
}

func expiredYet(tok string) error {
	p, _, err := pki.ParseToken(tok)
	if err != nil {
		return err
	}
	if pki.CheckExpiry(p, time.Now()) == nil {
		return fmt.Errorf("the token has not expired yet (it expires at %s)", p.Expires().Format(time.RFC3339))
	}
	return nil
}
