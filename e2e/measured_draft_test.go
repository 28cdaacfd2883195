package e2e

// Issue 38's last acceptance test, on the measured hub TestAdoptMeasuredMachine adopted: the
// machine migrated from drafts. `meshd module draft hub` writes a module for each Compose project
// and each other container; each is added and assigned, then taken, with webapp (declared by the
// catalogue's module, assigned at the adoption) taken as it is. Every take adopts in place, the
// probes see no failed call, the found firewall gains only meshd's marked rules, and each
// container's `docker inspect` is what it was. Then the hub converges onto the filter derived from
// the drafted openings. The walk's operator commands and wall time are logged as a figure
// (docs/performance.md, measured.drafts_to_taken).

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"meshd/api"
	"meshd/draft"
	"meshd/fsm"
	"meshd/internal/testenv"
	"meshd/lab"
	"meshd/report"
)

// draftsDir is where the measured hub's modules are drafted.
const draftsDir = "/var/lib/drafts-measured"

// operator runs the operator's meshd commands on hub and counts them.
type operator struct {
	hub      *lab.Machine
	commands int
}

func (o *operator) run(ctx context.Context, tb testing.TB, args ...string) string {
	tb.Helper()
	o.commands++
	out, err := meshd(ctx, o.hub, args...)
	if err != nil {
		tb.Fatalf("meshd %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// inspectAll is `docker inspect` of each container by name, as decoded JSON.
func inspectAll(ctx context.Context, t *testing.T, hub *lab.Machine, ids []string) map[string]map[string]any {
	t.Helper()
	out, err := hub.Docker(ctx, append([]string{"inspect"}, ids...)...)
	if err != nil {
		t.Fatalf("docker inspect: %v\n%s", err, out)
	}
	var all []map[string]any
	if err := json.Unmarshal([]byte(out), &all); err != nil {
		t.Fatalf("docker inspect: %v", err)
	}
	by := map[string]map[string]any{}
	for _, c := range all {
		by[strings.TrimPrefix(c["Name"].(string), "/")] = c
	}
	return by
}

// inspectChangesOnItsOwn are the fields of `docker inspect` that change with no one acting: the
// health check's record of its runs.
var inspectChangesOnItsOwn = []string{"State.Health"}

// inspectDiff names each field (dotted path) that differs between two `docker inspect`
// documents, leaving out inspectChangesOnItsOwn and labels meshd's own (meshd.*).
func inspectDiff(before, after any, path string) []string {
	if slices.Contains(inspectChangesOnItsOwn, path) {
		return nil
	}
	bm, bok := before.(map[string]any)
	am, aok := after.(map[string]any)
	if !bok || !aok {
		if reflect.DeepEqual(before, after) {
			return nil
		}
		return []string{fmt.Sprintf("%s: %v → %v", path, before, after)}
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(joinKeys(bm, am))) {
		p := k
		if path != "" {
			p = path + "." + k
		}
		if strings.HasSuffix(path, ".Labels") && strings.HasPrefix(k, "meshd.") {
			continue
		}
		out = append(out, inspectDiff(bm[k], am[k], p)...)
	}
	return out
}

// leaves counts the values (not maps) in a decoded JSON document.
func leaves(v any) int {
	m, ok := v.(map[string]any)
	if !ok {
		return 1
	}
	n := 0
	for _, x := range m {
		n += leaves(x)
	}
	return n
}

func joinKeys(a, b map[string]any) map[string]bool {
	out := map[string]bool{}
	for k := range a {
		out[k] = true
	}
	for k := range b {
		out[k] = true
	}
	return out
}

// containerStates are the hub's reported containers: module and state by name.
func containerStates(ctx context.Context, hub *lab.Machine) (map[string]report.ContainerView, error) {
	var v api.NodeView
	if err := meshdJSON(ctx, hub, &v, "node", "show", "hub"); err != nil {
		return nil, err
	}
	if v.Report == nil {
		return nil, fmt.Errorf("no host report yet")
	}
	cr, _ := report.Detail[report.ContainerReport](v.Report, fsm.KindContainer)
	by := map[string]report.ContainerView{}
	for _, c := range cr.Containers {
		by[c.Name] = c
	}
	return by, nil
}

// allInState polls until every named container is reported in state by its module.
func allInState(ctx context.Context, t testing.TB, hub *lab.Machine, names []string, state string) {
	t.Helper()
	if err := testenv.Poll(t, 3*time.Minute, func() error {
		by, err := containerStates(ctx, hub)
		if err != nil {
			return err
		}
		var not []string
		for _, n := range names {
			if c := by[n]; c.State != state {
				not = append(not, fmt.Sprintf("%s (module %q, %q)", n, c.Module, c.State))
			}
		}
		if len(not) > 0 {
			return fmt.Errorf("%d of %d containers not %s: %s", len(not), len(names), state, strings.Join(not, ", "))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// migration is what the walk from drafts did and took.
type migration struct {
	modules []draft.Module
	// taken are the containers taken, webapp's too.
	taken []string
	// commands are the operator's meshd commands in the walk.
	commands int
	// toHeld runs from the draft to every module added and assigned and each container held;
	// takes from the first take to every container reported adopted.
	toHeld, takes time.Duration
}

// migrateFromDrafts walks issue 38's migration on the measured hub (adopted, webapp assigned,
// its agent running): `module draft hub --out DIR` for every container but webapp (the
// catalogue's), `module add` each module (--privileged where the draft says so) and `module
// assign MODULE --nodes hub`; once every container is held, `module take MODULE --nodes hub` each
// and webapp's (--no-wait: the walk then waits for every container reported adopted, in place).
// want is how many containers the draft must find.
func migrateFromDrafts(ctx context.Context, tb testing.TB, hub *lab.Machine, want int) migration {
	tb.Helper()
	op := &operator{hub: hub}
	began := time.Now()
	var all draft.Result
	op.commands++
	if err := meshdJSON(ctx, hub, &all, "module", "draft", "hub", "--out", draftsDir); err != nil {
		tb.Fatalf("module draft hub: %v", err)
	}
	var names, ctrs []string
	for _, m := range all.Modules {
		names = append(names, fmt.Sprintf("%s (%d)", m.Name, len(m.Containers)))
		for _, c := range m.Containers {
			ctrs = append(ctrs, c.Name)
		}
	}
	tb.Logf("drafted %d modules, %d containers: %s; left out: %s", len(all.Modules), len(ctrs), strings.Join(names, ", "), strings.Join(all.LeftOut, "; "))
	if len(all.Refused) > 0 || len(ctrs) != want {
		tb.Fatalf("the draft refused %+v, or drafted %d containers, want %d", all.Refused, len(ctrs), want)
	}
	for _, m := range all.Modules {
		add := []string{"module", "add", draftsDir + "/" + m.File}
		if len(m.Privileged) > 0 {
			add = []string{"module", "add", "--privileged", draftsDir + "/" + m.File}
		}
		op.run(ctx, tb, add...)
		op.run(ctx, tb, "module", "assign", m.Name, "--nodes", "hub", "--no-wait")
	}
	// A take is judged on the node's latest report: every container is held before its take.
	allInState(ctx, tb, hub, ctrs, report.ContainerHeld)
	held := time.Now()
	for _, m := range all.Modules {
		op.run(ctx, tb, "module", "take", m.Name, "--nodes", "hub", "--no-wait")
	}
	op.run(ctx, tb, "module", "take", "webapp", "--nodes", "hub", "--no-wait")
	ctrs = append(ctrs, "webapp")
	allInState(ctx, tb, hub, ctrs, report.ContainerAdopted)
	return migration{modules: all.Modules, taken: ctrs, commands: op.commands, toHeld: held.Sub(began), takes: time.Since(held)}
}

// takeMeasuredFromDrafts is the migration from drafts on the measured hub TestAdoptMeasuredMachine
// adopted (webapp assigned): ids are its predecessor's containers, dumpBefore its firewall before
// genesis, adopting the time from genesis to webapp held and commands the operator's meshd
// commands in it. Then the hub converges.
func takeMeasuredFromDrafts(ctx context.Context, t *testing.T, l *lab.Lab, hub *lab.Machine, ids []string, dumpBefore string, adopting time.Duration, commands int) {
	before := inspectAll(ctx, t, hub, ids)
	mig := migrateFromDrafts(ctx, t, hub, len(ids)-1)
	taken := time.Now()
	// The operator's time: genesis to webapp held, then the draft to every container taken (the
	// test's checks between the two left out).
	walk := mig.toHeld + mig.takes
	t.Logf("measured.drafts_to_taken: %d containers taken in place, %d modules; %d operator commands from genesis; "+
		"%s from genesis (%s genesis to webapp held, %s the draft to all taken: %s to every module added, assigned and held; %s the takes)",
		len(mig.taken), len(mig.modules)+1, commands+mig.commands, (adopting + walk).Round(time.Millisecond), adopting.Round(time.Millisecond),
		walk.Round(time.Millisecond), mig.toHeld.Round(time.Millisecond), mig.takes.Round(time.Millisecond))
	callsSince(t, l, taken, 4, "peer-webapp", "peer-svc03", "svc01-worker-redis")

	t.Run("every take adopted its container in place", func(t *testing.T) {
		after := inspectAll(ctx, t, hub, ids)
		fields := 0
		for _, b := range before {
			fields += leaves(b)
		}
		t.Logf("%d containers compared, %d inspect fields each on average (%v left out: they change on their own)",
			len(before), fields/max(1, len(before)), inspectChangesOnItsOwn)
		for name, b := range before {
			a := after[name]
			if a == nil {
				t.Errorf("container %s is gone", name)
				continue
			}
			if d := inspectDiff(b, a, ""); len(d) > 0 {
				t.Errorf("container %s: docker inspect differs:\n  %s", name, strings.Join(d, "\n  "))
			}
		}
	})
	t.Run("the probes saw no failed call through the walk", func(t *testing.T) {
		if bad := probeVerdicts(t, l, time.Time{}); len(bad) > 0 {
			t.Fatalf("%d probes did not hold:\n%s", len(bad), strings.Join(bad, "\n"))
		}
	})
	t.Run("the found firewall gained only meshd's marked rules", func(t *testing.T) {
		firewallMarkedOnly(ctx, t, hub, dumpBefore)
	})
	convergeMeasured(ctx, t, l, hub)
}

// convergeMeasured converges the measured hub once every module is taken: the derived filter
// from the drafted openings keeps every probe as it was (reaching ones reach, refused ones are
// refused).
func convergeMeasured(ctx context.Context, t *testing.T, l *lab.Lab, hub *lab.Machine) {
	var pv report.ConvergePreview
	var code int
	if err := testenv.Poll(t, 60*time.Second, func() error {
		var err error
		pv, code, err = previewOf(ctx, hub)
		return err
	}); err != nil {
		t.Fatalf("converge preview: %v", err)
	}
	text, _ := meshd(ctx, hub, "converge", "hub", "--preview")
	t.Logf("converge preview (exit %d, %d will close):\n%s", code, pv.WillClose, text)
	// The drafted openings declare every published port from anywhere, as the found firewall
	// allowed them: nothing closes.
	if code != 0 || pv.WillClose != 0 {
		t.Errorf("the converge preview exits %d, %d will close: the drafted openings leave a port out", code, pv.WillClose)
	}
	from := time.Now()
	if out, err := meshd(ctx, hub, "converge", "hub", "--plan", pv.Token, "--wait", "3m"); err != nil {
		t.Fatalf("converge: %v\n%s", err, out)
	}
	converged := time.Now()
	t.Logf("converge took %s", converged.Sub(from).Round(time.Millisecond))
	callsSince(t, l, converged, 6, "peer-webapp", "peer-svc03", "outside-store", "svc01-worker-redis")
	t.Run("converged onto the drafted openings, every probe answers as before, through the flip too", func(t *testing.T) {
		if err := testenv.Poll(t, 30*time.Second, func() error { return consistent(ctx, hub, lab.FirewallNftables, "converged") }); err != nil {
			t.Fatal(err)
		}
		if bad := probeVerdicts(t, l, from); len(bad) > 0 {
			t.Fatalf("%d probes do not answer as before the converge (began %s):\n%s", len(bad), from.Format("15:04:05.000"), strings.Join(bad, "\n"))
		}
	})
}
