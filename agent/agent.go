package agent

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"meshd/api"
	"meshd/fsm"
	"meshd/host"
	"meshd/pki"
	"meshd/setup"
)

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
	// SocketGroup is a group (name or number) whose members may use the operator socket besides
	// root: the socket is then 0660 with that group; empty means root only (0600).
	SocketGroup string `yaml:"socket_group"`
	// Metrics are TCP addresses (HOST:PORT) to serve Prometheus metrics on besides the operator
	// socket: loopback, or an address in the private network's range; MetricsUnderlay allows any
	// other (the underlay) as well.
	Metrics         []string `yaml:"metrics"`
	MetricsUnderlay bool     `yaml:"metrics_underlay"`
	// LogOutput receives Raft's own log; nil means stderr.
	LogOutput io.Writer `yaml:"-"`
}

// Agent is a running node: the core every node runs (its identity and secrets, the host
// reconciler, the operator socket, its gossip member and the peer bus), and its role, which is
// what a server or a client does differently (role.go).
type Agent struct {
	cfg  Config
	node *setup.NodeFile
	log  *slog.Logger
	// role is the node's kind's lifecycle; peers its part in gossip, views what it shows
	// (role.go). One value, a server's or a client's, set once by setKind.
	role  role
	peers gossipRole
	views roleViews
	http  *http.Server
	ln    net.Listener
	host  *host.Host

	// The node's identity and the mesh CA, unsealed at start.
	secrets  *pki.NodeSecrets
	identity tls.Certificate
	caCert   *x509.Certificate

	// declarations receives the node's own declaration each time it changes.
	declarations chan *fsm.Declaration

	// gs is the node's gossip member (gossip.go); pb its calls to other nodes' buses and, on a
	// client, its own bus (peerbus.go).
	gs gossipState
	pb peerBus

	// mx is the agent's Prometheus registry (metrics.go); privateRange the private network's
	// range as the node's last declaration said it (a string, "" until then).
	mx           *metrics
	privateRange atomic.Value
	// keys is the node's gossip keyring (keyring.go).
	keys *keyrings
	// logs tees the agent's log to `meshd monitor` (monitor.go).
	logs *logHub
	// pagePulse wakes the status pages' event streams when a host report arrives (statuspage.go).
	pagePulse pulse
}

