package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"meshd/api"
	"meshd/internal/ratelog"
	"meshd/pki"
)

// The bus between members: every node serves the bus on its mesh.bus port, servers the whole
// API (bus.go), clients the few routes a server or another node asks of them (their keyring, a
// reach check). Each route needs the caller's certificate from the mesh CA, for a node enrolled
// with that very key; keyring operations are a server's alone.

// peerBus is this node's calls to other nodes' buses.
type peerBus struct {
	clientsMu sync.Mutex
	// clients are the mTLS clients for other nodes' buses, one per node and key: each accepts
	// only that node's certificate (pki.PeerTLS).
	clients map[string]*http.Client
}

// clientBus is a client node's own bus, which it serves on its mesh.bus port.
type clientBus struct {
	mu   sync.Mutex
	srv  *http.Server
	port uint16 // the port srv serves
}

// peerHTTP is the mTLS client this node calls node p's bus with: the answer must come with p's
// certificate for the key the mesh knows p by, so no other node (a client in the path) answers
// for it.
func (a *Agent) peerHTTP(p api.GossipPeer) (*http.Client, error) {
	pub, err := pki.ParsePublicKey(p.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", p.Name, err)
	}
	a.pb.clientsMu.Lock()
	defer a.pb.clientsMu.Unlock()
	key := p.Name + " " + p.PublicKey
	if c := a.pb.clients[key]; c != nil {
		return c, nil
	}
	if a.pb.clients == nil {
		a.pb.clients = map[string]*http.Client{}
	}
	c := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: pki.PeerTLS(&a.identity, a.caCert, p.Name, pub),
		IdleConnTimeout: time.Minute}}
	a.pb.clients[key] = c
	return c, nil
}

// peerJSON calls one node's bus; errors name the node, its bus address and port.
func (a *Agent) peerJSON(ctx context.Context, p api.GossipPeer, method, path string, in, out any) error {
	addr := net.JoinHostPort(p.Advertise, strconv.Itoa(int(p.Bus)))
	client, err := a.peerHTTP(p)
	if err != nil {
		return err
	}
	bus := api.Endpoint{Client: client, Base: "https://" + addr, Limit: 4 << 20}
	resp, err := bus.Send(ctx, method, path, in)
	if err != nil {
		return fmt.Errorf("node %s (bus %s, tcp port %d): %w", p.Name, addr, p.Bus, err)
	}
	err = bus.Read(resp, out)
	var ae *api.AnswerError
	if errors.As(err, &ae) {
		return fmt.Errorf("node %s (bus %s): %s", p.Name, addr, ae.Text(""))
	}
	return err
}

// withPeer lets a bus request through only from a node this one knows (the record on a server,
// the server's view on a client) with the certificate's key; serverOnly also asks that it be a
// server.
func (a *Agent) withPeer(serverOnly bool, h func(http.ResponseWriter, *http.Request, string)) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		name, pub, ok := certIdentity(w, req, "")
		if !ok {
			return
		}
		view := a.peers.gossipView()
		p, ok := view.Peer(name)
		if !ok || p.PublicKey != pub {
			api.WriteJSON(w, http.StatusForbidden, api.ErrorBody{Error: fmt.Sprintf("node %s: node %s does not know a node of that name with this certificate's key", a.node.Name, name)})
			return
		}
		if serverOnly && !p.Server {
			api.WriteJSON(w, http.StatusForbidden, api.ErrorBody{Error: fmt.Sprintf("node %s: %s %s is a server's to ask, and node %s is a client", a.node.Name, req.Method, req.URL.Path, name)})
			return
		}
		h(w, req, name)
	}
}

// peerRoutes are the routes every node serves on its bus for the others.
func (a *Agent) peerRoutes(mux *http.ServeMux) {
	a.keys.peerRoutes(mux, a.withPeer)
	mux.HandleFunc("POST /v1/reach", a.withPeer(false, a.postReach))
	mux.HandleFunc("POST /v1/ports/check", a.withPeer(true, a.postPortCheck))
	mux.HandleFunc("GET /v1/monitor", a.withPeer(true, a.getPeerMonitor))
}

// startClientBus serves a client node's bus on its mesh.bus port, and moves it when the record
// moves the port (`meshd node set NODE mesh.bus=N`): the new port is bound before the old is let go.
func (c *clientRole) startClientBus(ctx context.Context, port uint16) {
	c.bus.mu.Lock()
	defer c.bus.mu.Unlock()
	if port == 0 || (c.bus.srv != nil && c.bus.port == port) {
		return
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(int(port))))
	if err != nil {
		c.log.Error("bus port", "port", port, "err", err)
		return
	}
	if c.bus.srv != nil {
		_ = c.bus.srv.Close()
		c.log.Info("bus moving", "from", c.bus.port, "to", port)
	}
	c.bus.port = port
	tlsCfg := pki.PeerServerTLS(c.identity, c.caCert)
	mux := http.NewServeMux()
	c.peerBus.peerRoutes(mux)
	// The same bounds as a server's bus (buslimit.go): every route here needs a certificate, but
	// anyone reaching the port can open connections.
	srv := &http.Server{Handler: http.MaxBytesHandler(mux, busMaxBody), TLSConfig: tlsCfg,
		ReadHeaderTimeout: busReadHeaderTimeout, ReadTimeout: busReadTimeout, WriteTimeout: busWriteTimeout,
		IdleTimeout: busIdleTimeout, MaxHeaderBytes: busMaxHeader,
		ErrorLog: slog.NewLogLogger(c.log.Handler(), slog.LevelDebug)}
	c.bus.srv = srv
	limited := newLimitListener(ln, busMaxConns, busMaxConnsPerIP, ratelog.New(c.log.With("part", "bus"), 10, time.Minute), nil)
	go func() {
		if err := srv.Serve(tls.NewListener(limited, tlsCfg)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			c.log.Error("bus stopped", "port", port, "err", err)
		}
	}()
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	c.log.Info("bus listening (a client's: keyring and reach checks)", "port", port)
}
