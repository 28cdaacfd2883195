package agent

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"

	"meshd/internal/netsource"
	"meshd/internal/ratelog"

	"meshd/fsm"
)

// The bus faces anyone who can reach its port (enrolment needs no certificate), so it bounds what
// one caller can hold: connections in all and from one source, how long a request may take to
// arrive, and how large it may be. A source is an IPv4 address or an IPv6 /64 (one machine is
// handed a whole /64, so counting its addresses one by one would give it 2^64 shares). The
// record's nodes (their underlay and private addresses) have places of their own, so a flood
// from elsewhere cannot take the bus from the declaration watches and reports of the mesh.
const (
	// busMaxConns is how many connections from outside the record the bus holds at once; beyond
	// it a new one is closed. The record's nodes have as many again.
	busMaxConns = 512
	// busConnsPerNode is how many places the record's nodes have on the bus for each node the
	// record holds, when that is more than busMaxConns: every client watches its declaration on
	// the first server it knows (and reads the gossip view beside it), so that server holds a
	// connection or two of every node in the fleet, and a fixed 512 shut out the nodes past the
	// 500th (the fleet simulator found it at 1000).
	busConnsPerNode = 3
	// busMaxConnsPerIP is how many of them may come from one source: a node holds one or two
	// (its declaration watch, a report), so one source cannot take the bus from the others.
	busMaxConnsPerIP = 32
	// busMaxBody is the largest request body the bus reads (a host report); enrolment's is
	// enrolMaxBody.
	busMaxBody = 16 << 20
	// enrolMaxBody is the largest enrolment request the bus reads.
	enrolMaxBody = 64 << 10
	// busMaxHeader is the largest request header the bus reads.
	busMaxHeader = 16 << 10
	// busReadHeaderTimeout bounds the TLS handshake and the request's header: a few round trips
	// of a far machine, so a connection that never speaks gives its place back soon.
	busReadHeaderTimeout = 5 * time.Second
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

// limitListener closes a new connection beyond max in all or perIP from one source, saying so
// to refused (a rate-limited log). Connections from an address known says is the record's are
// counted apart, with the same bounds, so the ones from outside never crowd them out.
type limitListener struct {
	net.Listener
	max, perIP int
	refused    *ratelog.Log
	known      func(netip.Addr) bool
	// knownMax, if set, is how many connections the record's nodes may hold, when more than max.
	knownMax func() int

	mu    sync.Mutex
	pools [2]connPool // [0] from outside the record, [1] from the record's nodes
}

// connPool counts the connections held, in all and by source.
type connPool struct {
	total    int
	bySource map[netip.Prefix]int
}

func newLimitListener(ln net.Listener, max, perIP int, refused *ratelog.Log, known func(netip.Addr) bool) *limitListener {
	if known == nil {
		known = func(netip.Addr) bool { return false }
	}
	l := &limitListener{Listener: ln, max: max, perIP: perIP, refused: refused, known: known}
	for i := range l.pools {
		l.pools[i].bySource = map[netip.Prefix]int{}
	}
	return l
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := netsource.Addr(c)
		src := netsource.Of(addr)
		pool := 0
		if addr.IsValid() && l.known(addr) {
			pool = 1
		}
		limit := l.max
		if pool == 1 && l.knownMax != nil {
			limit = max(limit, l.knownMax())
		}
		l.mu.Lock()
		p := &l.pools[pool]
		full := p.total >= limit
		mine := p.bySource[src] >= l.perIP
		if !full && !mine {
			p.total++
			p.bySource[src]++
		}
		l.mu.Unlock()
		if full || mine {
			c.Close()
			if full {
				l.refused.Warn("bus connection closed: the bus holds its limit of connections", "from", addr, "limit", limit, "record_node", pool == 1)
			} else {
				l.refused.Warn("bus connection closed: this source holds its limit of connections", "from", addr, "source", src, "limit", l.perIP)
			}
			continue
		}
		return &limitedConn{Conn: c, release: func() { l.release(pool, src) }}, nil
	}
}

func (l *limitListener) release(pool int, src netip.Prefix) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p := &l.pools[pool]
	p.total--
	if p.bySource[src]--; p.bySource[src] <= 0 {
		delete(p.bySource, src)
	}
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

// recordConns is how many connections the record's nodes may hold on the bus.
func (s *bus) recordConns() int {
	n := 0
	s.rec.Read(func(r *fsm.Record, _ uint64) { n = len(r.Nodes) })
	return busConnsPerNode * n
}

// recordAddr says addr is one of the record's nodes', on the underlay or the private network.
func (s *bus) recordAddr(addr netip.Addr) bool {
	known := false
	s.rec.Read(func(r *fsm.Record, _ uint64) {
		for _, n := range r.Nodes {
			for _, a := range []string{n.Advertise, n.Address} {
				if p, err := netip.ParsePrefix(a); err == nil && p.Addr().Unmap() == addr {
					known = true
					return
				}
				if p, err := netip.ParseAddr(a); err == nil && p.Unmap() == addr {
					known = true
					return
				}
			}
		}
	})
	return known
}