// Start opens the node's data dir, starts its role (Raft on a server) and the operator API, and
// begins watching the node's own declaration. It returns once the API is listening.
func Start(cfg Config, log *slog.Logger) (*Agent, error) {
	if cfg.DataDir == "" {
		cfg.DataDir = DefaultDataDir
	}
	if cfg.Socket == "" {
		cfg.Socket = api.DefaultSocket
	}
	if cfg.ReconcileInterval == 0 {
		cfg.ReconcileInterval = 10 * time.Second
	}
	if cfg.LogOutput == nil {
		cfg.LogOutput = os.Stderr
	}
	n, err := setup.ReadNodeFile(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	sec, err := pki.OpenNodeSecrets(cfg.DataDir, pki.SealKeyPath(cfg.SealKey))
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", n.Name, err)
	}
	hub := newLogHub()
	log = slog.New(newTeeHandler(log.Handler(), hub))
	a := &Agent{cfg: cfg, node: n, log: log.With("node", n.Name), declarations: make(chan *fsm.Declaration, 1), secrets: sec, logs: hub}
	a.keys = a.newKeyrings()
	if a.identity, err = pki.Identity(sec.NodeCertPEM, sec.CACertPEM, sec.NodeKey); err != nil {
		return nil, fmt.Errorf("node %s: %w", n.Name, err)
	}
	if n.Server && sec.CA != nil && pki.LegacyServer(a.identity.Leaf) {
		if err := a.reissueServerCert(); err != nil {
			return nil, err
		}
	}
	if a.caCert, err = pki.ParseCert(sec.CACertPEM); err != nil {
		return nil, fmt.Errorf("node %s: mesh CA certificate %s: %w", n.Name, pki.Path(cfg.DataDir, pki.CACertFile), err)
	}
	for _, addr := range cfg.Metrics {
		if err := checkMetricsAddr(addr, "", true); err != nil {
			return nil, err
		}
	}
	a.mx = newMetrics(a, &a.views)
	drv, err := drivers(cfg, a.log)
	if err != nil {
		return nil, err
	}
	// meshd's own paths as this agent is configured, which no module may touch.
	own := []string{pki.SealKeyPath(cfg.SealKey)}
	if cfg.Socket != "" {
		own = append(own, filepath.Dir(cfg.Socket))
	}
	a.host, err = host.Open(host.Config{DataDir: cfg.DataDir, Seal: sec.Seal, Own: own, Interval: cfg.ReconcileInterval, Logger: a.log.With("part", "host"), Drivers: drv,
		Observe: a.mx.observePass})
	if err != nil {
		return nil, err
	}
	// The one place the node's kind is asked: from here on the agent calls its role.
	var kind nodeKind
	if n.Server {
		kind, err = newServerRole(a.core())
	} else {
		kind, err = newClientRole(a.core())
	}
	if err != nil {
		a.host.Close()
		return nil, err
	}
	a.setKind(kind)
	if err := a.role.open(); err != nil {
		a.host.Close()
		return nil, err
	}
	gid, err := SocketGroupID(cfg.SocketGroup)
	if err != nil {
		a.role.close()
		a.host.Close()
		return nil, err
	}
	ln, err := listenSocket(cfg.Socket, gid)
	if err != nil {
		a.role.close()
		a.host.Close()
		return nil, err
	}
	a.ln = ln
	a.http = &http.Server{Handler: onlyOperators(gid, withSocketAsker(a.node.Name, a.withMetrics(a.role.operatorAPI()))), ReadHeaderTimeout: 10 * time.Second, ConnContext: withPeerCred}
	go func() {
		if err := a.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("operator API stopped", "socket", cfg.Socket, "err", err)
		}
	}()
	return a, nil
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
	for _, addr := range a.cfg.Metrics {
		go a.serveMetrics(ctx, addr)
	}
	a.role.runLoops(ctx)
	go a.notifyReady(ctx)
	hostDone := make(chan struct{})
	go func() {
		defer close(hostDone)
		_ = a.host.Run(ctx, a.declarations)
	}()
	<-ctx.Done()
	<-hostDone
	return a.Stop()
}

// Stop closes the API, gossip and the role (Raft on a server), leaving everything on disk for the
// next start. Gossip is shut down, never left: a node stopped by SIGTERM (systemctl stop, a
// reboot) is coming back, and a server that left would be marked left by its peers rather than
// failed; leaving is `meshd leave`'s, the operator's decision.
func (a *Agent) Stop() error {
	_ = SdNotify("STOPPING=1")
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = a.http.Shutdown(sctx)
	os.Remove(a.cfg.Socket)
	a.stopGossip()
	a.role.close()
	if err := a.host.Close(); err != nil {
		a.log.Warn("record store close", "err", err)
	}
	a.log.Info("agent stopped")
	return nil
}

// reissueServerCert gives a server whose certificate predates the server role marker a new one
// for the same key, issued with the mesh CA key it holds, and writes it over the old: without the
// marker neither Raft nor the clients would take it for a server's.
func (a *Agent) reissueServerCert() error {
	pub, _ := a.identity.Leaf.PublicKey.(ed25519.PublicKey)
	certPEM, err := a.secrets.CA.IssueNode(a.node.Name, pub, pki.ServerCert, time.Now())
	if err != nil {
		return fmt.Errorf("node %s: re-issue its server certificate: %w", a.node.Name, err)
	}
	path := pki.Path(a.cfg.DataDir, pki.NodeCertFile)
	if err := pki.WriteFileAtomic(path, certPEM, 0o600); err != nil {
		return fmt.Errorf("node %s: write its re-issued server certificate %s: %w", a.node.Name, path, err)
	}
	id, err := pki.Identity(certPEM, a.secrets.CACertPEM, a.secrets.NodeKey)
	if err != nil {
		return fmt.Errorf("node %s: re-issued server certificate: %w", a.node.Name, err)
	}
	a.identity, a.secrets.NodeCertPEM = id, certPEM
	a.log.Info("server certificate re-issued with the server role marker (it predated it)", "cert", path)
	return nil
}
