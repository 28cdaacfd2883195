package gossip

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/memberlist"
)

// MaxReportSize bounds a report's payload; a bigger one is refused by
// Publish and rejected on receipt.
const MaxReportSize = 1 << 20

// maxBroadcast is the largest encoded report sent as a UDP broadcast;
// bigger ones go to every member over TCP (memberlist's reliable send),
// since memberlist never sends a broadcast that does not fit a packet.
const maxBroadcast = 1100

// Report is a host report this member verified (or published itself).
type Report struct {
	Node    string    // the node the report is about, and whose identity signed it
	Seq     uint64    // the node's sequence number: a higher one replaces a lower one
	At      time.Time // when the node signed it (the node's clock)
	Payload []byte    // the report itself; opaque to this package
	// From says how it reached this member: "local" (Publish), "broadcast",
	// "direct" (sent over TCP by its node) or "push-pull" (state sync).
	From string
}

// Reason says why a report was rejected.
type Reason string

const (
	ReasonGarbled      Reason = "garbled"       // not a well-formed envelope (truncated, corrupted, fields missing)
	ReasonTooLarge     Reason = "too-large"     // payload above MaxReportSize
	ReasonUnknownNode  Reason = "unknown-node"  // Verify knows no key for the signer
	ReasonBadSignature Reason = "bad-signature" // not signed by the key the signer enrolled with
	ReasonImpersonates Reason = "impersonation" // a node's genuine signature on a report naming another node
	ReasonStale        Reason = "stale"         // a leave intent older than LeaveMaxAge, or one already seen (a replay)
	ReasonRevoked      Reason = "revoked"       // signed by a key Config.Revoked says was revoked (its node removed)
)

// Rejection is one rejected report.
type Rejection struct {
	Node   string // the node the report claimed to be about (may be empty if garbled)
	Reason Reason
	From   string // how it arrived ("broadcast", "direct", "push-pull")
	Err    error  // the detail, naming the node
}

// envelope is a signed report on the wire (JSON).
type envelope struct {
	Node    string `json:"node"`
	Signer  string `json:"signer"`
	Seq     uint64 `json:"seq"`
	At      int64  `json:"at"` // Unix nanoseconds
	Payload []byte `json:"payload"`
	Sig     []byte `json:"sig"`
}

// signedBytes is the canonical byte string a report's signature covers:
// a domain tag, then node and signer (length-prefixed), seq and time
// (big-endian), and the SHA-256 of the payload. Fixed layout, so no
// encoder's choices (field order, escaping) can make two parties disagree.
func (e *envelope) signedBytes() []byte {
	const tag = "meshd/gossip/report/v1\x00"
	sum := sha256.Sum256(e.Payload)
	b := make([]byte, 0, len(tag)+8+len(e.Node)+len(e.Signer)+16+len(sum))
	b = append(b, tag...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(e.Node)))
	b = append(b, e.Node...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(e.Signer)))
	b = append(b, e.Signer...)
	b = binary.BigEndian.AppendUint64(b, e.Seq)
	b = binary.BigEndian.AppendUint64(b, uint64(e.At))
	return append(b, sum[:]...)
}

func signEnvelope(key ed25519.PrivateKey, node string, seq uint64, at time.Time, payload []byte) ([]byte, error) {
	e := envelope{Node: node, Signer: node, Seq: seq, At: at.UnixNano(), Payload: payload}
	e.Sig = ed25519.Sign(key, e.signedBytes())
	return json.Marshal(&e)
}

// stored is a kept report, the exact bytes it arrived as (re-sent as is),
// the key that signed it, and its place in the store (store.go).
type stored struct {
	Report
	raw    []byte
	key    ed25519.PublicKey
	index  uint64            // the store's index when it was kept
	digest [sha256.Size]byte // of raw
}

// verifyReport decodes and checks one envelope. It returns the report, or
// the reason and detail of its rejection.
func verifyReport(raw []byte, lookup func(string) (ed25519.PublicKey, bool)) (Report, Reason, error) {
	r, _, reason, err := verifyReportKey(raw, lookup)
	return r, reason, err
}

