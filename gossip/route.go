package gossip

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/memberlist"
)

// Where reports go. Only the servers read reports (Config.Server): a member sends its own
// report to each live server, and to no one else; a server keeps every node's, any other member
// its own only. What every member gossips besides is memberlist's membership (each member's
// identity key in its metadata, its liveness) and, in push-pull, its own report's version: a
// few bytes, whatever the fleet's size. The servers share the reports among themselves by a path
// of their own: a moment after it starts, and every push-pull interval after, each server sends
// each other server a digest of what it keeps (node and sequence), and is sent back, over TCP,
// the reports it lacks or holds older. A server that hears through push-pull of a report newer than its own
// asks that node for it. Nothing is relayed further, so no report travels in a loop.

// Message types of this file (report.go has the others).
const (
	msgReportRelay  byte = 5 // reports a server sends another (a pushPull list of envelopes)
	msgReportDigest byte = 6 // the sequences of the reports a server keeps, by node
	msgReportWant   byte = 7 // a server asks a node for its report
)

// relayBatch bounds one relay message: a server that lacks many reports gets them in messages
// of about this size.
const relayBatch = 512 << 10

// firstSync is how long after it starts a server sends its first digest: long enough to have
// joined.
const firstSync = 2 * time.Second

// digestAnswerEvery is how often at most a server answers the digests of one other server: a
// member holding the gossip key that sends digests in another server's name cannot make this
// one send every report it keeps in a loop.
const digestAnswerEvery = 5 * time.Second

// digest is what a server keeps: its name and each report's sequence, by node.
type digest struct {
	From string            `json:"from"`
	Have map[string]uint64 `json:"have"`
}

// version is a member's push-pull state: its own report's sequence.
type version struct {
	Node string `json:"node"`
	Seq  uint64 `json:"seq"`
}

// stateVersion2 marks push-pull state that is a version, not reports.
const stateVersion2 byte = 2

// isServer says whether node reads reports (Config.Server; every member when it is nil).
func (g *Gossip) isServer(node string) bool { return g.cfg.Server == nil || g.cfg.Server(node) }

// liveServers are the live members, other than this one, that are servers.
func (g *Gossip) liveServers() []*memberlist.Node {
	ml := g.memberlist()
	if ml == nil {
		return nil
	}
	var out []*memberlist.Node
	for _, n := range ml.Members() {
		if n.Name != g.cfg.Name && g.isServer(n.Name) {
			out = append(out, n)
		}
	}
	return out
}

// sendOwn sends this node's signed report to the given members: in one datagram when it fits,
// else over TCP.
func (g *Gossip) sendOwn(raw []byte, to []*memberlist.Node) {
	if len(to) == 0 {
		return
	}
	ml := g.memberlist()
	small := 1+len(raw) <= maxBroadcast
	typ := msgReportDirect
	if small {
		typ = msgReport
	}
	msg := append([]byte{typ}, raw...)
	go func() {
		for _, n := range to {
			if g.stopped.Load() {
				return
			}
			send := ml.SendReliable
			if small {
				send = ml.SendBestEffort
			}
			if err := send(n, msg); err != nil {
				g.log.Warn("report not sent", "member", n.Name, "addr", n.Address(), "err", err)
				continue
			}
			g.sent.Add(1)
		}
	}()
}

// sendTo sends msg to the live member named name over TCP.
func (g *Gossip) sendTo(name string, msg []byte) error {
	ml := g.memberlist()
	for _, n := range ml.Members() {
		if n.Name == name {
			return ml.SendReliable(n, msg)
		}
	}
	return fmt.Errorf("member %s is not alive", name)
}

// syncServers is a server's side of the servers' own path: a moment after it starts (a server
// that restarted has nothing yet) and then every interval, it sends each other live server its
// digest. It returns when the member shuts down.
func (g *Gossip) syncServers(first, interval time.Duration) {
	t := time.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case <-g.stop:
			return
		case <-t.C:
		}
		t.Reset(interval)
		if !g.isServer(g.cfg.Name) {
			continue
		}
		g.sweep()
		d := digest{From: g.cfg.Name, Have: map[string]uint64{}}
		g.mu.Lock()
		for n, st := range g.store.byNode {
			d.Have[n] = st.Seq
		}
		g.mu.Unlock()
		b, err := json.Marshal(&d)
		if err != nil {
			continue
		}
		msg := append([]byte{msgReportDigest}, b...)
		for _, n := range g.liveServers() {
			if err := g.sendTo(n.Name, msg); err != nil {
				g.log.Debug("report digest not sent", "member", n.Name, "err", err)
			}
		}
	}
}

