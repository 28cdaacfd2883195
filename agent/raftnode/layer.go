package raftnode

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"meshd/internal/ratelog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// raftHandshakeTimeout bounds a Raft peer's TLS handshake; a peer that has not proved itself by
// then is dropped.
const raftHandshakeTimeout = 10 * time.Second

// raftMaxPending bounds the connections still in their handshake: beyond it, new ones are closed
// at once (an authenticated server retries).
const raftMaxPending = 64

// StreamLayer is Raft's transport beneath raft.NetworkTransport: TCP with mutual TLS
// (pki.RaftTLS), each end a server of the mesh. The handshake is done before a connection
// reaches Raft, in its own goroutine with a deadline, so a peer that cannot authenticate never
// has a byte read as Raft, and a slow one holds nothing of Raft's.
type StreamLayer struct {
	ln        net.Listener
	advertise net.Addr
	cfg       *tls.Config
	refused   *ratelog.Log

	conns   chan net.Conn
	pending chan struct{}
	done    chan struct{}
	once    sync.Once
}

// ListenTLS listens on bind for Raft with cfg, saying advertise as its address (nil: the address
// it bound, for a test's transport on port 0).
func ListenTLS(bind string, advertise net.Addr, cfg *tls.Config, log *slog.Logger) (*StreamLayer, error) {
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, err
	}
	if advertise == nil {
		advertise = ln.Addr()
	}
	l := &StreamLayer{ln: ln, advertise: advertise, cfg: cfg, refused: ratelog.New(log, 10, time.Minute),
		conns: make(chan net.Conn), pending: make(chan struct{}, raftMaxPending), done: make(chan struct{})}
	go l.acceptLoop()
	return l, nil
}

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
		select {
		case l.pending <- struct{}{}:
		default:
			c.Close()
			l.refused.Warn("raft connection dropped: too many handshakes in progress", "from", c.RemoteAddr().String(), "limit", raftMaxPending)
			continue
		}
		go l.handshake(c)
	}
}

func (l *StreamLayer) handshake(c net.Conn) {
	defer func() { <-l.pending }()
	tc := tls.Server(c, l.cfg)
	ctx, cancel := context.WithTimeout(context.Background(), raftHandshakeTimeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		tc.Close()
		l.refused.Warn("raft connection refused: not a server of this mesh", "from", c.RemoteAddr().String(), "err", ratelog.Clip(err.Error(), 300))
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
// certificate of the mesh.
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
