package gossip

import (
	"crypto/ed25519"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"
)

// LeaveMaxAge is how far a leave intent's signed time may be from the
// receiver's clock, either way, before it is refused as stale: a recorded
// intent replayed later cannot make a failed node read "left".
const LeaveMaxAge = 2 * time.Minute

// leaveIntent is a node's signed word that it is leaving on purpose. It is
// signed like a report, so a member holding the gossip key cannot make a
// failed node look as if it had left; its signed time makes it good for
// LeaveMaxAge only, and once (a member refuses one no newer than the last it
// took from that node).
type leaveIntent struct {
	Node string `json:"node"`
	At   int64  `json:"at"` // Unix nanoseconds
	Sig  []byte `json:"sig"`
}

func (l *leaveIntent) signedBytes() []byte {
	const tag = "meshd/gossip/leave/v1\x00"
	b := append([]byte(tag), binary.BigEndian.AppendUint32(nil, uint32(len(l.Node)))...)
	b = append(b, l.Node...)
	return binary.BigEndian.AppendUint64(b, uint64(l.At))
}

// announceLeave sends the signed intent to every other member over TCP and
// waits until each one acknowledged it (or the deadline passes): only then
// does memberlist's leave go out, so no member sees the leave before it
// knows it was intended.
func (g *Gossip) announceLeave(deadline time.Time) {
	l := leaveIntent{Node: g.cfg.Name, At: time.Now().UnixNano()}
	l.Sig = ed25519.Sign(g.cfg.Identity, l.signedBytes())
	raw, err := json.Marshal(&l)
	if err != nil {
		g.log.Warn("leave intent not encoded", "err", err)
		return
	}
	msg := append([]byte{msgLeave}, raw...)
	others := map[string]bool{}
	for _, n := range g.ml.Members() {
		if n.Name != g.cfg.Name {
			others[n.Name] = true
		}
	}
	acks := make(chan string, 2*len(others)+1)
	g.mu.Lock()
	g.leaveAcks = acks
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.leaveAcks = nil
		g.mu.Unlock()
	}()
	for _, n := range g.ml.Members() {
		if !others[n.Name] {
			continue
		}
		go func() {
			if err := g.ml.SendReliable(n, msg); err != nil {
				g.log.Warn("leave intent not sent: it may see this node failed", "member", n.Name, "addr", n.Address(), "err", err)
			}
		}()
	}
	timeout := time.After(time.Until(deadline))
	for len(others) > 0 {
		select {
		case name := <-acks:
			delete(others, name)
		case <-timeout:
			g.log.Warn("leave intent not acknowledged before the deadline", "members", len(others))
			return
		}
	}
}

// receiveLeaveAck notes a member's acknowledgement of our leave intent.
func (g *Gossip) receiveLeaveAck(raw []byte) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.leaveAcks != nil {
		select {
		case g.leaveAcks <- string(raw):
		default:
		}
	}
}

func (g *Gossip) receiveLeave(raw []byte) {
	var l leaveIntent
	if err := json.Unmarshal(raw, &l); err != nil || l.Node == "" || len(l.Sig) != ed25519.SignatureSize {
		g.reject(Rejection{Node: l.Node, Reason: ReasonGarbled, From: "direct", Err: fmt.Errorf("leave intent (%d bytes) does not decode", len(raw))})
		return
	}
	pub, ok := g.cfg.Verify(l.Node)
	if !ok || len(pub) != ed25519.PublicKeySize {
		g.reject(Rejection{Node: l.Node, Reason: ReasonUnknownNode, From: "direct", Err: fmt.Errorf("leave intent of node %q: no enrolled key", l.Node)})
		return
	}
	if !ed25519.Verify(pub, l.signedBytes(), l.Sig) {
		g.reject(Rejection{Node: l.Node, Reason: ReasonBadSignature, From: "direct", Err: fmt.Errorf("leave intent of node %q is not signed by the key it enrolled with", l.Node)})
		return
	}
	at := time.Unix(0, l.At)
	if age := time.Since(at); age > LeaveMaxAge || age < -LeaveMaxAge {
		g.reject(Rejection{Node: l.Node, Reason: ReasonStale, From: "direct", Err: fmt.Errorf("leave intent of node %q signed at %s, %s from this member's clock (limit %s)",
			l.Node, at.UTC().Format(time.RFC3339), age.Round(time.Second), LeaveMaxAge)})
		return
	}
	g.mu.Lock()
	if last, ok := g.lastLeave[l.Node]; ok && l.At <= last {
		g.mu.Unlock()
		g.reject(Rejection{Node: l.Node, Reason: ReasonStale, From: "direct", Err: fmt.Errorf("leave intent of node %q signed at %s is not newer than the last one taken: a replay",
			l.Node, at.UTC().Format(time.RFC3339Nano))})
		return
	}
	g.lastLeave[l.Node] = l.At
	g.intents[l.Node] = at
	// Without the acknowledgement (a deadline passed) memberlist's leave can
	// overtake the intent: a member found failed after it announced its
	// leave has left. (It cannot be an older failure: a member that sends
	// anything is back, and a member that comes back is alive again.)
	var ev *MemberEvent
	if m, ok := g.members[l.Node]; ok && m.State == StateFailed {
		m.State, m.Since = StateLeft, time.Now()
		ev = &MemberEvent{Kind: EventLeft, Member: *m}
	}
	g.mu.Unlock()
	g.log.Debug("member announced its leave", "member", l.Node)
	if ev != nil {
		g.emit(*ev)
	}
	ml := g.memberlist()
	if ml == nil {
		return
	}
	go func() {
		for _, n := range ml.Members() {
			if n.Name == l.Node {
				if err := ml.SendReliable(n, append([]byte{msgLeaveAck}, g.cfg.Name...)); err != nil {
					g.log.Debug("leave intent not acknowledged", "member", l.Node, "err", err)
				}
				return
			}
		}
	}()
}
