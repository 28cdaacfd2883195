package container

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	dcontainer "github.com/docker/docker/api/types/container"

	"meshd/ctrspec"
)

// A key the engine adds that nobody classified is named, however deep (a network's endpoint);
// a classified object is not walked into, a map's keys match *.
func TestUnitUnclassifiedNamesANewKey(t *testing.T) {
	raw := []byte(`{"Id":"x","State":{"Whatever":1},"HostConfig":{"Privileged":false,"NewThing":true},
		"NetworkSettings":{"Networks":{"appnet":{"Aliases":["api"],"Brand":"new"}}}}`)
	got, err := unclassified(raw)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"HostConfig.NewThing", "NetworkSettings.Networks.appnet.Brand"}
	if !slices.Equal(got, want) {
		t.Errorf("unclassified = %q, want %q", got, want)
	}
}

// What no Spec can say is named when it is away from the engine's default, and empty values of
// any spelling are the default.
func TestUnitUnexpressedAgainstTheDefaults(t *testing.T) {
	defs := &engineDefaults{
		config:     map[string]json.RawMessage{"Tty": json.RawMessage(`false`), "Domainname": json.RawMessage(`""`)},
		hostConfig: map[string]json.RawMessage{"IpcMode": json.RawMessage(`"private"`), "ShmSize": json.RawMessage(`67108864`), "Sysctls": json.RawMessage(`null`)},
		log:        dcontainer.LogConfig{Type: "json-file", Config: map[string]string{"max-file": "3"}},
	}
	raw := []byte(`{"Config":{"Tty":true,"Domainname":null,"User":"x"},
		"HostConfig":{"IpcMode":"private","ShmSize":134217728,"Sysctls":{},"Privileged":true}}`)
	got := defs.unexpressed(raw)
	want := []string{"Config.Tty true", "HostConfig.ShmSize 134217728"}
	if !slices.Equal(got, want) {
		t.Errorf("unexpressed = %q, want %q", got, want)
	}
	if l := defs.ownLog(nil); l != nil {
		t.Errorf("ownLog(nil) = %+v", l)
	}
}

// With the engine's defaults unknown, a container's log configuration is not judged: a
// container created with the engine's default driver is no difference.
func TestUnitUnknownDefaultsJudgeNoLogging(t *testing.T) {
	o := Observed{ImageRef: "web:1", Spec: ctrspec.Spec{Name: "web", Image: "web:1", Restart: "no",
		Runtime: ctrspec.Runtime{Logging: &ctrspec.Logging{Driver: "json-file", Options: map[string]string{"max-file": "3"}}}}}
	if d := Diff(ctrspec.Spec{Name: "web", Image: "web:1"}, o); len(d) != 0 {
		t.Errorf("Diff with the defaults unknown = %q, want none", d)
	}
	o.defs = &engineDefaults{log: dcontainer.LogConfig{Type: "local"}}
	if d := Diff(ctrspec.Spec{Name: "web", Image: "web:1"}, o); len(d) != 1 || !strings.Contains(d[0], "logging") {
		t.Errorf("Diff with the defaults known = %q, want the log driver", d)
	}
}
