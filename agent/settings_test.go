package agent

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"meshd/api"
	"meshd/catalogue"
	"meshd/container"
	"meshd/fsm"
	"meshd/report"
)

// settingsRecord is a record after an adopted genesis of node hub with the default catalogue and
// the given settings.
func settingsRecord(t *testing.T, settings map[string]string) *fsm.Record {
	t.Helper()
	cat, err := catalogue.Default()
	if err != nil {
		t.Fatal(err)
	}
	var foundation []string
	for _, name := range cat.Names() {
		if cat[name].Foundation {
			foundation = append(foundation, name)
		}
	}
	b, err := fsm.Encode(fsm.OpGenesis, time.Unix(1_700_000_000, 0), fsm.Genesis{Node: "hub", ID: "hub-id", Mode: fsm.Adopted,
		Advertise: "127.0.0.1", Settings: settings, Catalogue: catalogue.DefaultSources(), Assign: foundation})
	if err != nil {
		t.Fatal(err)
	}
	f := fsm.NewFSM()
	if res, ok := f.Apply(&raft.Log{Index: 1, Data: b}).(fsm.Result); !ok || res.Err != nil {
		t.Fatalf("genesis: %+v", res)
	}
	var r *fsm.Record
	f.Read(func(rec *fsm.Record, _ uint64) { r = rec })
	return r
}

func bindKeys(bs []api.PortBind) string {
	var out []string
	for _, b := range bs {
		out = append(out, fmt.Sprintf("%s=%d/%s", b.Key, b.Port, b.Proto))
	}
	return strings.Join(out, " ")
}

// A settings change asks the node about exactly the ports it moves: a new store port, gossip's
// two protocols, nothing for a port bound today for the same setting or a setting that is no port.
func TestSettingsBindsAreWhatMoves(t *testing.T) {
	r := settingsRecord(t, map[string]string{"store.port": "6380"})
	cases := []struct {
		values map[string]string
		want   string
	}{
		{map[string]string{"store.port": "6390"}, "store.port=6390/tcp"},
		{map[string]string{"store.port": "6380"}, ""},                // bound today for the same setting
		{map[string]string{"store.port": ""}, "store.port=6379/tcp"}, // back to the default
		{map[string]string{"mesh.gossip": "7950"}, "mesh.gossip=7950/tcp mesh.gossip=7950/udp"},
		{map[string]string{"store.image": "meshd-lab/store:2"}, ""},
	}
	for _, c := range cases {
		got, err := settingsBinds(r, "hub", c.values)
		if err != nil {
			t.Fatalf("%v: %v", c.values, err)
		}
		if bindKeys(got) != c.want {
			t.Errorf("%v: asks the node about %q, want %q", c.values, bindKeys(got), c.want)
		}
	}
}

// What the record would refuse is refused before the node is asked, naming the setting.
func TestSettingsBindsRefuseWhatTheRecordRefuses(t *testing.T) {
	r := settingsRecord(t, nil)
	if _, err := settingsBinds(r, "nosuch", map[string]string{"store.port": "6390"}); err == nil || !strings.Contains(err.Error(), "nosuch") {
		t.Errorf("an unknown node: %v", err)
	}
	var ref *fsm.Refusal
	_, err := settingsBinds(r, "hub", map[string]string{"store.port": "5000"})
	if !errors.As(err, &ref) || !strings.Contains(err.Error(), "5000") {
		t.Errorf("the registry's port given to the store: %v", err)
	}
	if _, err := settingsBinds(r, "hub", map[string]string{"nosuch.port": "1"}); !errors.As(err, &ref) || !strings.Contains(err.Error(), "nosuch") {
		t.Errorf("an unknown setting: %v", err)
	}
	if _, err := settingsBinds(r, "hub", map[string]string{"store.port": "http"}); !errors.As(err, &ref) {
		t.Errorf("a port that is no number: %v", err)
	}
}

