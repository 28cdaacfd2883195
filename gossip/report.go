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
)

// MaxReportSize bounds a report's payload; a bigger one is refused by
// Publish and rejected on receipt.
const MaxReportSize = 1 << 20

// maxBroadcast is the largest encoded report sent to a server in one UDP
// datagram; bigger ones go over TCP (memberlist's reliable send).
const maxBroadcast = 1100

// Report is a host report this member verified (or published itself).
type Report struct {
	Node    string    // the node the report is about, and whose identity signed it
	Seq     uint64    // the node's sequence number: a higher one replaces a lower one
	At      time.Time // when the node signed it (the node's clock)
	Payload []byte    // the report itself; opaque to this package
	// From says how it reached this member: "local" (Publish), "datagram" or
	// "direct" (sent by its node, over UDP or TCP), "relay" (from another
	// server) or "push-pull" (an older member's state).
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

// Publish signs report as this node's latest and sends it to the live servers
// (route.go). Each call gets
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
	g.sendOwn(raw, g.liveServers())
	return nil
}

// receive verifies one envelope and keeps it if it is newer. It returns
// the report and whether it was kept.
func (g *Gossip) receive(raw []byte, from string) (Report, bool) {
	// A re-broadcast of what we hold already: nothing to check (one digest, one lookup).
	digest := sha256.Sum256(raw)
	g.received.Add(1)
	g.mu.Lock()
	heldFor, held := g.store.holder(digest)
	g.mu.Unlock()
	if held {
		if heldFor != g.cfg.Name {
			g.receivedOthers.Add(1)
		}
		return Report{}, false
	}

	r, key, reason, err := verifyReportKey(raw, g.cfg.Verify)
	if r.Node != g.cfg.Name {
		g.receivedOthers.Add(1) // also one that does not decode: it is not this node's
	}
	if err == nil && r.Node != g.cfg.Name && g.cfg.Revoked != nil && g.cfg.Revoked(key) {
		reason, err = ReasonRevoked, fmt.Errorf("report for node %q (seq %d) is signed by a revoked key: the node was removed from the mesh", r.Node, r.Seq)
	}
	if err != nil {
		g.reject(Rejection{Node: r.Node, Reason: reason, From: from, Err: err})
		return Report{}, false
	}
	if r.Node != g.cfg.Name && !g.isServer(g.cfg.Name) {
		// Another node's report, on a member that reads none (an older member's broadcast or
		// push-pull): not kept, not passed on.
		g.foreign.Add(1)
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
	msgReport       byte = 1 // a report its node sent to a server in one datagram
	msgReportDirect byte = 2 // a report its node sent to a server over TCP (too large for a datagram)
	msgLeave        byte = 3 // a node's signed announcement that it is leaving on purpose
	msgLeaveAck     byte = 4 // a member's acknowledgement of a leave announcement
	// 5, 6 and 7 are route.go's.
)

// pushPull is a list of reports, each still in the exact bytes its node
// signed: what a server relays to another (route.go), and what push-pull
// exchanged before reports went to the servers only (an older member's state).
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
		g.receive(bytes.Clone(buf[1:]), "datagram") // memberlist may reuse buf
	case msgReportDirect:
		g.receive(buf[1:], "direct")
	case msgReportRelay:
		g.receiveRelay(buf[1:])
	case msgReportDigest:
		g.receiveDigest(buf[1:])
	case msgReportWant:
		g.receiveWant(buf[1:])
	case msgLeave:
		g.receiveLeave(buf[1:])
	case msgLeaveAck:
		g.receiveLeaveAck(buf[1:])
	default:
		g.reject(Rejection{Reason: ReasonGarbled, From: "broadcast", Err: fmt.Errorf("gossip message of unknown type %d (%d bytes)", buf[0], len(buf))})
	}
}

// GetBroadcasts is empty: nothing of this package is gossiped epidemically.
func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte { return nil }

// LocalState is this member's report's version: push-pull state is a few
// bytes a member, however many there are.
func (d *delegate) LocalState(join bool) []byte {
	b := (*Gossip)(d).localVersion()
	raiseTo(&d.stateOut, len(b))
	return b
}

func (d *delegate) MergeRemoteState(buf []byte, join bool) {
	g := (*Gossip)(d)
	raiseTo(&g.stateIn, len(buf))
	if len(buf) == 0 {
		return // a member with nothing to say yet
	}
	if buf[0] == stateVersion2 {
		if err := g.mergeVersion(buf[1:]); err != nil {
			g.reject(Rejection{Reason: ReasonGarbled, From: "push-pull", Err: fmt.Errorf("push-pull state (%d bytes): %w", len(buf), err)})
		}
		return
	}
	var st pushPull
	if buf[0] != stateVersion || json.Unmarshal(buf[1:], &st) != nil {
		g.reject(Rejection{Reason: ReasonGarbled, From: "push-pull", Err: fmt.Errorf("push-pull state (%d bytes) does not decode", len(buf))})
		return
	}
	for _, raw := range st.Reports {
		g.receive(raw, "push-pull") // an older member's every report: a server keeps them, others their own
	}
}
