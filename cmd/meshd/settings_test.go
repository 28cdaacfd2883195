package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"meshd/api"
	"meshd/internal/testenv"
	"meshd/setup"
)

func TestParseSettings(t *testing.T) {
	got, err := parseSettings([]string{"store.port=6380", "mesh.gossip=", "store.image=a=b"})
	if err != nil {
		t.Fatal(err)
	}
	if got["store.port"] != "6380" || got["mesh.gossip"] != "" || got["store.image"] != "a=b" || len(got) != 3 {
		t.Fatalf("parsed %v", got)
	}
	for _, bad := range [][]string{{"store.port"}, {"=6380"}, {"store.port=1", "store.port=2"}} {
		if _, err := parseSettings(bad); err == nil {
			t.Errorf("%q was accepted", bad)
		}
	}
}

// listening says whether something listens on port (proto "t" tcp, "u" udp) in the node's
// network namespace.
func (n *node) listening(proto string, port int) bool {
	out, _ := exec.Command("ip", "netns", "exec", n.netns, "ss", "-Hl"+proto+"n", fmt.Sprintf("sport = :%d", port)).Output()
	return strings.TrimSpace(string(out)) != ""
}

func (n *node) settings() map[string]string {
	var v api.NodeView
	n.jsonOf(&v, "node", "show", "hub")
	return v.Node.Settings
}

// Settings outlive genesis: `meshd node set` checks the ports it moves on the node and refuses a
// held one naming its holder with the record unchanged; once committed the agent follows — gossip
// and the bus rebind at once, the Raft port at the next start.
func TestProcessNodeSet(t *testing.T) {
	n := newNode(t)
	n.genesis("--adopted")
	n.startAgent()

	t.Run("a port held on the node is refused naming the holder, the record unchanged", func(t *testing.T) {
		holder := n.serve(t, "0.0.0.0:6390")
		before := n.settings()
		_, errs, code := n.run("node", "set", "hub", "store.port=6390")
		if code != 1 {
			t.Fatalf("node set to a held port: exit %d, %s", code, errs)
		}
		for _, want := range []string{"node hub", "store.port", "6390", fmt.Sprintf("labsvc (pid %d)", holder.Process.Pid), "nothing was changed"} {
			if !strings.Contains(errs, want) {
				t.Errorf("the refusal does not name %q: %s", want, errs)
			}
		}
		if after := n.settings(); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatalf("a refused node set changed the record: %v -> %v", before, after)
		}
	})
	t.Run("a free port is committed, and moving back works", func(t *testing.T) {
		out := n.ok("node", "set", "hub", "store.port=6391")
		if !strings.Contains(out, "store.port") || !strings.Contains(out, "6391") {
			t.Errorf("node set output: %s", out)
		}
		if got := n.settings()["store.port"]; got != "6391" {
			t.Fatalf("store.port = %q after node set", got)
		}
		n.ok("node", "set", "hub", "store.port=")
		if got, ok := n.settings()["store.port"]; ok {
			t.Fatalf("store.port = %q after returning it to its default", got)
		}
		var v api.SettingsView
		n.jsonOf(&v, "node", "set", "hub", "store.port=6391")
		if len(v.Checked) != 1 || v.Checked[0].Port != 6391 || v.Checked[0].Setting != "store.port" {
			t.Fatalf("node set --json: checked %+v", v.Checked)
		}
	})
	t.Run("gossip and the bus rebind on the record's ports", func(t *testing.T) {
		n.ok("node", "set", "hub", "mesh.gossip=7950", "mesh.bus=7075")
		poll(t, 30*time.Second, "gossip and the bus on their new ports", func() string {
			switch {
			case !n.listening("t", 7950) || !n.listening("u", 7950):
				return "gossip not on 7950"
			case n.listening("t", 7946) || n.listening("u", 7946):
				return "gossip still on 7946"
			case !n.listening("t", 7075):
				return "bus not on 7075"
			case n.listening("t", 7070):
				return "bus still on 7070"
			}
			return ""
		})
		var m api.MembersView
		n.jsonOf(&m, "members")
		if !m.Running || len(m.Members) != 1 || !strings.HasSuffix(m.Members[0].Address, ":7950") {
			t.Fatalf("the gossip member after the move: %+v", m)
		}
		n.ok("node", "set", "hub", "mesh.bus=")
		poll(t, 30*time.Second, "the bus back on 7070", func() string {
			if !n.listening("t", 7070) || n.listening("t", 7075) {
				return "not yet"
			}
			return ""
		})
	})
	t.Run("the raft port is the record's: a restarted server binds the new one", func(t *testing.T) {
		port := testenv.FreePort(t)
		n.ok("node", "set", "hub", fmt.Sprintf("mesh.raft=%d", port))
		poll(t, 30*time.Second, "node.json following the record's raft port", func() string {
			b, err := os.ReadFile(filepath.Join(n.dir, "node.json"))
			if err != nil {
				return err.Error()
			}
			var nf setup.NodeFile
			if err := json.Unmarshal(b, &nf); err != nil || int(nf.RaftPort) != port {
				return fmt.Sprintf("node.json raft_port %d, want %d", nf.RaftPort, port)
			}
			return ""
		})
		poll(t, 30*time.Second, "raft's configuration at the new address", func() string {
			var peers []api.PeerView
			n.jsonOf(&peers, "operator", "raft", "list-peers")
			if len(peers) != 1 || !strings.HasSuffix(peers[0].Address, fmt.Sprintf(":%d", port)) {
				return fmt.Sprintf("peers %+v", peers)
			}
			return ""
		})
		n.kill(syscall.SIGTERM)
		n.startAgent()
		if !n.listening("t", port) {
			t.Fatalf("the restarted server does not listen on the record's raft port %d:\n%s", port, n.agentLg)
		}
		if got := n.settings()["mesh.raft"]; got != fmt.Sprint(port) {
			t.Fatalf("mesh.raft = %q after the restart", got)
		}
	})
}
