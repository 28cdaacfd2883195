package agent

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"meshd/fsm"
	"meshd/host"
	"meshd/pki"
)

// DefaultSocket is where the operator's API listens unless --socket or MESHD_SOCKET says otherwise.
const DefaultSocket = "/run/meshd/meshd.sock"

// DefaultDataDir is where a node keeps its identity, its Raft log and its record store.
const DefaultDataDir = "/var/lib/meshd"

// Config is how an agent runs.
type Config struct {
	DataDir string `yaml:"data_dir"`
	Socket  string `yaml:"socket"`
	// ReconcileInterval is how often the host re-checks the machine without a new declaration.
	ReconcileInterval time.Duration `yaml:"reconcile_interval"`
	LogLevel          string        `yaml:"log_level"`
	// DockerHost is the Docker engine's address (unix socket path or unix://, tcp:// URL); empty
	// means the machine's default, unix:///var/run/docker.sock.
	DockerHost string `yaml:"docker_host"`
	// SealKey is the seal key file the node's secrets are sealed under; empty means
	// MESHD_SEAL_KEY, else /etc/meshd/seal.key.
	SealKey string `yaml:"seal_key"`
	// LogOutput receives Raft's own log; nil means stderr.
	LogOutput io.Writer `yaml:"-"`
}

// Agent is a running node.
type Agent struct {
	cfg  Config
	node *NodeFile
	log  *slog.Logger
	fsm  *fsm.FSM
	raft *raftNode
	http *http.Server
	ln   net.Listener
	host *host.Host

	// The node's identity and the mesh CA, unsealed at start.
	secrets  *pki.NodeSecrets
	identity tls.Certificate
	caCert   *x509.Certificate

	// reports are the clients' last host reports, as they posted them to this server's bus.
	reportsMu sync.Mutex
	reports   map[string]host.Report

	// busClient and servers are a client node's way to the servers' bus.
	busClient *http.Client
	serversMu sync.Mutex
	servers   []string

	// declarations receives the node's own declaration each time it changes.
	declarations chan *fsm.Declaration

	// gs is the node's gossip member (gossip.go); pb its calls to other nodes' buses and, on a
	// client, its own bus (peerbus.go).
	gs gossipState
	pb peerBus
}

// Start opens the node's data dir, starts Raft (on a server) and the operator API, and begins
// watching the node's own declaration. It returns once the API is listening.
func Start(cfg Config, log *slog.Logger) (*Agent, error) {
	if cfg.DataDir == "" {
		cfg.DataDir = DefaultDataDir
	}
	if cfg.Socket == "" {
		cfg.Socket = DefaultSocket
	}
	if cfg.ReconcileInterval == 0 {
		cfg.ReconcileInterval = 10 * time.Second
	}
	if cfg.LogOutput == nil {
		cfg.LogOutput = os.Stderr
	}
	n, err := ReadNodeFile(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	sec, err := pki.OpenNodeSecrets(cfg.DataDir, pki.SealKeyPath(cfg.SealKey))
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", n.Name, err)
	}
	a := &Agent{cfg: cfg, node: n, log: log.With("node", n.Name), fsm: fsm.NewFSM(), declarations: make(chan *fsm.Declaration, 1),
		secrets: sec, reports: map[string]host.Report{}}
	if a.identity, err = pki.Identity(sec.NodeCertPEM, sec.CACertPEM, sec.NodeKey); err != nil {
		return nil, fmt.Errorf("node %s: %w", n.Name, err)
	}
	if a.caCert, err = pki.ParseCert(sec.CACertPEM); err != nil {
		return nil, fmt.Errorf("node %s: mesh CA certificate %s: %w", n.Name, pki.Path(cfg.DataDir, pki.CACertFile), err)
	}
	if n.Server && sec.CA == nil {
		return nil, fmt.Errorf("server node %s has no mesh CA key (%s): it cannot enrol nodes or sign tokens", n.Name, pki.Path(cfg.DataDir, pki.CAKeyFile))
	}
	if !n.Server {
		if len(n.Servers) == 0 {
			return nil, fmt.Errorf("client node %s knows no server (%s has no servers): join it again", n.Name, filepath.Join(cfg.DataDir, nodeFileName))
		}
		a.servers = n.Servers
		a.busClient = &http.Client{Transport: &http.Transport{TLSClientConfig: pki.ClientTLS(&a.identity, a.caCert),
			ResponseHeaderTimeout: 90 * time.Second, IdleConnTimeout: time.Minute}}
	}
	drv, err := drivers(cfg, a.log)
	if err != nil {
		return nil, err
	}
	a.host, err = host.Open(host.Config{DataDir: cfg.DataDir, Interval: cfg.ReconcileInterval, Logger: a.log.With("part", "host"), Drivers: drv})
	if err != nil {
		return nil, err
	}
	handler := a.clientRoutes()
	if n.Server {
		a.raft, err = openRaft(cfg.DataDir, n, a.fsm, cfg.LogOutput)
		if err != nil {
			a.host.Close()
			return nil, err
		}
		handler = a.routes()
	}
	ln, err := listenSocket(cfg.Socket)
	if err != nil {
		if a.raft != nil {
			a.raft.shutdown(a.log)
		}
		a.host.Close()
		return nil, err
	}
	a.ln = ln
	a.http = &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := a.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("operator API stopped", "socket", cfg.Socket, "err", err)
		}
	}()
	if n.Server {
		a.log.Info("agent started", "id", n.ID, "data_dir", cfg.DataDir, "socket", cfg.Socket,
			"raft", fmt.Sprintf("%s:%d", n.Advertise, n.RaftPort))
	} else {
		a.log.Info("agent started as a client", "id", n.ID, "data_dir", cfg.DataDir, "socket", cfg.Socket, "servers", n.Servers)
	}
	return a, nil
}