// receiveDigest answers another server's digest with the reports it lacks or holds older, in
// batches of about relayBatch.
func (g *Gossip) receiveDigest(buf []byte) {
	var d digest
	if err := json.Unmarshal(buf, &d); err != nil || d.From == "" {
		g.reject(Rejection{Reason: ReasonGarbled, From: "digest", Err: fmt.Errorf("report digest (%d bytes) does not decode", len(buf))})
		return
	}
	if !g.isServer(g.cfg.Name) || !g.isServer(d.From) {
		return // only servers share reports
	}
	g.mu.Lock()
	last := g.answered[d.From]
	if time.Since(last) < digestAnswerEvery {
		g.mu.Unlock()
		return
	}
	g.answered[d.From] = time.Now()
	g.mu.Unlock()
	var batches []pushPull
	size := 0
	g.mu.Lock()
	for n, st := range g.store.byNode {
		if d.Have[n] >= st.Seq {
			continue
		}
		if len(batches) == 0 || size+len(st.raw) > relayBatch {
			batches, size = append(batches, pushPull{}), 0
		}
		b := &batches[len(batches)-1]
		b.Reports = append(b.Reports, st.raw)
		size += len(st.raw)
	}
	g.mu.Unlock()
	for _, b := range batches {
		enc, err := json.Marshal(&b)
		if err != nil {
			continue
		}
		if err := g.sendTo(d.From, append([]byte{msgReportRelay}, enc...)); err != nil {
			g.log.Debug("reports not relayed", "member", d.From, "err", err)
			return
		}
		g.relayed.Add(uint64(len(b.Reports)))
	}
}

// receiveRelay keeps what another server sent (each envelope verified as any other).
func (g *Gossip) receiveRelay(buf []byte) {
	if !g.isServer(g.cfg.Name) {
		return
	}
	var st pushPull
	if err := json.Unmarshal(buf, &st); err != nil {
		g.reject(Rejection{Reason: ReasonGarbled, From: "relay", Err: fmt.Errorf("relayed reports (%d bytes) do not decode", len(buf))})
		return
	}
	for _, raw := range st.Reports {
		g.receive(raw, "relay")
	}
}

// receiveWant answers a server that asked for this node's report: it is sent to that server.
func (g *Gossip) receiveWant(buf []byte) {
	from := string(buf)
	if from == "" || from == g.cfg.Name || !g.isServer(from) {
		return
	}
	g.mu.Lock()
	st, ok := g.store.get(g.cfg.Name)
	g.mu.Unlock()
	if !ok {
		return
	}
	for _, n := range g.liveServers() {
		if n.Name == from {
			g.sendOwn(st.raw, []*memberlist.Node{n})
		}
	}
}

// localVersion is the push-pull state: this member's report's version.
func (g *Gossip) localVersion() []byte {
	v := version{Node: g.cfg.Name}
	g.mu.Lock()
	if st, ok := g.store.get(g.cfg.Name); ok {
		v.Seq = st.Seq
	}
	g.mu.Unlock()
	b, err := json.Marshal(&v)
	if err != nil {
		return nil
	}
	return append([]byte{stateVersion2}, b...)
}

// mergeVersion is a server's reading of another member's version: a report newer than the one
// it keeps is asked for.
func (g *Gossip) mergeVersion(buf []byte) error {
	var v version
	if err := json.Unmarshal(buf, &v); err != nil || v.Node == "" {
		return errors.New("version does not decode")
	}
	if v.Seq == 0 || v.Node == g.cfg.Name || !g.isServer(g.cfg.Name) {
		return nil
	}
	g.mu.Lock()
	st, ok := g.store.get(v.Node)
	g.mu.Unlock()
	if ok && st.Seq >= v.Seq {
		return nil
	}
	go func() {
		if err := g.sendTo(v.Node, append([]byte{msgReportWant}, g.cfg.Name...)); err != nil {
			g.log.Debug("report not asked for", "member", v.Node, "err", err)
		}
	}()
	return nil
}
