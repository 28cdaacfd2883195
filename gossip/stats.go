package gossip

import "sync/atomic"

// Stats is what a member's reports cost it, counted since it started: what a fleet simulator
// (package fleetsim) reads to prove that a client carries no other client's report and that
// push-pull state stays a member's own, whatever the fleet's size.
type Stats struct {
	// Sent are the reports of its own this member sent (one a server it went to); Relayed the
	// reports of other nodes it sent another server (a server's only).
	Sent, Relayed uint64
	// Received are the report envelopes that reached this member by any path (a datagram, TCP,
	// a relay, an older member's push-pull), kept or not; ReceivedOthers those of them about
	// another node, including the ones it dropped or rejected.
	Received, ReceivedOthers uint64
	// Held is how many reports the member keeps, HeldOthers how many of them are of another node.
	Held, HeldOthers int
	// StateOut and StateIn are the largest push-pull state, in bytes, it sent and received.
	StateOut, StateIn int
}

// Stats reads the member's counters.
func (g *Gossip) Stats() Stats {
	s := Stats{Sent: g.sent.Load(), Relayed: g.relayed.Load(), Received: g.received.Load(),
		ReceivedOthers: g.receivedOthers.Load(), StateOut: int(g.stateOut.Load()), StateIn: int(g.stateIn.Load())}
	g.mu.Lock()
	s.Held = len(g.store.byNode)
	s.HeldOthers = s.Held
	if _, own := g.store.byNode[g.cfg.Name]; own {
		s.HeldOthers--
	}
	g.mu.Unlock()
	return s
}

// raiseTo sets m to n when n is larger.
func raiseTo(m *atomic.Int64, n int) {
	for {
		cur := m.Load()
		if int64(n) <= cur || m.CompareAndSwap(cur, int64(n)) {
			return
		}
	}
}
