package agent

import (
	"crypto/ed25519"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"meshd/catalogue"
	"meshd/fsm"
	"meshd/pki"
	"meshd/report"
)

func wgPub(t *testing.T) string {
	t.Helper()
	k, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k.PublicKey().String()
}

func apply(t *testing.T, r *fsm.Record, op fsm.Op, at time.Time, body any) {
	t.Helper()
	b, err := fsm.Encode(op, at, body)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fsm.Apply(r, b); err != nil {
		t.Fatalf("%s: %v", op, err)
	}
}

// The tunnel view a server composes from the record and the hub's report as gossip carried it
// (generic JSON, as it arrives): each peer carried or enrolled as which node, with when the hub
// last heard it and the bytes moved; a peer the hub's device does not know is listed, never heard.
func TestUnitTunnelViewFromTheHubsReport(t *testing.T) {
	at := time.Date(2026, 12, 1, 5, 0, 0, 0, time.UTC)
	hubKey, p1, p2, p3 := wgPub(t), wgPub(t), wgPub(t), wgPub(t)
	r := fsm.NewRecord()
	apply(t, r, fsm.OpGenesis, at, fsm.Genesis{Node: "hub", ID: "id-hub", Mode: fsm.Adopted, Advertise: "198.51.100.10",
		Settings: map[string]string{"registry": "5001"}, Catalogue: catalogue.DefaultSources(), Assign: []string{"broker", "mesh", "registry", "store"},
		Tunnel: &fsm.TunnelTake{Node: "hub", Interface: "wg0", PublicKey: hubKey, Address: "10.44.0.1/24", Port: 51820, Peers: []fsm.FoundPeer{
			{PublicKey: p1, AllowedIPs: []string{"10.44.0.2/32"}},
			{PublicKey: p2, AllowedIPs: []string{"10.44.0.3/32"}},
			{PublicKey: p3, AllowedIPs: []string{"10.44.0.10/32"}},
		}}})
	apply(t, r, fsm.OpTokenCreate, at, fsm.TokenCreate{Hash: "h", Mode: fsm.Adopted, Expires: at.Add(time.Hour)})
	apply(t, r, fsm.OpNodeEnrol, at, fsm.Enrol{Node: "peer2", ID: "id-2", TokenHash: "h", WireGuardKey: p2, FoundTunnel: "wg0"})

	if v := tunnelViewOf(r, nil, ""); v.State != "" || len(v.Peers) != 3 || !v.Peers[0].LastHeard.IsZero() {
		t.Fatalf("no report yet: %+v", v)
	}

	heard, hs := at.Add(-5*time.Second), at.Add(-90*time.Second)
	det := report.TunnelDetail{State: report.TunnelMeshUp, Says: "mesh up", Peers: []report.TunnelPeer{
		{PublicKey: p1, Carried: true, LastHandshake: hs, LastHeard: heard, ReceiveBytes: 4096, TransmitBytes: 8192, Endpoint: "198.51.100.11:51820"},
		{PublicKey: p2, Name: "peer2", LastHandshake: hs, ReceiveBytes: 10, TransmitBytes: 20},
	}}
	rep := &report.Report{When: at, Kinds: map[string]any{fsm.KindTunnel: det}}
	b, _ := json.Marshal(rep)
	var gossiped report.Report // as gossip hands it over: the detail is generic JSON
	if err := json.Unmarshal(b, &gossiped); err != nil {
		t.Fatal(err)
	}
	v := tunnelViewOf(r, &gossiped, "gossip")
	if v.State != report.TunnelMeshUp || v.ReportFrom != "gossip" || !v.ReportAt.Equal(at) || v.Port != 51820 || v.Taken != "wg0" {
		t.Fatalf("view: %+v", v)
	}
	want := []struct {
		addr, node string
		enrolled   bool
		heard      time.Time
		rx, tx     int64
	}{
		{"10.44.0.2", "", false, heard, 4096, 8192},
		{"10.44.0.3", "peer2", true, hs, 10, 20}, // no last_heard: its handshake
		{"10.44.0.10", "", false, time.Time{}, 0, 0},
	}
	if len(v.Peers) != len(want) {
		t.Fatalf("peers %+v", v.Peers)
	}
	for i, w := range want {
		p := v.Peers[i]
		if p.Address != w.addr || p.Node != w.node || p.Enrolled != w.enrolled || !p.LastHeard.Equal(w.heard) || p.ReceiveBytes != w.rx || p.TransmitBytes != w.tx {
			t.Errorf("peer %d: %+v, want %+v", i, p, w)
		}
	}
	if v.Peers[0].Endpoint != "198.51.100.11:51820" {
		t.Errorf("peer1's endpoint as the hub's device has it: %q", v.Peers[0].Endpoint)
	}
}

// `meshd tunnel take` on a hub that enrolled before: the agent signs the key's move with the
// node's identity from the key the record holds now, and the record takes it; the same take
// signed by another identity moves nothing.
func TestUnitTunnelTakeIsAnnouncedWithTheNodesIdentity(t *testing.T) {
	at := time.Date(2026, 12, 1, 5, 0, 0, 0, time.UTC)
	id, err := pki.NewNodeKey()
	if err != nil {
		t.Fatal(err)
	}
	stranger, err := pki.NewNodeKey()
	if err != nil {
		t.Fatal(err)
	}
	r := fsm.NewRecord()
	apply(t, r, fsm.OpGenesis, at, fsm.Genesis{Node: "hub", ID: "id-hub", Mode: fsm.Adopted, Advertise: "198.51.100.10",
		PublicKey: pki.PublicKeyString(id.Public().(ed25519.PublicKey)), Settings: map[string]string{"registry": "5001"},
		Catalogue: catalogue.DefaultSources(), Assign: []string{"broker", "mesh", "registry", "store"}})
	own := wgPub(t)
	r.Nodes["hub"].WireGuardKey = own // the key it enrolled with
	found := wgPub(t)
	take := &fsm.TunnelTake{Node: "hub", Interface: "wg0", PublicKey: found, Address: "10.44.0.1/24", Port: 51820}

	forged := *take
	announceTake(r, &forged, stranger)
	b, _ := fsm.Encode(fsm.OpTunnelTake, at, &forged)
	if _, err := fsm.Apply(r, b); err == nil || !strings.Contains(err.Error(), "node hub") || r.Nodes["hub"].WireGuardKey != own {
		t.Fatalf("a take signed by another identity: %v; hub's key %s", err, r.Nodes["hub"].WireGuardKey)
	}
	announceTake(r, take, id)
	if take.Announcement.Previous != own || take.Announcement.Key != found {
		t.Fatalf("announcement %+v", take.Announcement)
	}
	apply(t, r, fsm.OpTunnelTake, at, take)
	if r.Nodes["hub"].WireGuardKey != found || r.Nodes["hub"].ID != "id-hub" {
		t.Fatalf("after the announced take: %+v", r.Nodes["hub"])
	}
}
