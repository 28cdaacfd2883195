package preview

import (
	"slices"
	"strings"
	"testing"
	"time"

	"meshd/catalogue"
	"meshd/ctrspec"
	"meshd/fsm"
	"meshd/report"
)

// takeOf is the take preview of module api on hub holding found, declared as declared.
func takeOf(t *testing.T, found ctrspec.Spec, declared catalogue.Container) report.PreviewContainer {
	t.Helper()
	rep := &report.Report{When: time.Now(), Assigned: []string{"api"}, Kinds: map[string]any{
		fsm.KindContainer: &report.ContainerReport{Containers: []report.ContainerView{
			{Name: "api", Module: "api", State: report.ContainerHeld, ID: "0123456789abcdef", Image: found.Image, Config: &found},
		}},
	}}
	d := &fsm.Declaration{Node: "hub", Resources: []fsm.Resource{{Module: "api", Kind: fsm.KindContainer, Taken: true, Container: &declared}}}
	pv, err := Take(rep, d, "api")
	if err != nil {
		t.Fatal(err)
	}
	if len(pv.Containers) != 1 {
		t.Fatalf("preview containers %+v, want api", pv.Containers)
	}
	return pv.Containers[0]
}

// The measured case: a found container on appnet with alias api, NET_ADMIN, user 65534,
// a memory limit and a health check, and a manifest saying only its image, command, port and
// restart policy. The preview named it "already the declaration"; it must name each loss.
func TestUnitTakePreviewNamesEachLoss(t *testing.T) {
	base := ctrspec.Spec{Name: "api", Image: "lab/echo:1", Ports: []string{"8080:8080"}, Restart: "unless-stopped",
		Cmd: []string{"--listen", ":8080"}}
	found := base
	found.Runtime = ctrspec.Runtime{User: "65534", Networks: []ctrspec.Network{{Name: "appnet", Aliases: []string{"api"}}},
		CapAdd: []string{"NET_ADMIN"}, Memory: "64m", Healthcheck: &ctrspec.Healthcheck{Test: []string{"CMD-SHELL", "/labsvc health"}}}
	simple := catalogue.Container{Name: "api", Image: "lab/echo:1", Ports: []string{"8080:8080"}, Restart: "unless-stopped",
		Command: []string{"--listen", ":8080"}}
	pc := takeOf(t, found, simple)
	if pc.Aside == "" {
		t.Errorf("a container that loses its network is adopted in place: %+v", pc)
	}
	for _, want := range []string{"capabilities: NET_ADMIN dropped", "network appnet → bridge, alias api lost",
		"user 65534 → the image's default", "memory limit 64m removed", "health check [CMD-SHELL /labsvc health] removed"} {
		if !slices.Contains(pc.Losses, want) || !slices.Contains(pc.Differences, want) {
			t.Errorf("preview lacks the loss %q: differences %q, losses %q", want, pc.Differences, pc.Losses)
		}
	}

	exact := simple
	exact.Runtime = found.Runtime.Clone()
	pc = takeOf(t, found, exact)
	if pc.Aside != "" || len(pc.Differences) != 0 || len(pc.Losses) != 0 {
		t.Errorf("the exact declaration is not adopted in place: %+v", pc)
	}

	// What no manifest can say is a difference even for the exact declaration.
	found.Unexpressed = []string{`HostConfig.IpcMode "host"`}
	pc = takeOf(t, found, exact)
	if pc.Aside == "" || len(pc.Losses) != 1 || !strings.Contains(pc.Losses[0], "IpcMode") {
		t.Errorf("a container with what a manifest cannot say: %+v, want replaced with that loss", pc)
	}
}

// Converging takes every assigned module: its preview names what their found containers lose,
// and a loss changes the plan token.
func TestUnitConvergePreviewNamesLosses(t *testing.T) {
	found := ctrspec.Spec{Name: "api", Image: "lab/echo:1", Runtime: ctrspec.Runtime{CapAdd: []string{"NET_ADMIN"}}}
	rep := &report.Report{Node: "hub", When: time.Now(), Assigned: []string{"api"}, Listeners: []report.Listener{}, Kinds: map[string]any{
		fsm.KindContainer: &report.ContainerReport{Containers: []report.ContainerView{
			{Name: "api", Module: "api", State: report.ContainerHeld, ID: "0123456789abcdef", Image: found.Image, Config: &found},
		}},
	}}
	declared := catalogue.Container{Name: "api", Image: "lab/echo:1"}
	d := &fsm.Declaration{Node: "hub", Mode: fsm.Adopted, Assigned: []string{"api"}, Taken: []string{},
		Resources: []fsm.Resource{{Module: "api", Kind: fsm.KindContainer, Container: &declared}}}
	pv, err := Converge(rep, d)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(pv.Losses, []string{"container api: capabilities: NET_ADMIN dropped"}) {
		t.Errorf("converge preview losses %q", pv.Losses)
	}
	declared.CapAdd = []string{"NET_ADMIN"}
	exact, err := Converge(rep, d)
	if err != nil {
		t.Fatal(err)
	}
	if len(exact.Losses) != 0 || exact.Token == pv.Token {
		t.Errorf("declared exactly: losses %q, token %s (was %s)", exact.Losses, exact.Token, pv.Token)
	}
}
