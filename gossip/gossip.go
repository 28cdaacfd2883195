package gossip

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"math"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// KeySize is the size of a gossip key: AES-256.
const KeySize = 32

// Config says how one member takes part in the mesh's gossip.
type Config struct {
	// Name is the node's name; it must be unique in the mesh and is the name
	// its reports are published and verified under.
	Name string
	// BindAddr and BindPort are where memberlist listens (TCP and UDP).
	// BindPort 0 picks a free port; Addr tells which.
	BindAddr string
	BindPort int
	// AdvertiseAddr and AdvertisePort are what the other members are told to
	// reach; empty/0 means the bound address and port.
	AdvertiseAddr string
	AdvertisePort int
	// Keyring holds the gossip keys (each KeySize bytes); the first one is
	// the primary, used to encrypt. At least one key is required: meshd's
	// gossip is never unencrypted.
	Keyring [][]byte
	// Identity is the node's enrolled identity key; it signs the node's reports.
	Identity ed25519.PrivateKey
	// Verify says which public key a node enrolled with (servers take it
	// from the record). A report is kept only if that key signed it.
	Verify func(node string) (ed25519.PublicKey, bool)
	// Revoked, if set, says whether an identity key was revoked: its node
	// was removed from the mesh (`meshd node remove`). A member announcing a
	// revoked key (every member carries its identity key in memberlist's
	// node metadata) is refused as a peer from then on, its alive messages
	// ignored, so it can neither refute its removal nor join again; one
	// already in is shown StateRemoved at once, and every report its key
	// signed is dropped and never passed on. memberlist itself has no way
	// to push a live member out: it keeps probing it until its agent stops,
	// and only a rotated gossip key (`meshd keyring`) stops it listening.
	Revoked func(pub ed25519.PublicKey) bool
	// Join lists members (host:port) to join at start. Empty starts a new
	// mesh (or one that others will join).
	Join []string
	// Logger receives this package's and memberlist's logs. Nil discards.
	Logger *slog.Logger
	// Events, if set, receives every membership change. Sends never block
	// (failure detection must not wait on a slow reader): when the channel
	// is full the event is dropped, logged and counted (DroppedEvents).
	Events chan<- MemberEvent
	// OnReport, if set, is called with each newly kept report (not for the
	// node's own Publish). It must not block for long.
	OnReport func(Report)
	// OnReject, if set, is called with each rejected report.
	OnReject func(Rejection)
	// Server, if set, says whether a node is a server: a member that reads every node's report.
	// A member sends its own report to the live servers only; a server keeps every node's and
	// shares them with the other servers, any other member keeps its own only (route.go). Nil
	// makes every member a server.
	Server func(node string) bool
	// Tuning adjusts memberlist's timers; the zero value is memberlist's
	// LAN profile.
	Tuning Tuning
	// Transport, if set, replaces memberlist's UDP/TCP transport: benchmarks
	// run hundreds of members in one process over memberlist's in-memory
	// network. An agent leaves it nil.
	Transport memberlist.Transport
}

// Tuning selects memberlist's timers. Zero fields keep the profile's value.
type Tuning struct {
	// Profile is "lan" (default), "wan" or "local" (memberlist's
	// DefaultLANConfig, DefaultWANConfig, DefaultLocalConfig).
	Profile                 string
	ProbeInterval           time.Duration
	ProbeTimeout            time.Duration
	SuspicionMult           int
	SuspicionMaxTimeoutMult int
	GossipInterval          time.Duration
	PushPullInterval        time.Duration
	TCPTimeout              time.Duration
}

// State is a member's state as this member sees it.
type State string

const (
	// StateAlive: the member answers probes (or has not yet been found
	// failing; memberlist's transient "suspect" state is not visible through
	// its public API and shows as alive until the suspicion timer ends).
	StateAlive State = "alive"
	// StateFailed: the member stopped answering and its suspicion timer ran
	// out (memberlist's "dead").
	StateFailed State = "failed"
	// StateLeft: the member announced a graceful leave.
	StateLeft State = "left"
	// StateRemoved: the member's identity key was revoked (Config.Revoked):
	// its node was removed from the mesh, whether or not it still answers.
	StateRemoved State = "removed"
)

// Member is one member of the mesh as this member sees it.
type Member struct {
	Name  string
	Addr  string // host:port of its gossip endpoint
	State State
	// Since is when this member observed the last change of State.
	Since time.Time
}

