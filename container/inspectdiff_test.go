package container

import (
	"slices"
	"testing"
)

// InspectDiff names what differs in a reproduced key, leaves out what the engine assigns and
// meshd's labels, reads each container's own id alike, and compares env as a set but the
// command in order.
func TestUnitInspectDiff(t *testing.T) {
	a := []byte(`{"Id":"aaaaaaaaaaaa1111","Created":"x","Config":{"Hostname":"aaaaaaaaaaaa","Env":["A=1","B=2"],
		"Cmd":["serve","-v"],"Labels":{"x":"1"}},"HostConfig":{"Memory":67108864,"IpcMode":"private"}}`)
	b := []byte(`{"Id":"bbbbbbbbbbbb2222","Created":"y","Config":{"Hostname":"bbbbbbbbbbbb","Env":["B=2","A=1"],
		"Cmd":["-v","serve"],"Labels":{"x":"1","meshd.managed":"true"}},"HostConfig":{"Memory":0,"IpcMode":"host"}}`)
	got, err := InspectDiff(a, b, "meshd.")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`Config.Cmd: ["serve","-v"] → ["-v","serve"]`, `HostConfig.IpcMode: "private" → "host"`,
		`HostConfig.Memory: 67108864 → null`}
	if !slices.Equal(got, want) {
		t.Errorf("InspectDiff = %q, want %q", got, want)
	}
}
