package container

import (
	"encoding/json"
	"slices"
	"testing"

	dcontainer "github.com/docker/docker/api/types/container"
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