// EventKind names a membership change.
type EventKind string

const (
	EventJoin    EventKind = "join"    // a member appeared, or came back
	EventUpdate  EventKind = "update"  // a member's address or metadata changed
	EventFailed  EventKind = "failed"  // a member was found failed
	EventLeft    EventKind = "left"    // a member left gracefully
	EventRemoved EventKind = "removed" // a member's identity key was revoked
)

// MemberEvent is one membership change.
type MemberEvent struct {
	Kind   EventKind
	Member Member
}

// Gossip is one running member.
type Gossip struct {
	cfg   Config
	log   *slog.Logger
	ml    *memberlist.Memberlist
	mlcfg *memberlist.Config
	ring  *memberlist.Keyring

	keyMu sync.Mutex // serialises keyring changes (memberlist's Keyring is not safe for concurrent writers)

	mu       sync.Mutex
	members  map[string]*Member
	store    reportStore
	seq      uint64
	rejected map[Reason]uint64
	refused  map[string]uint64 // what memberlist refused before any key let it in, by kind (wirelog.go)

	keys      map[string][]byte    // each member's identity key, from its memberlist metadata
	intents   map[string]time.Time // members that announced a graceful leave (signed), when
	lastLeave map[string]int64     // the newest leave intent taken from each node (signed Unix ns): an older or equal one is a replay
	answered  map[string]time.Time // when this server last answered each other server's digest (route.go)
	leaveAcks chan string          // while this member leaves: who acknowledged its intent
	stopped   atomic.Bool
	dropped   atomic.Uint64
	stop      chan struct{} // closed by Shutdown: ends the servers' sync
	// sent counts the reports this member sent of its own; relayed those of other nodes it
	// sent another server; foreign those of other nodes it received and, reading none, dropped.
	sent, relayed, foreign atomic.Uint64
	// received and receivedOthers count every report envelope that arrived, and those of other
	// nodes; stateOut and stateIn the largest push-pull state sent and received (stats.go).
	received, receivedOthers atomic.Uint64
	stateOut, stateIn        atomic.Int64
	lifeMu                   sync.Mutex // serialises Leave and Shutdown (memberlist panics on Leave after Shutdown)
	hasLeft                  bool
	shutdown                 bool
}

