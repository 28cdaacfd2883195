package ctrspec

import (
	"slices"
	"testing"
)

// The found container, read against a manifest of its image, command, port and restart
// policy only: every loss is named in plain words; the exact declaration has none.
func TestRuntimeChangesNamesEachLoss(t *testing.T) {
	found := Spec{Name: "api", Image: "lab/echo:1", Runtime: Runtime{
		User:        "65534",
		Networks:    []Network{{Name: "appnet", Aliases: []string{"api"}}},
		CapAdd:      []string{"NET_ADMIN"},
		Memory:      "64m",
		Healthcheck: &Healthcheck{Test: []string{"CMD-SHELL", "/labsvc health"}},
	}, Unexpressed: []string{`HostConfig.IpcMode "host"`}}
	simplified := Spec{Name: "api", Image: "lab/echo:1"}
	got := Losses(RuntimeChanges(found, simplified))
	want := []string{
		"user 65534 → the image's default",
		"network appnet → bridge, alias api lost",
		"capabilities: NET_ADMIN dropped",
		"memory limit 64m removed",
		"health check [CMD-SHELL /labsvc health] removed",
		`HostConfig.IpcMode "host" lost (a manifest cannot say it)`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("losses\n%q\nwant\n%q", got, want)
	}
	exact := found
	exact.Unexpressed = nil
	exact.CapAdd = []string{"cap_net_admin"} // spelt another way: the same capability
	if cs := RuntimeChanges(found, exact); len(cs) != 1 || cs[0].Field != "unexpressed" {
		t.Errorf("exact declaration: %v, want only what no manifest can say", cs)
	}
	found.Unexpressed = nil
	if cs := RuntimeChanges(found, exact); len(cs) != 0 {
		t.Errorf("exact declaration: %v, want none", cs)
	}
	// Gaining is a change, not a loss.
	more := exact
	more.CapAdd = []string{"NET_ADMIN", "SYS_TIME"}
	more.Memory = "128m"
	cs := RuntimeChanges(found, more)
	if len(cs) != 2 || len(Losses(cs)) != 0 {
		t.Errorf("gaining: %v, want two changes and no loss", cs)
	}
}

func TestRuntimeCheckNamesFields(t *testing.T) {
	r := Runtime{NetworkMode: "host", Networks: []Network{{Name: "a"}}, Hostname: "x", Memory: "1q", MemorySwap: "1g",
		CPUs: "-1", Ulimits: []string{"nofile"}, StopSignal: "TERM", Tmpfs: []string{"run"}}
	var fields []string
	r.Check(func(f, _, _ string) { fields = append(fields, f) })
	want := []string{"network_mode", "hostname", "memory", "cpus", "ulimits[0]", "stop_signal", "tmpfs[0]"}
	if !slices.Equal(fields, want) {
		t.Errorf("fields %q, want %q", fields, want)
	}
}