// listenSocket opens the operator's unix socket, root only: the directory 0700, the socket 0600.
// A socket left by an agent that died is replaced; one another agent is serving is not.
func listenSocket(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("create socket dir %s: %w", filepath.Dir(path), err)
	}
	if _, err := os.Stat(path); err == nil {
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("socket %s is served by another agent; stop it or give this one --socket", path)
		}
		os.Remove(path)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("chmod %s: %w", path, err)
	}
	return ln, nil
}

// Run watches the node's declaration and reconciles the machine to it until ctx is done, then
// stops the agent cleanly.
func (a *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a.gs.mu.Lock()
	a.gs.stop = cancel
	a.gs.mu.Unlock()
	go a.runGossip(ctx)
	hostDone := make(chan struct{})
	if a.node.Server {
		go a.watchOwnDeclaration(ctx)
		go a.runBus(ctx)
	} else {
		go a.watchBus(ctx)
		go a.postReports(ctx)
	}
	go func() {
		defer close(hostDone)
		_ = a.host.Run(ctx, a.declarations)
	}()
	<-ctx.Done()
	<-hostDone
	return a.Stop()
}

// Stop closes the API and shuts Raft down, leaving everything on disk for the next start.
func (a *Agent) Stop() error {
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = a.http.Shutdown(sctx)
	os.Remove(a.cfg.Socket)
	a.stopGossip()
	if a.raft != nil {
		a.raft.shutdown(a.log)
	}
	if err := a.host.Close(); err != nil {
		a.log.Warn("record store close", "err", err)
	}
	a.log.Info("agent stopped")
	return nil
}

// watchOwnDeclaration composes the node's declaration each time the record changes and passes it
// on when it differs from the last one.
func (a *Agent) watchOwnDeclaration(ctx context.Context) {
	if err := a.raft.waitCaughtUp(ctx); err != nil {
		return
	}
	var last []byte
	var index uint64
	for ctx.Err() == nil {
		var d *fsm.Declaration
		var err error
		a.fsm.Read(func(r *fsm.Record, i uint64) {
			index = i
			if r.Nodes[a.node.Name] != nil {
				d, err = fsm.Compose(r, a.node.Name)
			}
		})
		if err != nil {
			a.log.Error("compose own declaration", "err", err)
		}
		if d != nil {
			b, _ := json.Marshal(d)
			if !bytes.Equal(b, last) {
				last = b
				a.log.Info("declaration", "index", index, "mode", d.Mode, "assigned", d.Assigned, "taken", d.Taken, "resources", len(d.Resources))
				select {
				case a.declarations <- d:
				case <-ctx.Done():
					return
				}
			}
		}
		a.fsm.Wait(ctx, index)
	}
}