// Start creates the member, binds its ports and, if cfg.Join is set, joins
// the mesh through those members. A join that reaches none of them is an
// error (naming them) and leaves nothing running.
func Start(cfg Config) (*Gossip, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	g := &Gossip{
		cfg:       cfg,
		log:       cfg.Logger,
		members:   map[string]*Member{},
		store:     newReportStore(),
		rejected:  map[Reason]uint64{},
		refused:   map[string]uint64{},
		keys:      map[string][]byte{},
		intents:   map[string]time.Time{},
		lastLeave: map[string]int64{},
		answered:  map[string]time.Time{},
		stop:      make(chan struct{}),
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	g.log = g.log.With("component", "gossip", "node", cfg.Name)

	mc, err := cfg.memberlistConfig()
	if err != nil {
		return nil, err
	}
	ring, err := memberlist.NewKeyring(cfg.Keyring[1:], cfg.Keyring[0])
	if err != nil {
		return nil, fmt.Errorf("gossip %s: keyring: %w", cfg.Name, err)
	}
	g.ring = ring
	mc.Keyring = ring
	mc.GossipVerifyIncoming = true
	mc.GossipVerifyOutgoing = true
	mc.Delegate = (*delegate)(g)
	mc.Events = (*events)(g)
	mc.Alive = (*admission)(g)
	mc.Logger = log.New(g.newLogBridge(), "", 0)
	g.mlcfg = mc
	bind := net.JoinHostPort(cfg.BindAddr, strconv.Itoa(cfg.BindPort))
	ml, err := memberlist.Create(mc)
	if err != nil {
		return nil, fmt.Errorf("gossip %s: listen on %s: %w", cfg.Name, bind, err)
	}
	g.mu.Lock()
	g.ml = ml
	g.mu.Unlock()
	g.log.Info("gossip started", "addr", g.Addr(), "keys", len(cfg.Keyring))
	go g.syncServers(firstSync, mc.PushPullInterval)

	if len(cfg.Join) > 0 {
		if _, err := g.Join(cfg.Join); err != nil {
			_ = g.Shutdown()
			return nil, err
		}
	}
	return g, nil
}

func (c *Config) validate() error {
	if c.Name == "" {
		return errors.New("gossip: the node's name is empty")
	}
	if len(c.Identity) != ed25519.PrivateKeySize {
		return fmt.Errorf("gossip %s: identity key is %d bytes, want an ed25519 private key (%d)", c.Name, len(c.Identity), ed25519.PrivateKeySize)
	}
	if c.Verify == nil {
		return fmt.Errorf("gossip %s: no Verify function: reports could not be checked", c.Name)
	}
	if len(c.Keyring) == 0 {
		return fmt.Errorf("gossip %s: no gossip key: gossip is always encrypted", c.Name)
	}
	for i, k := range c.Keyring {
		if len(k) != KeySize {
			return fmt.Errorf("gossip %s: key %d is %d bytes, want %d", c.Name, i, len(k), KeySize)
		}
	}
	if c.BindPort < 0 || c.BindPort > 65535 {
		return fmt.Errorf("gossip %s: bind port %d is out of range", c.Name, c.BindPort)
	}
	if c.AdvertisePort < 0 || c.AdvertisePort > 65535 {
		return fmt.Errorf("gossip %s: advertise port %d is out of range", c.Name, c.AdvertisePort)
	}
	if c.AdvertiseAddr != "" && net.ParseIP(c.AdvertiseAddr) == nil {
		return fmt.Errorf("gossip %s: advertise address %q is not an IP address", c.Name, c.AdvertiseAddr)
	}
	if pub, ok := c.Verify(c.Name); ok {
		if !bytes.Equal(pub, c.Identity.Public().(ed25519.PublicKey)) {
			return fmt.Errorf("gossip %s: identity key is not the one node %s enrolled with: its reports would be rejected", c.Name, c.Name)
		}
	}
	return nil
}

func (c *Config) memberlistConfig() (*memberlist.Config, error) {
	var mc *memberlist.Config
	switch c.Tuning.Profile {
	case "", "lan":
		mc = memberlist.DefaultLANConfig()
	case "wan":
		mc = memberlist.DefaultWANConfig()
	case "local":
		mc = memberlist.DefaultLocalConfig()
	default:
		return nil, fmt.Errorf("gossip %s: unknown tuning profile %q (want lan, wan or local)", c.Name, c.Tuning.Profile)
	}
	t := c.Tuning
	setDur := func(dst *time.Duration, v time.Duration) {
		if v > 0 {
			*dst = v
		}
	}
	setDur(&mc.ProbeInterval, t.ProbeInterval)
	setDur(&mc.ProbeTimeout, t.ProbeTimeout)
	setDur(&mc.GossipInterval, t.GossipInterval)
	setDur(&mc.PushPullInterval, t.PushPullInterval)
	setDur(&mc.TCPTimeout, t.TCPTimeout)
	if t.SuspicionMult > 0 {
		mc.SuspicionMult = t.SuspicionMult
	}
	if t.SuspicionMaxTimeoutMult > 0 {
		mc.SuspicionMaxTimeoutMult = t.SuspicionMaxTimeoutMult
	}
	mc.Name = c.Name
	mc.BindAddr = c.BindAddr
	if mc.BindAddr == "" {
		mc.BindAddr = "0.0.0.0"
	}
	mc.BindPort = c.BindPort
	mc.AdvertiseAddr = c.AdvertiseAddr
	mc.AdvertisePort = c.AdvertisePort
	if mc.AdvertisePort == 0 {
		mc.AdvertisePort = c.BindPort
	}
	if c.Transport != nil {
		mc.Transport = c.Transport
	}
	return mc, nil
}

func (g *Gossip) memberlist() *memberlist.Memberlist {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ml
}

// Name is this member's node name.
func (g *Gossip) Name() string { return g.cfg.Name }

// Addr is the host:port the other members reach this one at.
func (g *Gossip) Addr() string {
	n := g.ml.LocalNode()
	return net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
}

// Join contacts the given members (host:port) and merges their view of the
// mesh. It returns how many answered; none answering is an error naming
// them (a wrong gossip key shows here: they cannot decrypt us, nor we them).
func (g *Gossip) Join(addrs []string) (int, error) {
	n, err := g.ml.Join(addrs)
	if n == 0 {
		if err == nil {
			err = errors.New("no member answered")
		}
		return 0, fmt.Errorf("gossip %s: join via %s: %w", g.cfg.Name, strings.Join(addrs, ", "), oneLine{err})
	}
	if err != nil {
		g.log.Warn("joined, but some members did not answer", "joined", n, "err", err)
	}
	return n, nil
}

// Members returns every member this one knows of, itself included, by
// name: alive ones, and those that failed, left (until they come back) or
// were removed.
func (g *Gossip) Members() []Member {
	g.sweep()
	g.mu.Lock()
	out := make([]Member, 0, len(g.members))
	for _, m := range g.members {
		out = append(out, *m)
	}
	g.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// DroppedEvents counts member events not delivered because Config.Events was full.
func (g *Gossip) DroppedEvents() uint64 { return g.dropped.Load() }

// DetectionBound is the longest memberlist may take, with the configured
// timers and the current number of members, from a member's death until
// every other member has marked it failed: the time for the dead member to
// be probed (each member probes the others round robin, possibly slowed by
// memberlist's awareness multiplier), one probe round, the longest
// suspicion timeout (SuspicionMaxTimeoutMult × SuspicionMult × max(1,
// log10 n) × ProbeInterval) and a few gossip intervals for the news to
// spread.
func (g *Gossip) DetectionBound() time.Duration {
	n := g.ml.NumMembers()
	return detectionBound(g.mlcfg, n)
}

func detectionBound(mc *memberlist.Config, n int) time.Duration {
	if n < 2 {
		n = 2
	}
	scale := math.Max(1, math.Log10(float64(n)))
	suspicion := time.Duration(float64(mc.SuspicionMult) * scale * float64(mc.ProbeInterval))
	maxSuspicion := time.Duration(mc.SuspicionMaxTimeoutMult) * suspicion
	awareness := time.Duration(max(mc.AwarenessMaxMultiplier, 1))
	probe := 2 * time.Duration(n-1) * mc.ProbeInterval * awareness
	return probe + mc.ProbeInterval + maxSuspicion + 5*mc.GossipInterval
}

// Leave announces a graceful leave and waits (up to timeout) until the
// others were told; they record this member as left, not failed. Call
// Shutdown afterwards.
func (g *Gossip) Leave(timeout time.Duration) error {
	g.lifeMu.Lock()
	defer g.lifeMu.Unlock()
	if g.shutdown {
		return fmt.Errorf("gossip %s: leave after shutdown", g.cfg.Name)
	}
	if g.hasLeft {
		return nil
	}
	deadline := time.Now().Add(timeout)
	// First tell every member, over TCP and signed by our identity, that we
	// are leaving on purpose, so that when memberlist's leave message
	// arrives they record "left", not "failed". (memberlist's own leave
	// message does say so, but its public API does not tell the two apart.)
	g.announceLeave(deadline)
	rest := time.Until(deadline)
	if rest < 100*time.Millisecond {
		rest = 100 * time.Millisecond
	}
	if err := g.ml.Leave(rest); err != nil {
		return fmt.Errorf("gossip %s: leave: %w", g.cfg.Name, err)
	}
	g.hasLeft = true
	g.log.Info("left the mesh")
	return nil
}

// Shutdown stops the member without a leave: the others will find it failed.
func (g *Gossip) Shutdown() error {
	g.lifeMu.Lock()
	defer g.lifeMu.Unlock()
	if g.shutdown {
		return nil
	}
	g.shutdown = true
	g.stopped.Store(true)
	close(g.stop)
	if err := g.ml.Shutdown(); err != nil {
		return fmt.Errorf("gossip %s: shutdown: %w", g.cfg.Name, err)
	}
	return nil
}

// events receives memberlist's membership notifications. memberlist calls
// it with its node lock held: it must not call back into memberlist.
type events Gossip

func (e *events) NotifyJoin(n *memberlist.Node) {
	g := (*Gossip)(e)
	g.mu.Lock()
	delete(g.intents, n.Name) // back after a leave or failure: a new life
	g.mu.Unlock()
	g.observe(EventJoin, n)

}
func (e *events) NotifyUpdate(n *memberlist.Node) { (*Gossip)(e).observe(EventUpdate, n) }
func (e *events) NotifyLeave(n *memberlist.Node) {
	g := (*Gossip)(e)
	kind := EventFailed
	g.mu.Lock()
	if _, ok := g.intents[n.Name]; ok {
		kind = EventLeft
	}
	g.mu.Unlock()
	g.observe(kind, n)
}

func (g *Gossip) observe(kind EventKind, n *memberlist.Node) {
	now := time.Now()
	state := StateAlive
	switch kind {
	case EventFailed:
		state = StateFailed
	case EventLeft:
		state = StateLeft
	}
	addr := net.JoinHostPort(n.Addr.String(), strconv.Itoa(int(n.Port)))
	g.mu.Lock()
	m, ok := g.members[n.Name]
	if !ok {
		m = &Member{Name: n.Name}
		g.members[n.Name] = m
	}
	if kind == EventJoin || kind == EventUpdate {
		g.keys[n.Name] = bytes.Clone(n.Meta) // admitted: its key is not revoked
	} else if ok && m.State == StateRemoved {
		// A removed member that fails or leaves stays removed (it was out already).
		g.mu.Unlock()
		return
	}
	if !ok || m.State != state {
		m.Since = now
	}
	m.State = state
	m.Addr = addr
	ev := MemberEvent{Kind: kind, Member: *m}
	g.mu.Unlock()

	if kind == EventUpdate {
		g.log.Debug("member updated", "member", n.Name, "addr", addr)
	} else {
		g.log.Info("member "+string(kind), "member", n.Name, "addr", addr)
	}
	g.emit(ev)
}

// admission is memberlist's alive delegate: it refuses a member whose
// identity key (its node metadata) was revoked, or that is not the key the
// node enrolled with. This member is always admitted.
type admission Gossip

func (a *admission) NotifyAlive(n *memberlist.Node) error {
	g := (*Gossip)(a)
	if n.Name == g.cfg.Name {
		return nil
	}
	if len(n.Meta) != ed25519.PublicKeySize {
		return fmt.Errorf("member %s announces no identity key (%d bytes of metadata)", n.Name, len(n.Meta))
	}
	pub := ed25519.PublicKey(n.Meta)
	if g.cfg.Revoked != nil && g.cfg.Revoked(pub) {
		return fmt.Errorf("member %s announces a revoked identity key: its node was removed from the mesh", n.Name)
	}
	if known, ok := g.cfg.Verify(n.Name); ok && !bytes.Equal(known, pub) {
		return fmt.Errorf("member %s announces an identity key that is not the one it enrolled with", n.Name)
	}
	return nil
}

// sweep applies Config.Revoked to what this member holds: a member whose
// key was revoked reads StateRemoved from now on, and every kept report a
// revoked key signed is dropped (no longer served, nor shared with the
// other servers). The record can revoke a key at any moment; memberlist has no
// way to be told, so every read looks.
func (g *Gossip) sweep() {
	if g.cfg.Revoked == nil {
		return
	}
	var evs []MemberEvent
	g.mu.Lock()
	for name, s := range g.store.byNode {
		if name != g.cfg.Name && g.cfg.Revoked(s.key) {
			g.store.drop(name)
			g.log.Info("report dropped: its node's identity key was revoked", "about", name)
		}
	}
	for name, m := range g.members {
		k := g.keys[name]
		if name == g.cfg.Name || m.State == StateRemoved || len(k) != ed25519.PublicKeySize || !g.cfg.Revoked(k) {
			continue
		}
		m.State, m.Since = StateRemoved, time.Now()
		evs = append(evs, MemberEvent{Kind: EventRemoved, Member: *m})
	}
	g.mu.Unlock()
	for _, ev := range evs {
		g.log.Info("member removed: its identity key was revoked; its messages are refused from now on", "member", ev.Member.Name, "addr", ev.Member.Addr)
		g.emit(ev)
	}
}

// emit hands ev to Config.Events without ever blocking.
func (g *Gossip) emit(ev MemberEvent) {
	if g.cfg.Events == nil {
		return
	}
	select {
	case g.cfg.Events <- ev:
	default:
		g.dropped.Add(1)
		g.log.Warn("member event dropped: events channel full", "member", ev.Member.Name, "event", ev.Kind)
	}
}

// oneLine shows memberlist's multi-line errors (a go-multierror list) on
// one line, keeping the original for errors.Is/As.
type oneLine struct{ err error }

func (e oneLine) Error() string {
	if m, ok := e.err.(interface{ WrappedErrors() []error }); ok {
		var parts []string
		for _, w := range m.WrappedErrors() {
			parts = append(parts, w.Error())
		}
		return strings.Join(parts, "; ")
	}
	return e.err.Error()
}

func (e oneLine) Unwrap() error { return e.err }
