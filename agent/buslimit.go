package agent

import (
	"errors"
	"meshd/internal/ratelog"
	"net"
	"sync"
	"time"
)

// The bus faces anyone who can reach its port (enrolment needs no certificate), so it bounds what
// one caller can hold: connections in all and from one address, how long a request may take to
// arrive, and how large it may be.
const (
	// busMaxConns is how many connections the bus holds at once; beyond it a new one is closed.
	busMaxConns = 512
	// busMaxConnsPerIP is how many of them may come from one address: a node holds one or two
	// (its declaration watch, a report), so one address cannot take the bus from the others.
	busMaxConnsPerIP = 32
	// busMaxBody is the largest request body the bus reads (a host report); enrolment's is
	// enrolMaxBody.
	busMaxBody = 16 << 20
	// enrolMaxBody is the largest enrolment request the bus reads.
	enrolMaxBody = 64 << 10
	// busMaxHeader is the largest request header the bus reads.
	busMaxHeader = 16 << 10
	// busReadHeaderTimeout bounds the TLS handshake and the request's header.
	busReadHeaderTimeout = 10 * time.Second
	// busReadTimeout bounds a whole request, body included: it is above the longest a server may
	// hold a request before it answers (caughtUpOnly's 30 s, then a Raft commit), because the
	// HTTP server ends a request whose read deadline passes while it is handled. Long polls
	// (the declaration watch) lift it for themselves once the caller is known.
	busReadTimeout = 60 * time.Second
	// busWriteTimeout bounds writing the answer, from the end of the request's header.
	busWriteTimeout = 90 * time.Second
	// busIdleTimeout is how long a kept-alive connection may sit idle.
	busIdleTimeout = 2 * time.Minute
)

// limitListener closes a new connection beyond max in all or perIP from one address, saying so
// to refused (a rate-limited log).
type limitListener struct {
	net.Listener
	max, perIP int
	refused    *ratelog.Log

	mu    sync.Mutex
	total int
	byIP  map[string]int
}

func newLimitListener(ln net.Listener, max, perIP int, refused *ratelog.Log) *limitListener {
	return &limitListener{Listener: ln, max: max, perIP: perIP, refused: refused, byIP: map[string]int{}}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := remoteIP(c)
		l.mu.Lock()
		full := l.total >= l.max
		mine := l.byIP[ip] >= l.perIP
		if !full && !mine {
			l.total++
			l.byIP[ip]++
		}
		l.mu.Unlock()
		if full || mine {
			c.Close()
			if full {
				l.refused.Warn("bus connection closed: the bus holds its limit of connections", "from", ip, "limit", l.max)
			} else {
				l.refused.Warn("bus connection closed: this address holds its limit of connections", "from", ip, "limit", l.perIP)
			}
			continue
		}
		return &limitedConn{Conn: c, release: func() { l.release(ip) }}, nil
	}
}

func (l *limitListener) release(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.byIP[ip]--; l.byIP[ip] <= 0 {
		delete(l.byIP, ip)
	}
}

func remoteIP(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	return c.RemoteAddr().String()
}

// limitedConn gives its place back once, when closed.
type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
