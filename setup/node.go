package setup

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"meshd/agent/raftnode"
	"meshd/pki"
)

// NodeFile is the node's identity and role as kept in its data dir. It is written once, at
// genesis or join, and read at every start.
type NodeFile struct {
	Name string `json:"name"`
	// ID is the node's persistent identity and its Raft server ID.
	ID     string `json:"id"`
	Server bool   `json:"server"`
	// Advertise is the underlay address other servers reach this one's Raft port at.
	Advertise string `json:"advertise"`
	// RaftPort is the port Raft listens on, from the node's settings at genesis.
	RaftPort uint16 `json:"raft_port,omitempty"`
	// Servers are the servers' bus addresses (host:port) a client node reaches the mesh at.
	Servers []string `json:"servers,omitempty"`
}

// RaftSelf is the node as its Raft server knows it.
func (n *NodeFile) RaftSelf() raftnode.Self {
	return raftnode.Self{Name: n.Name, ID: n.ID, Server: n.Server, Advertise: n.Advertise, Port: n.RaftPort}
}

const NodeFileName = "node.json"

// ReadNodeFile reads the node's identity from dataDir.
func ReadNodeFile(dataDir string) (*NodeFile, error) {
	path := filepath.Join(dataDir, NodeFileName)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s holds no node (no %s): run `meshd genesis` on the control-node or `meshd join` on another machine first", dataDir, NodeFileName)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var n NodeFile
	if err := json.Unmarshal(b, &n); err != nil {
		return nil, fmt.Errorf("%s is damaged: %w", path, err)
	}
	if n.Name == "" || n.ID == "" {
		return nil, fmt.Errorf("%s is damaged: no name or id", path)
	}
	return &n, nil
}

func WriteNodeFile(dataDir string, n *NodeFile) error {
	b, err := json.MarshalIndent(n, "", "  ")
	if err != nil {
		return err
	}
	return pki.WriteFileAtomic(filepath.Join(dataDir, NodeFileName), append(b, '\n'), 0o600)
}

func newID() string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// DetectAdvertise picks the machine's first global unicast IPv4 address, or loopback when it has
// none, as the address other servers reach this one at.
func DetectAdvertise() string {
	ifaces, err := net.Interfaces()
	if err == nil {
		for _, ifc := range ifaces {
			if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
				continue
			}
			addrs, _ := ifc.Addrs()
			for _, a := range addrs {
				if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && ipn.IP.IsGlobalUnicast() {
					return ipn.IP.String()
				}
			}
		}
	}
	return "127.0.0.1"
}
