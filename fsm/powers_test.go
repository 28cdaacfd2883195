package fsm

import (
	"strings"
	"testing"
	"time"
)

// Issue 38, as the record applies it: from version 7 a container's manifest says what a real
// container is, and what of it gives power over the machine (privileged, devices, capabilities
// beyond the engine's default set, the host's network or PID namespace) needs privileged: true
// and the operator's word, as a root-equivalent file or mount does. Capabilities of the
// default set and named volumes need nothing. A version 6 command saying any of the new fields
// is refused as it was then (unknown fields), so a replayed log holds its record.
func TestContainerPowersAtCommandVersion7(t *testing.T) {
	r := NewRecord()
	mustApply(t, r, genesisCmd(t, Adopted))
	for _, c := range []struct{ body, field, why string }{
		{"cap_add: [NET_ADMIN]", "containers[0].cap_add[0]", "adds capability NET_ADMIN"},
		{"cap_add: [cap_sys_admin]", "containers[0].cap_add[0]", "adds capability SYS_ADMIN"},
		{"privileged: true", "containers[0].privileged", "is privileged"},
		{"devices: [/dev/net/tun]", "containers[0].devices[0]", "has device /dev/net/tun"},
		{"network_mode: host", "containers[0].network_mode", "host's network"},
		{"pid: host", "containers[0].pid", "host's processes"},
	} {
		s := src("vpn", "containers:\n  - name: vpn\n    image: i\n    "+c.body+"\n")
		_, err := Apply(r, cmd(t, OpCatalogueAdd, t0.Add(time.Minute), CatalogueAdd{Source: s}))
		if err == nil || !strings.Contains(err.Error(), c.field) || !strings.Contains(err.Error(), c.why) ||
			!strings.Contains(err.Error(), "privileged: true") {
			t.Errorf("version 7 catalogue.add of a container with %s: %v", c.body, err)
		}
		// Said and given the operator's word, it is added, and named for what it is.
		said := src("vpn", "privileged: true\ncontainers:\n  - name: vpn\n    image: i\n    "+c.body+"\n")
		mustApply(t, r, cmdBy(t, OpCatalogueAdd, t0.Add(2*time.Minute), "operator alice", CatalogueAdd{Source: said, Privileged: true}))
		if eq := strings.Join(r.RootEquivalent("vpn"), "; "); !strings.Contains(eq, c.why) {
			t.Errorf("root-equivalent of a module with %s: %q", c.body, eq)
		}
	}
	plain := src("api", "containers:\n  - name: api\n    image: i\n    cap_add: [CHOWN, NET_BIND_SERVICE]\n    user: \"65534\"\n"+
		"    networks: [{name: appnet, aliases: [api]}]\n    memory: 64m\n    volumes: [\"apidata:/var/lib/api\"]\n")
	mustApply(t, r, cmd(t, OpCatalogueAdd, t0.Add(3*time.Minute), CatalogueAdd{Source: plain}))
	if eq := r.RootEquivalent("api"); len(eq) != 0 {
		t.Errorf("a module with default capabilities and a named volume is root-equivalent: %q", eq)
	}
	mustApply(t, r, cmd(t, OpModuleAssign, t0.Add(4*time.Minute), ModuleOnNode{Node: "hub", Module: "api"}))

	// Version 6 did not know the fields: the same commands are refused as they were, and the
	// record holds what it held.
	v6 := NewRecord()
	mustApply(t, v6, genesisCmd(t, Adopted))
	before, _ := v6.Marshal()
	_, err := Apply(v6, cmdV(t, 6, OpCatalogueAdd, t0.Add(3*time.Minute), CatalogueAdd{Source: plain}))
	if err == nil || !strings.Contains(err.Error(), "containers[0].user") || !strings.Contains(err.Error(), "need version 7") {
		t.Errorf("version 6 catalogue.add of the new vocabulary: %v", err)
	}
	after, _ := v6.Marshal()
	if string(before) != string(after) {
		t.Error("a refused version 6 command changed the record")
	}
	old := src("web", "containers: [{name: web, image: i, volumes: [\"/srv/web:/srv\"]}]\n")
	mustApply(t, v6, cmdV(t, 6, OpCatalogueAdd, t0.Add(4*time.Minute), CatalogueAdd{Source: old}))
}
