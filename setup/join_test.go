package setup

import (
	"strings"
	"testing"

	"meshd/catalogue"
	"meshd/pki"
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

// Issue 36: a dry run needs no token, only the mode one would carry; a real join needs one, and
// a token's mode is the token's, not a flag's.
func TestJoinTokenDryRun(t *testing.T) {
	p, err := joinToken(JoinOptions{DryRun: true, Preview: pki.TokenPayload{Mode: "adopted", Server: true}})
	if err != nil || p.Mode != "adopted" || !p.Server {
		t.Fatalf("a dry run without a token: %+v %v", p, err)
	}
	for _, c := range []struct {
		opts JoinOptions
		says string
	}{
		{JoinOptions{DryRun: true}, "--adopted or --converged"},
		{JoinOptions{DryRun: true, Preview: pki.TokenPayload{Mode: "sideways"}}, "--adopted or --converged"},
		{JoinOptions{}, "empty"},
		{JoinOptions{Token: "x.y", DryRun: true, Preview: pki.TokenPayload{Mode: "adopted"}}, "the token says the mode"},
	} {
		if _, err := joinToken(c.opts); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("joinToken(%+v): %v, want it refused saying %q", c.opts, err, c.says)
		}
	}
}
