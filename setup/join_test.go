package setup

import (
	"strings"
	"testing"

	"meshd/catalogue"
)

// join --port takes genesis's syntax for the ports a client binds, and refuses the others.
func TestJoinSettings(t *testing.T) {
	cat, err := catalogue.Default()
	if err != nil {
		t.Fatal(err)
	}
	got, err := JoinSettings(cat, map[string]string{"gossip": "17946", "mesh.tunnel": "51821", "bus": "17170"}, false)
	if err != nil || len(got) != 3 || got["mesh.gossip"] != "17946" || got["mesh.tunnel"] != "51821" || got["mesh.bus"] != "17170" {
		t.Fatalf("JoinSettings: %v %v", got, err)
	}
	for _, c := range []struct{ key, val, says string }{
		{"raft", "17071", "ports it binds itself: bus, gossip, tunnel"},
		{"registry", "5001", "ports it binds itself"},
		{"mesh.range", "10.1.0.0/24", "ports it binds itself"},
		{"gossip", "99999", "--port gossip=99999"},
		{"nosuch", "1", "not known"},
	} {
		if _, err := JoinSettings(cat, map[string]string{c.key: c.val}, false); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("--port %s=%s: %v, want it refused saying %q", c.key, c.val, err, c.says)
		}
	}
	if got, err := JoinSettings(cat, nil, false); err != nil || got != nil {
		t.Fatalf("no --port: %v %v", got, err)
	}
	// A server binds its Raft port, so a server's join may set it; a client's may not.
	if _, err := JoinSettings(cat, map[string]string{"raft": "17300"}, false); err == nil {
		t.Fatal("a client join set its raft port")
	}
	if got, err := JoinSettings(cat, map[string]string{"raft": "17300"}, true); err != nil || got["mesh.raft"] != "17300" {
		t.Fatalf("a server join's raft port: %v %v", got, err)
	}
}