// verifyReportKey is verifyReport that also returns the key that signed the
// report (nil when it is rejected).
func verifyReportKey(raw []byte, lookup func(string) (ed25519.PublicKey, bool)) (Report, ed25519.PublicKey, Reason, error) {
	var e envelope
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return Report{}, nil, ReasonGarbled, fmt.Errorf("report envelope (%d bytes) does not decode: %w", len(raw), err)
	}
	if dec.More() {
		return Report{Node: e.Node}, nil, ReasonGarbled, fmt.Errorf("report for node %q: trailing data after the envelope", e.Node)
	}
	switch {
	case e.Node == "" || e.Signer == "":
		return Report{Node: e.Node}, nil, ReasonGarbled, errors.New("report envelope names no node or no signer")
	case len(e.Sig) != ed25519.SignatureSize:
		return Report{Node: e.Node}, nil, ReasonGarbled, fmt.Errorf("report for node %q: signature is %d bytes, want %d", e.Node, len(e.Sig), ed25519.SignatureSize)
	case len(e.Payload) > MaxReportSize:
		return Report{Node: e.Node}, nil, ReasonTooLarge, fmt.Errorf("report for node %q: payload is %d bytes, limit %d", e.Node, len(e.Payload), MaxReportSize)
	}
	pub, ok := lookup(e.Signer)
	if !ok || len(pub) != ed25519.PublicKeySize {
		return Report{Node: e.Node}, nil, ReasonUnknownNode, fmt.Errorf("report for node %q signed as %q: no enrolled key for %q", e.Node, e.Signer, e.Signer)
	}
	if !ed25519.Verify(pub, e.signedBytes(), e.Sig) {
		return Report{Node: e.Node}, nil, ReasonBadSignature, fmt.Errorf("report for node %q (seq %d) is not signed by the key %q enrolled with", e.Node, e.Seq, e.Signer)
	}
	if e.Signer != e.Node {
		return Report{Node: e.Node}, nil, ReasonImpersonates, fmt.Errorf("report for node %q was signed by node %q: a node may only publish its own", e.Node, e.Signer)
	}
	return Report{Node: e.Node, Seq: e.Seq, At: time.Unix(0, e.At), Payload: e.Payload}, pub, "", nil
}

// Publish signs report as this node's latest and spreads it. Each call gets
// a higher sequence number than any before it, also across restarts (the
// sequence starts from the clock and from any earlier report of this node
// the mesh still carries).
func (g *Gossip) Publish(report []byte) error {
	if len(report) > MaxReportSize {
		return fmt.Errorf("gossip %s: report is %d bytes, limit %d", g.cfg.Name, len(report), MaxReportSize)
	}
	now := time.Now()
	payload := bytes.Clone(report)
	g.mu.Lock()
	seq := max(g.seq+1, uint64(now.UnixNano()))
	g.seq = seq
	raw, err := signEnvelope(g.cfg.Identity, g.cfg.Name, seq, now, payload)
	if err != nil {
		g.mu.Unlock()
		return fmt.Errorf("gossip %s: encode report: %w", g.cfg.Name, err)
	}
	g.store.put(&stored{Report: Report{Node: g.cfg.Name, Seq: seq, At: time.Unix(0, now.UnixNano()), Payload: payload, From: "local"}, raw: raw,
		key: g.cfg.Identity.Public().(ed25519.PublicKey)})
	g.mu.Unlock()
	g.spread(g.cfg.Name, raw)
	return nil
}

// spread sends a report on: a broadcast if it fits a packet, else a
// reliable (TCP) send to every other live member.
func (g *Gossip) spread(node string, raw []byte) {
	if 1+len(raw) <= maxBroadcast {
		msg := append([]byte{msgReport}, raw...)
		g.queue.QueueBroadcast(&broadcast{name: "report/" + node, msg: msg})
		return
	}
	msg := append([]byte{msgReportDirect}, raw...)
	if node != g.cfg.Name {
		return // only its own node sends a large report to everyone; push-pull carries it further
	}
	ml := g.memberlist()
	go func() {
		for _, n := range ml.Members() {
			if n.Name == g.cfg.Name || g.stopped.Load() {
				continue
			}
			if err := ml.SendReliable(n, msg); err != nil {
				g.log.Warn("report not sent", "member", n.Name, "addr", n.Address(), "err", err)
			}
		}
	}()
}

// receive verifies one envelope and keeps it if it is newer. It returns
// the report and whether it was kept.
func (g *Gossip) receive(raw []byte, from string) (Report, bool) {
	// A re-broadcast of what we hold already: nothing to check (one digest, one lookup).
	digest := sha256.Sum256(raw)
	g.mu.Lock()
	held := g.store.holds(digest)
	g.mu.Unlock()
	if held {
		return Report{}, false
	}

	r, key, reason, err := verifyReportKey(raw, g.cfg.Verify)
	if err == nil && r.Node != g.cfg.Name && g.cfg.Revoked != nil && g.cfg.Revoked(key) {
		reason, err = ReasonRevoked, fmt.Errorf("report for node %q (seq %d) is signed by a revoked key: the node was removed from the mesh", r.Node, r.Seq)
	}
	if err != nil {
		g.reject(Rejection{Node: r.Node, Reason: reason, From: from, Err: err})
		return Report{}, false
	}
	r.From = from
	g.mu.Lock()
	if cur, ok := g.store.get(r.Node); ok && cur.Seq >= r.Seq {
		g.mu.Unlock()
		return r, false
	}
	if r.Node == g.cfg.Name {
		// Our own report from an earlier life: never go below it again.
		g.seq = max(g.seq, r.Seq)
	}
	g.store.put(&stored{Report: r, raw: bytes.Clone(raw), key: key})
	g.mu.Unlock()
	g.log.Debug("report kept", "about", r.Node, "seq", r.Seq, "from", from)
	if g.cfg.OnReport != nil {
		cb := r
		cb.Payload = bytes.Clone(r.Payload)
		g.cfg.OnReport(cb)
	}
	return r, true
}

