package e2e

// ADR 0100's last check, "Converging previews, then changes", on the lab hub with each found
// firewall (issue 13): the preview names the service's port and a published port no firewall rule
// mentions and exits 2, and exits 0 once every port is declared; a stale plan token is refused
// naming what changed; after the flip meshd's derived filter is loaded, the found firewall is
// disabled with its configuration on disk byte for byte and Docker's rules kept, declared ports
// answer from another machine over IPv4 and IPv6 and an undeclared one does not, the store stays
// unreachable from outside; returned to adopted, the same probes pass and fail as before the flip;
// and the agent SIGKILLed at each named crash point of the flip and of the return ends, after a
// restart, with the record's mode and the machine's firewall agreeing.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"meshd/host/pass"
	"meshd/internal/labtest"
	"meshd/internal/testenv"
	"meshd/lab"
	"meshd/report"
)

func TestConvergeFlipUFW(t *testing.T)      { t.Parallel(); testConvergeFlip(t, lab.FirewallUFW) }
func TestConvergeFlipNftables(t *testing.T) { t.Parallel(); testConvergeFlip(t, lab.FirewallNftables) }

// previewOf runs `meshd converge hub --preview --json` on hub: the preview and the exit code.
func previewOf(ctx context.Context, hub *lab.Machine) (report.ConvergePreview, int, error) {
	cmd := hub.Command(ctx, meshdPath(hub), "converge", "hub", "--preview", "--json")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		return report.ConvergePreview{}, -1, err
	}
	var pv report.ConvergePreview
	if code == 1 {
		return pv, code, fmt.Errorf("preview: %s", stderr.String())
	}
	if err := json.Unmarshal(out, &pv); err != nil {
		return pv, code, fmt.Errorf("preview --json: %v: %s", err, out)
	}
	return pv, code, nil
}

// verdictOn is how the preview marks port/proto (listening or published), "" when it does not
// name it.
func verdictOn(pv report.ConvergePreview, proto string, port uint16) string {
	for _, p := range pv.Published {
		if p.HostPort == port && p.Proto == proto {
			return p.Verdict.String()
		}
	}
	for _, l := range pv.Listeners {
		if l.Port == port && l.Proto == proto {
			return l.Verdict.String()
		}
	}
	return ""
}

// flipProbes are the probes the flip is judged by: from a second machine (newnode) the service
// (8080), the metrics port (9090, published and named by no found rule) and the predecessor's
// registry (5000, left undeclared), over IPv4 and IPv6; from outside, the store (6379) over both.
func flipProbes(hub *lab.Machine) map[string]string {
	out := map[string]string{}
	for _, p := range []int{lab.WebappPort, lab.DeniedPort, lab.RegistryPort} {
		out[fmt.Sprintf("newnode tcp4/%d", p)] = fmt.Sprintf("tcp://%s:%d", lab.HubAddr, p)
		out[fmt.Sprintf("newnode tcp6/%d", p)] = fmt.Sprintf("tcp://[%s]:%d", hub.Addr6, p)
	}
	out[fmt.Sprintf("outside tcp4/%d", lab.StorePort)] = fmt.Sprintf("tcp://%s:%d", lab.HubAddr, lab.StorePort)
	out[fmt.Sprintf("outside tcp6/%d", lab.StorePort)] = fmt.Sprintf("tcp://[%s]:%d", hub.Addr6, lab.StorePort)
	return out
}

// probeAll runs every flip probe once: which answered.
func probeAll(ctx context.Context, l *lab.Lab, hub *lab.Machine) map[string]bool {
	got := map[string]bool{}
	for name, target := range flipProbes(hub) {
		from := l.Machine(strings.Fields(name)[0])
		_, err := from.Reach(ctx, target)
		got[name] = err == nil
	}
	return got
}

func probeTable(p map[string]bool) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(p)) {
		fmt.Fprintf(&b, "  %-20s %v\n", k, p[k])
	}
	return b.String()
}

