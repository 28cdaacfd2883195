package api_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"meshd/api"
	"meshd/fsm"
	"meshd/report"
)

// A driver's part decodes into its type the same whether the report was made here (a value), typed
// once by a server's fleet (a pointer) or carried as generic JSON; none decodes to false.
func TestUnitDecodeIntoTypedOrJSON(t *testing.T) {
	part := report.ContainerReport{Containers: []report.ContainerView{{Name: "web", Module: "webapp", State: report.ContainerHeld}}}
	b, err := json.Marshal(part)
	if err != nil {
		t.Fatal(err)
	}
	var generic any
	if err := json.Unmarshal(b, &generic); err != nil {
		t.Fatal(err)
	}
	for what, raw := range map[string]any{"a value": part, "a pointer": &part, "generic JSON": generic} {
		var got report.ContainerReport
		if !api.DecodeInto(raw, &got) || !reflect.DeepEqual(got, part) {
			t.Fatalf("%s: %+v; want %+v", what, got, part)
		}
	}
	var none report.ContainerReport
	rep := report.Report{Kinds: map[string]any{}}
	if api.DecodeInto(rep.Kinds[fsm.KindContainer], &none) || api.DecodeInto((*report.ContainerReport)(nil), &none) {
		t.Fatal("no part decoded to true")
	}
}