// The node refuses a port held by another container or process, naming the node, the setting, the
// port and the holder; the module's own container and meshd's own listener are not holders.
func TestJudgeBindsNamesHolders(t *testing.T) {
	any4 := netip.IPv4Unspecified()
	// Ports from below the ephemeral range (freeLoopbackPort): the test binds "registry"'s for
	// real, and one the kernel hands out at random can be another connection's by then.
	held, freeP, own, meshP := freeLoopbackPort(t), freeLoopbackPort(t), freeLoopbackPort(t), freeLoopbackPort(t)
	binds := []api.PortBind{
		{Key: "store.port", Proto: "tcp", Addr: any4, Port: held, By: "container meshd-store"},
		{Key: "broker.port", Proto: "tcp", Addr: any4, Port: own, By: "container meshd-broker"},
		{Key: "mesh.bus", Proto: "tcp", Addr: any4, Port: meshP, By: "meshd (bus)"},
		{Key: "registry.port", Proto: "tcp", Addr: any4, Port: freeP, By: "container meshd-registry"},
		// a container's port meshd listens on for its own bus: held by meshd for another setting
		{Key: "notes.port", Proto: "tcp", Addr: any4, Port: meshP, By: "container notes"},
	}
	published := []container.Published{
		{Container: "pred-redis", HostIP: "0.0.0.0", HostPort: held, ContainerPort: 6379, Proto: "tcp"},
		{Container: "meshd-broker", HostIP: "0.0.0.0", HostPort: own, ContainerPort: 5672, Proto: "tcp"},
	}
	listeners := []report.Listener{{Proto: "tcp", Addr: any4, Port: meshP, PID: 4242, Process: "meshd"}}
	fs := judgeBinds("hub", binds, listeners, published, 4242)
	if len(fs) != 2 {
		t.Fatalf("want the store's and the notes' port refused, got %+v", fs)
	}
	byCheck := map[string]api.Finding{}
	for _, f := range fs {
		byCheck[f.Check] = f
	}
	store := byCheck["port.store.port"]
	for _, want := range []string{"node hub", "store.port", fmt.Sprint(held), "container pred-redis", "nothing was changed"} {
		if !strings.Contains(store.Message, want) {
			t.Errorf("the store's refusal does not name %q: %s", want, store.Message)
		}
	}
	if store.Level != api.LevelError || !strings.Contains(store.Holder, "pred-redis") {
		t.Errorf("the store's finding: %+v", store)
	}
	if notes := byCheck["port.notes.port"]; !strings.Contains(notes.Message, "meshd (pid 4242)") {
		t.Errorf("a container port meshd listens on is not refused naming meshd: %+v", notes)
	}
}

// A port this very process holds (a listener, not a container) is refused by the real check too,
// with the process named.
func TestCheckBindsNamesAListeningProcess(t *testing.T) {
	l, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := uint16(l.Addr().(*net.TCPAddr).Port)
	b := api.PortBind{Key: "store.port", Proto: "tcp", Addr: netip.IPv4Unspecified(), Port: port, By: "container meshd-store"}
	fs := checkBinds(t.Context(), "hub", "unix:///nonexistent/docker.sock", []api.PortBind{b})
	if !refusing(fs) {
		t.Fatalf("a held port was not refused: %+v", fs)
	}
	var msg string
	for _, f := range fs {
		if f.Level == api.LevelError {
			msg = f.Message
		}
	}
	if !strings.Contains(msg, fmt.Sprintf("pid %d", os.Getpid())) {
		t.Errorf("the refusal does not name the holder: %s", msg)
	}
	text := (&SettingsRefusal{Node: "hub", Findings: fs}).Error()
	if !strings.Contains(text, "node hub") || !strings.Contains(text, "nothing was changed") || !strings.Contains(text, "port.store.port") {
		t.Errorf("refusal text: %s", text)
	}
}