// foundConfig is the found firewall's configuration on disk: each file's bytes by path.
func foundConfig(ctx context.Context, t *testing.T, hub *lab.Machine, fw lab.FirewallKind) map[string]string {
	t.Helper()
	paths := []string{"/etc/nftables.conf"}
	if fw == lab.FirewallUFW {
		out, err := hub.Exec(ctx, "find", "/etc/ufw", "-type", "f")
		if err != nil {
			t.Fatal(err)
		}
		paths = strings.Fields(out)
	}
	m := map[string]string{}
	for _, p := range paths {
		b, err := hub.ReadFile(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		m[p] = string(b)
	}
	return m
}

// foundActive says whether the found firewall is in force on hub, and what shows it.
func foundActive(ctx context.Context, hub *lab.Machine, fw lab.FirewallKind) (bool, string) {
	if fw == lab.FirewallUFW {
		out, _ := hub.Exec(ctx, "ufw", "status")
		return strings.Contains(out, "Status: active"), out
	}
	if fw == lab.FirewallIptables {
		out, _ := hub.Exec(ctx, "iptables", "-S", "INPUT")
		return strings.Contains(out, "-P INPUT DROP"), out
	}
	out, err := hub.Exec(ctx, "nft", "list", "table", "inet", "filter")
	return err == nil, out
}

// hasTable says whether one of meshd's own tables is loaded on hub.
func hasTable(ctx context.Context, hub *lab.Machine, name string) bool {
	_, err := hub.Exec(ctx, "nft", "list", "table", "inet", name)
	return err == nil
}

// recordMode is the hub's mode in the record and its pending flip ("" when none).
func recordMode(ctx context.Context, hub *lab.Machine) (string, string, error) {
	out, err := meshd(ctx, hub, "node", "show", "hub", "--json")
	if err != nil {
		return "", "", err
	}
	var v struct {
		Node struct {
			Mode string `json:"mode"`
			Flip *struct {
				To string `json:"to"`
			} `json:"flip"`
		} `json:"node"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		return "", "", fmt.Errorf("node show --json: %v", err)
	}
	flip := ""
	if v.Node.Flip != nil {
		flip = v.Node.Flip.To
	}
	return v.Node.Mode, flip, nil
}

// reportedFirewall is the found firewall as the hub's last report in node show --json says it.
func reportedFirewall(ctx context.Context, hub *lab.Machine) (report.FirewallView, error) {
	out, err := meshd(ctx, hub, "node", "show", "hub", "--json")
	if err != nil {
		return report.FirewallView{}, err
	}
	var v struct {
		Report *struct {
			Kinds struct {
				Opening *report.OpeningDetail `json:"opening"`
			} `json:"kinds"`
		} `json:"report"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		return report.FirewallView{}, fmt.Errorf("node show --json: %v", err)
	}
	if v.Report == nil || v.Report.Kinds.Opening == nil {
		return report.FirewallView{}, errors.New("node show --json: no report of the openings yet")
	}
	return v.Report.Kinds.Opening.Firewall, nil
}

// consistent checks that the record says mode with no flip pending and that the machine's
// firewall is that mode's: converged, meshd's filter loaded and the found firewall disabled;
// adopted, the found firewall in force, the guard loaded and no filter. The hub's report agrees:
// converged, the found firewall by the kind it was found as, retired; adopted, it active.
func consistent(ctx context.Context, hub *lab.Machine, fw lab.FirewallKind, mode string) error {
	got, flip, err := recordMode(ctx, hub)
	if err != nil {
		return err
	}
	if got != mode || flip != "" {
		return fmt.Errorf("the record says %s (flip pending: %q), want %s", got, flip, mode)
	}
	rep, err := reportedFirewall(ctx, hub)
	if err != nil {
		return err
	}
	if rep.Kind != string(fw) || rep.Retired != (mode == "converged") || (mode == "adopted" && !strings.Contains(rep.Description, ", active")) ||
		(mode == "converged" && !(strings.HasPrefix(rep.Description, string(fw)) && strings.Contains(rep.Description, ", retired ("))) {
		return fmt.Errorf("%s in the record, but the hub reports the found firewall %q (kind %s, retired %v, detected %q), want %s %s",
			mode, rep.Description, rep.Kind, rep.Retired, rep.Detected, fw, map[bool]string{true: "retired", false: "active"}[mode == "converged"])
	}
	active, shown := foundActive(ctx, hub, fw)
	filter, guard := hasTable(ctx, hub, "meshd_filter"), hasTable(ctx, hub, "meshd_guard")
	if mode == "converged" && (active || !filter) {
		return fmt.Errorf("converged in the record, but the found firewall is active %v (%s), meshd's filter loaded %v", active, strings.TrimSpace(shown), filter)
	}
	if mode == "adopted" && (!active || filter || !guard) {
		return fmt.Errorf("adopted in the record, but the found firewall is active %v, meshd's filter loaded %v, guard %v", active, filter, guard)
	}
	return nil
}

// moduleWith adds a module opening each of ports (proto/port/path) from anywhere and assigns it.
func moduleWith(ctx context.Context, t *testing.T, hub *lab.Machine, name string, ports []string) {
	t.Helper()
	text := "name: " + name + "\nopenings:\n"
	for _, p := range ports {
		f := strings.Split(p, "/")
		text += fmt.Sprintf("  - {port: \"%s\", proto: %s, from: anywhere, path: %s}\n", f[1], f[0], f[2])
	}
	path := "/var/lib/" + name + ".yaml"
	if err := hub.WriteFile(ctx, path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"module", "add", path}, {"module", "assign", "hub", name}} {
		if out, err := meshd(ctx, hub, args...); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
}

// restartAgent stops the hub's agent and starts it again, with the crash point armed when point
// is not "".
func restartAgent(ctx context.Context, t *testing.T, hub *lab.Machine, point string) {
	t.Helper()
	_ = hub.StopService(ctx, "meshd")
	var env []string
	if point != "" {
		env = append(env, pass.CrashEnv+"="+point)
	}
	if err := hub.SetAgentUnit(ctx, env, agentArgs()...); err != nil {
		t.Fatal(err)
	}
	// Armed, the agent may die at its point before it is ready: start it as --no-block.
	start := hub.StartService
	if point != "" {
		start = hub.StartServiceNoBlock
	}
	if err := start(ctx, "meshd"); err != nil {
		t.Fatal(err)
	}
	if err := testenv.Poll(t, 60*time.Second, func() error { _, _, err := recordMode(ctx, hub); return err }); err != nil {
		t.Fatalf("the agent does not answer after a restart: %v", err)
	}
}

// testConvergeFlip walks the flip and the return on the lab hub; kept in one body because each
// step starts from the machine the step before left (one lab, raised once).
func testConvergeFlip(t *testing.T, fw lab.FirewallKind) {
	bin := labtest.Meshd(t)
	l := labtest.Up(t, lab.PredecessorWithApps(fw))
	ctx := testenv.Context(t, 12*time.Minute)
	hub := l.Machine("hub")
	agentLogsOnFailure(t, 6000, hub)
	installMeshd(ctx, t, bin, hub)
	stopPredecessorControl(ctx, t, hub)
	if out, err := meshd(ctx, hub, hubGenesis("--adopted", "--port", "tunnel=51821", "--port", "registry=5001")...); err != nil {
		t.Fatalf("adopted genesis: %v\n%s", err, out)
	}
	installAgent(ctx, t, hub, bin)
	foundationUp(ctx, t, hub, "tcp://127.0.0.1:6379")
	assignWebapp(ctx, t, hub)

	// The preview names the service's port (declared by webapp) and the published metrics port no
	// firewall rule mentions (will close), and exits 2.
	var pv report.ConvergePreview
	if err := testenv.Poll(t, 60*time.Second, func() error {
		var code int
		var err error
		pv, code, err = previewOf(ctx, hub)
		if err != nil {
			return err
		}
		if code != 2 || !strings.HasPrefix(verdictOn(pv, "tcp", lab.WebappPort), "declared by webapp") ||
			verdictOn(pv, "tcp", lab.DeniedPort) != report.MarkWillClose || verdictOn(pv, "tcp", lab.RegistryPort) != report.MarkWillClose {
			return fmt.Errorf("exit %d, 8080 %q, 9090 %q, 5000 %q", code, verdictOn(pv, "tcp", lab.WebappPort), verdictOn(pv, "tcp", lab.DeniedPort), verdictOn(pv, "tcp", lab.RegistryPort))
		}
		return nil
	}); err != nil {
		t.Fatalf("the preview: %v", err)
	}
	t.Logf("first preview: %d will close; derived filter:\n%s", pv.WillClose, pv.Filter)

	// Declare every port that would close: the predecessor's registry (5000) in a module of its
	// own, everything else in another; the preview then exits 0.
	var kept []string
	add := func(proto string, port uint16, path string) {
		if port == lab.RegistryPort {
			return
		}
		if s := fmt.Sprintf("%s/%d/%s", proto, port, path); !slices.Contains(kept, s) {
			kept = append(kept, s)
		}
	}
	for _, p := range pv.Published {
		if p.Verdict.Mark == report.MarkWillClose {
			add(p.Proto, p.HostPort, "forwarded")
		}
	}
	for _, li := range pv.Listeners {
		if li.Verdict.Mark == report.MarkWillClose {
			add(li.Proto, li.Port, "incoming")
		}
	}
	moduleWith(ctx, t, hub, "kept", kept)
	moduleWith(ctx, t, hub, "legacy-registry", []string{fmt.Sprintf("tcp/%d/forwarded", lab.RegistryPort)})
	var clean report.ConvergePreview
	if err := testenv.Poll(t, 60*time.Second, func() error {
		var code int
		var err error
		clean, code, err = previewOf(ctx, hub)
		if err == nil && code != 0 {
			err = fmt.Errorf("exit %d, %d will close", code, clean.WillClose)
		}
		return err
	}); err != nil {
		t.Fatalf("after declaring every port the preview does not exit 0: %v", err)
	}
	if !strings.HasPrefix(verdictOn(clean, "tcp", lab.DeniedPort), "declared by kept") {
		t.Fatalf("9090 after declaring it: %q", verdictOn(clean, "tcp", lab.DeniedPort))
	}

	// The registry's module unassigned: 5000 will close again, and the clean token is stale.
	if out, err := meshd(ctx, hub, "module", "unassign", "hub", "legacy-registry"); err != nil {
		t.Fatalf("unassign: %v\n%s", err, out)
	}
	var plan report.ConvergePreview
	if err := testenv.Poll(t, 60*time.Second, func() error {
		var code int
		var err error
		plan, code, err = previewOf(ctx, hub)
		if err == nil && (code != 2 || verdictOn(plan, "tcp", lab.RegistryPort) != report.MarkWillClose) {
			err = fmt.Errorf("exit %d, 5000 %q", code, verdictOn(plan, "tcp", lab.RegistryPort))
		}
		return err
	}); err != nil {
		t.Fatalf("the preview after unassigning: %v", err)
	}
	t.Run("a stale plan token is refused, naming what changed", func(t *testing.T) {
		out, err := meshd(ctx, hub, "converge", "hub", "--plan", clean.Token)
		if err == nil || !strings.Contains(out, "changed since the preview") || !strings.Contains(out, fmt.Sprintf(":%d (container predecessor-registry): will close", lab.RegistryPort)) {
			t.Fatalf("converge with a stale token: %v\n%s", err, out)
		}
		if mode, flip, _ := recordMode(ctx, hub); mode != "adopted" || flip != "" {
			t.Fatalf("a refused converge changed the record: %s, flip %q", mode, flip)
		}
	})

	// The found firewall carries the openings as the declaration now says (the kept module's
	// in, the registry module's out) and has stopped changing: ufw's calls are slow.
	var configBefore map[string]string
	var tableBefore string
	if err := testenv.Poll(t, 60*time.Second, func() error {
		_, table := foundActive(ctx, hub, fw)
		carried := table
		if fw == lab.FirewallUFW {
			// Through ufw a forwarded opening is its DOCKER-USER rule alone, on the published
			// port (issue 34): no ufw rule of its own.
			du, _ := hub.Exec(ctx, "iptables", "-S", "DOCKER-USER")
			carried += du
		}
		if !strings.Contains(carried, fmt.Sprintf("meshd:kept:forwarded:tcp/%d:anywhere", lab.DeniedPort)) || strings.Contains(carried, "legacy-registry") {
			return fmt.Errorf("the found firewall does not carry the declared openings yet:\n%s", carried)
		}
		cfg := foundConfig(ctx, t, hub, fw)
		if !maps.Equal(cfg, configBefore) || table != tableBefore {
			configBefore, tableBefore = cfg, table
			return fmt.Errorf("the found firewall is still changing")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	before := probeAll(ctx, l, hub)
	t.Logf("probes before the flip:\n%s", probeTable(before))

	if out, err := meshd(ctx, hub, "converge", "hub", "--plan", plan.Token, "--wait", "3m"); err != nil {
		t.Fatalf("converge: %v\n%s", err, out)
	} else {
		t.Logf("converge:\n%s", out)
		if !strings.Contains(out, string(fw)+", retired (") {
			t.Errorf("converge's output does not say the found firewall (%s) is retired:\n%s", fw, out)
		}
	}
	t.Run("after the flip the derived filter is loaded and the found firewall disabled, its configuration byte for byte", func(t *testing.T) {
		if err := consistent(ctx, hub, fw, "converged"); err != nil {
			t.Fatal(err)
		}
		after := foundConfig(ctx, t, hub, fw)
		for p, b := range configBefore {
			if p == "/etc/ufw/ufw.conf" {
				continue // ENABLED=no is what disabled means to ufw; compared again after the return
			}
			if after[p] != b {
				t.Errorf("%s changed at the flip", p)
			}
		}
		nat, err := hub.Exec(ctx, "iptables-save", "-t", "nat")
		if err != nil || !strings.Contains(nat, fmt.Sprintf("--dport %d", lab.WebappPort)) || !strings.Contains(nat, "DOCKER") {
			t.Errorf("Docker's rules did not stay: %v\n%s", err, nat)
		}
	})
	t.Run("declared ports answer, the undeclared one and the store do not, over IPv4 and IPv6", func(t *testing.T) {
		want := map[string]bool{}
		for name := range flipProbes(hub) {
			want[name] = !strings.HasSuffix(name, fmt.Sprintf("/%d", lab.RegistryPort)) && !strings.HasPrefix(name, "outside")
		}
		if err := testenv.Poll(t, 30*time.Second, func() error {
			got := probeAll(ctx, l, hub)
			if !maps.Equal(got, want) {
				return fmt.Errorf("probes after the flip:\n%swant:\n%s", probeTable(got), probeTable(want))
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("the found firewall enabled again by hand is reported active again, retired again it is not", func(t *testing.T) {
		enable, retire := []string{"ufw", "--force", "enable"}, []string{"ufw", "disable"}
		if fw == lab.FirewallNftables {
			// The predecessor's file begins with `flush ruleset`: meshd's filter is put back by
			// the openings watch, the found table stays beside it.
			enable, retire = []string{"nft", "-f", "/etc/nftables.conf"}, []string{"nft", "delete", "table", "inet", "filter"}
		}
		reported := func(again bool) error {
			rep, err := reportedFirewall(ctx, hub)
			switch {
			case err != nil:
				return err
			case !rep.Retired || rep.ActiveAgain != again || strings.Contains(rep.Description, "ACTIVE AGAIN") != again:
				return fmt.Errorf("the hub reports the found firewall %q (retired %v, active again %v, detected %q), want active again %v",
					rep.Description, rep.Retired, rep.ActiveAgain, rep.Detected, again)
			}
			status, err := meshd(ctx, hub, "status")
			if err != nil || strings.Contains(status, "node hub: FOUND FIREWALL ACTIVE AGAIN: "+string(fw)+", retired at the flip") != again {
				return fmt.Errorf("meshd status (%v) with the found firewall active again %v:\n%s", err, again, status)
			}
			return nil
		}
		if out, err := hub.Exec(ctx, enable[0], enable[1:]...); err != nil {
			t.Fatalf("%v: %v\n%s", enable, err, out)
		}
		enabled := time.Now()
		if err := testenv.Poll(t, 15*time.Second, func() error { return reported(true) }); err != nil {
			t.Fatal(err)
		}
		t.Logf("%v: reported active again %v after it returned (these agents also pass every 1 s on the timer)", enable, time.Since(enabled).Round(time.Millisecond))
		if out, err := hub.Exec(ctx, retire[0], retire[1:]...); err != nil {
			t.Fatalf("%v: %v\n%s", retire, err, out)
		}
		if err := testenv.Poll(t, 15*time.Second, func() error {
			if err := reported(false); err != nil {
				return err
			}
			return consistent(ctx, hub, fw, "converged")
		}); err != nil {
			t.Fatal(err)
		}
	})

	if out, err := meshd(ctx, hub, "adopt", "hub", "--wait", "3m"); err != nil {
		t.Fatalf("adopt: %v\n%s", err, out)
	}
	t.Run("returned to adopted, the found firewall serves exactly as before", func(t *testing.T) {
		if err := consistent(ctx, hub, fw, "adopted"); err != nil {
			t.Fatal(err)
		}
		after := foundConfig(ctx, t, hub, fw)
		for p := range configBefore {
			if after[p] == configBefore[p] {
				continue
			}
			// `ufw enable` may write its rules files again in its own full form (chain
			// declarations, section markers): what must be the same is every rule in them.
			rules := func(text string) []string {
				var out []string
				for _, l := range strings.Split(text, "\n") {
					if strings.HasPrefix(l, "-A ") || strings.HasPrefix(l, "### tuple ###") {
						out = append(out, l)
					}
				}
				slices.Sort(out)
				return out
			}
			a, b := rules(after[p]), rules(configBefore[p])
			if slices.Equal(a, b) {
				t.Logf("%s holds the same rules as before the flip; ufw wrote it again in its own form", p)
				continue
			}
			var diff []string
			for _, l := range a {
				if !slices.Contains(b, l) {
					diff = append(diff, "+ "+l)
				}
			}
			for _, l := range b {
				if !slices.Contains(a, l) {
					diff = append(diff, "- "+l)
				}
			}
			t.Errorf("%s is not what it was before the flip:\n%s", p, strings.Join(diff, "\n"))
		}
		if _, table := foundActive(ctx, hub, fw); table != tableBefore {
			t.Errorf("the found firewall after the return:\n%s\nbefore the flip:\n%s", table, tableBefore)
		}
		if err := testenv.Poll(t, 30*time.Second, func() error {
			if got := probeAll(ctx, l, hub); !maps.Equal(got, before) {
				return fmt.Errorf("probes after the return:\n%sbefore the flip:\n%s", probeTable(got), probeTable(before))
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("killed at each crash point of the flip and the return, the node ends consistent", func(t *testing.T) {
		logPath := filepath.Join(hub.Dir(), "log", "meshd.log")
		for _, point := range []string{"flip.after-filter", "return.after-restore", "flip.before-retire", "return.after-guard", "flip.after-retire"} {
			logStart := 0
			if fi, err := os.Stat(logPath); err == nil {
				logStart = int(fi.Size())
			}
			restartAgent(ctx, t, hub, point)
			to, args := "adopted", []string{"adopt", "hub", "--wait", "5s"}
			if strings.HasPrefix(point, "flip.") {
				var pv report.ConvergePreview
				if err := testenv.Poll(t, 30*time.Second, func() error {
					var err error
					pv, _, err = previewOf(ctx, hub)
					return err
				}); err != nil {
					t.Fatalf("%s: preview after the restart: %v", point, err)
				}
				to, args = "converged", []string{"converge", "hub", "--plan", pv.Token, "--wait", "5s"}
			}
			if out, err := meshd(ctx, hub, args...); err == nil {
				t.Fatalf("%s: %v went through with the agent armed to crash:\n%s", point, args, out)
			}
			if err := testenv.Poll(t, 30*time.Second, func() error {
				b, _ := os.ReadFile(logPath)
				if len(b) < logStart || !strings.Contains(string(b[logStart:]), "crash point reached") || !strings.Contains(string(b[logStart:]), point) {
					return fmt.Errorf("the agent did not die at the crash point (log tail):\n%s", tail(string(b), 2000))
				}
				return nil
			}); err != nil {
				t.Fatalf("%s: %v", point, err)
			}
			restartAgent(ctx, t, hub, "")
			if err := testenv.Poll(t, 60*time.Second, func() error { return consistent(ctx, hub, fw, to) }); err != nil {
				t.Fatalf("%s: after the restart: %v", point, err)
			}
			t.Logf("%s: killed, restarted, %s and consistent", point, to)
		}
	})
}
