package raftnode

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"meshd/internal/netsource"
	"meshd/internal/ratelog"
	"meshd/pki"
)

// The Raft port faces whoever reaches it, so what a connection may hold before it has proved to
// be a server is bounded: a short handshake, and places in the handshake counted by source (an
// IPv4 address or an IPv6 /64, as the bus counts them). The record's servers' addresses have
// places of their own, so silent connections from elsewhere never take theirs.
const (
	// raftHandshakeTimeout bounds a peer's TLS handshake: a few round trips of a far server, so
	// a connection that never speaks gives its place back soon.
	raftHandshakeTimeout = 3 * time.Second
	// raftMaxPending is how many connections may be in their handshake at once, from outside
	// the record's servers' addresses; those have as many again. Beyond it a new connection is
	// closed at once (a server retries).
	raftMaxPending = 64
	// raftMaxPendingPerSource is how many of them one source may hold: a server opens a few at
	// once (Raft's pool, its pipeline, a snapshot), so one source cannot take the others'.
	raftMaxPendingPerSource = 8
)

// Guard is what the stream layer asks its caller about the other end, beside the TLS
// configuration's own checks.
type Guard interface {
	// Server says addr is one of the record's servers': its connections in their handshake
	// are counted apart from everyone else's.
	Server(addr netip.Addr) bool
	// Admit says whether the peer whose certificate the TLS configuration verified may reach
	// Raft (or be dialled as a server), and if not why, naming the node.
	Admit(cert *x509.Certificate) error
}

// StreamLayer is Raft's transport beneath raft.NetworkTransport: TCP with mutual TLS
// (pki.RaftTLS), each end a server of the mesh and admitted by the Guard. The handshake is done
// before a connection reaches Raft, in its own goroutine with a deadline, so a peer that cannot
// authenticate never has a byte read as Raft, and a slow one holds nothing of Raft's.
type StreamLayer struct {
	ln        net.Listener
	advertise net.Addr
	cfg       *tls.Config
	guard     Guard
	refused   *ratelog.Log

	mu    sync.Mutex
	pools [2]pendingPool // [0] from outside the record's servers, [1] from their addresses

	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

// pendingPool counts the connections in their handshake, in all and by source.
type pendingPool struct {
	total    int
	bySource map[netip.Prefix]int
}

// ListenTLS listens on bind for Raft with cfg, saying advertise as its address (nil: the address
// it bound, for a test's transport on port 0). guard (nil: nobody's addresses are counted apart,
// every peer cfg verifies is admitted) is asked about each peer, at either end.
func ListenTLS(bind string, advertise net.Addr, cfg *tls.Config, guard Guard, log *slog.Logger) (*StreamLayer, error) {
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	if advertise == nil {
		advertise = ln.Addr()
	}
	if guard == nil {
		guard = openGuard{}
	}
	l := &StreamLayer{ln: ln, advertise: advertise, cfg: guardedTLS(cfg, guard), guard: guard,
		refused: ratelog.New(log, 10, time.Minute), conns: make(chan net.Conn), done: make(chan struct{})}
	for i := range l.pools {
		l.pools[i].bySource = map[netip.Prefix]int{}
	}
	go l.acceptLoop()
	return l, nil
}

// guardedTLS is cfg with guard's Admit after cfg's own verification, on either end.
func guardedTLS(cfg *tls.Config, guard Guard) *tls.Config {
	cfg = cfg.Clone()
	verify := cfg.VerifyConnection
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if verify != nil {
			if err := verify(cs); err != nil {
				return err
			}
		}
		if len(cs.PeerCertificates) == 0 {
			return errors.New("raft peer sent no certificate")
		}
		if err := guard.Admit(cs.PeerCertificates[0]); err != nil {
			node, _ := pki.NodeName(cs.PeerCertificates[0])
			return &notAdmitted{node: node, err: err}
		}
		return nil
	}
	return cfg
}

// notAdmitted is the guard's refusal of a peer the TLS configuration verified: logged apart from
// other failed handshakes, naming the node.
type notAdmitted struct {
	node string
	err  error
}

func (e *notAdmitted) Error() string { return e.err.Error() }
func (e *notAdmitted) Unwrap() error { return e.err }

// openGuard is the Guard of a layer given none.
type openGuard struct{}

func (openGuard) Server(netip.Addr) bool        { return false }
func (openGuard) Admit(*x509.Certificate) error { return nil }

func (l *StreamLayer) acceptLoop() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors and the like: wait and go on; Raft retries its side.
			l.refused.Warn("raft accept", "err", err)
			select {
			case <-l.done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		addr := netsource.Addr(c)
		src := netsource.Of(addr)
		pool := 0
		if addr.IsValid() && l.guard.Server(addr) {
			pool = 1
		}
		if why := l.take(pool, src); why != "" {
			c.Close()
			l.refused.Warn("raft connection dropped: "+why, "from", c.RemoteAddr().String(), "source", src,
				"server_address", pool == 1)
			continue
		}
		go l.handshake(c, pool, src)
	}
}

// take gives a connection from src a place in pool's handshakes, or says why there is none.
func (l *StreamLayer) take(pool int, src netip.Prefix) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := &l.pools[pool]
	switch {
	case p.total >= raftMaxPending:
		return fmt.Sprintf("%d handshakes in progress", raftMaxPending)
	case p.bySource[src] >= raftMaxPendingPerSource:
		return fmt.Sprintf("this source holds %d handshakes in progress", raftMaxPendingPerSource)
	}
	p.total++
	p.bySource[src]++
	return ""
}

func (l *StreamLayer) release(pool int, src netip.Prefix) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := &l.pools[pool]
	p.total--
	if p.bySource[src]--; p.bySource[src] <= 0 {
		delete(p.bySource, src)
	}
}

func (l *StreamLayer) handshake(c net.Conn, pool int, src netip.Prefix) {
	tc := tls.Server(c, l.cfg)
	ctx, cancel := context.WithTimeout(context.Background(), raftHandshakeTimeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	l.release(pool, src)
	if err != nil {
		tc.Close()
		var na *notAdmitted
		if errors.As(err, &na) {
			l.refused.Warn("raft connection refused: not one of the record's servers", "from", c.RemoteAddr().String(),
				"node", ratelog.Clip(na.node, 64), "why", ratelog.Clip(na.err.Error(), 300))
			return
		}
		l.refused.Warn("raft connection refused", "from", c.RemoteAddr().String(), "err", ratelog.Clip(err.Error(), 300))
		return
	}
	select {
	case l.conns <- tc:
	case <-l.done:
		tc.Close()
	}
}

// Accept returns the next connection whose peer proved to be a server of the mesh.
func (l *StreamLayer) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *StreamLayer) Close() error {
	var err error
	l.once.Do(func() {
		close(l.done)
		err = l.ln.Close()
	})
	return err
}

// Addr is the advertised address: what Raft records as this server's.
func (l *StreamLayer) Addr() net.Addr { return l.advertise }

// Dial connects to another server's Raft port; the handshake refuses anything but a server
// certificate of the mesh that the guard admits.
func (l *StreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", string(address))
	if err != nil {
		return nil, err
	}
	tc := tls.Client(c, l.cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("raft peer %s: %w", address, err)
	}
	return tc, nil
}