func (g *Gossip) reject(rj Rejection) {
	g.mu.Lock()
	g.rejected[rj.Reason]++
	g.mu.Unlock()
	g.log.Warn("report rejected", "about", rj.Node, "reason", string(rj.Reason), "from", rj.From, "err", rj.Err)
	if g.cfg.OnReject != nil {
		g.cfg.OnReject(rj)
	}
}

// Reports returns the latest verified report of every node, by node name: a
// copy of every report. A reader of many reports, often, asks ReportsSince;
// a reader of one asks Report.
func (g *Gossip) Reports() map[string]Report {
	g.sweep()
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]Report, len(g.store.byNode))
	for n, s := range g.store.byNode {
		r := s.Report
		r.Payload = bytes.Clone(r.Payload)
		out[n] = r
	}
	return out
}

// Rejected counts the reports rejected so far, by reason.
func (g *Gossip) Rejected() map[Reason]uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[Reason]uint64, len(g.rejected))
	for k, v := range g.rejected {
		out[k] = v
	}
	return out
}

// Message types (first byte of a user message).
const (
	msgReport       byte = 1 // a broadcast report; receivers pass it on
	msgReportDirect byte = 2 // a large report sent over TCP by its own node to each member
	msgLeave        byte = 3 // a node's signed announcement that it is leaving on purpose
	msgLeaveAck     byte = 4 // a member's acknowledgement of a leave announcement
)

// pushPull is the state exchanged by push-pull: every report held, each
// still in the exact bytes its node signed.
type pushPull struct {
	Reports []json.RawMessage `json:"reports"`
}

const stateVersion byte = 1

// delegate is memberlist's view of this package.
type delegate Gossip

// NodeMeta is this member's identity public key: the others refuse a member
// whose key was revoked (Config.Revoked) before it is a peer.
func (d *delegate) NodeMeta(limit int) []byte {
	return bytes.Clone((*Gossip)(d).cfg.Identity.Public().(ed25519.PublicKey))
}

func (d *delegate) NotifyMsg(buf []byte) {
	g := (*Gossip)(d)
	if len(buf) == 0 {
		g.reject(Rejection{Reason: ReasonGarbled, From: "broadcast", Err: errors.New("empty gossip message")})
		return
	}
	switch buf[0] {
	case msgReport:
		raw := bytes.Clone(buf[1:]) // memberlist may reuse buf
		if r, kept := g.receive(raw, "broadcast"); kept {
			g.spread(r.Node, raw) // epidemic: pass news on
		}
	case msgReportDirect:
		g.receive(buf[1:], "direct")
	case msgLeave:
		g.receiveLeave(buf[1:])
	case msgLeaveAck:
		g.receiveLeaveAck(buf[1:])
	default:
		g.reject(Rejection{Reason: ReasonGarbled, From: "broadcast", Err: fmt.Errorf("gossip message of unknown type %d (%d bytes)", buf[0], len(buf))})
	}
}

func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte {
	return (*Gossip)(d).queue.GetBroadcasts(overhead, limit)
}

func (d *delegate) LocalState(join bool) []byte {
	g := (*Gossip)(d)
	g.sweep()
	g.mu.Lock()
	st := pushPull{Reports: make([]json.RawMessage, 0, len(g.store.byNode))}
	for _, s := range g.store.byNode {
		st.Reports = append(st.Reports, s.raw)
	}
	g.mu.Unlock()
	b, err := json.Marshal(&st)
	if err != nil {
		g.log.Error("push-pull state not encoded", "err", err)
		return nil
	}
	return append([]byte{stateVersion}, b...)
}

func (d *delegate) MergeRemoteState(buf []byte, join bool) {
	g := (*Gossip)(d)
	if len(buf) == 0 {
		return // a member with nothing to say yet
	}
	var st pushPull
	if buf[0] != stateVersion || json.Unmarshal(buf[1:], &st) != nil {
		g.reject(Rejection{Reason: ReasonGarbled, From: "push-pull", Err: fmt.Errorf("push-pull state (%d bytes) does not decode", len(buf))})
		return
	}
	for _, raw := range st.Reports {
		g.receive(raw, "push-pull")
	}
}

// broadcast is one queued report; a newer one of the same node replaces it.
type broadcast struct {
	name string
	msg  []byte
}

func (b *broadcast) Invalidates(o memberlist.Broadcast) bool {
	ob, ok := o.(*broadcast)
	return ok && ob.name == b.name
}
func (b *broadcast) Name() string    { return b.name }
func (b *broadcast) Message() []byte { return b.msg }
func (b *broadcast) Finished()       {}
