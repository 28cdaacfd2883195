package gossip

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// gsFast makes failure detection quick on loopback (a dead member is failed
// in about a second) without false alarms on a loaded two-core machine
// under the race detector (a 50 ms probe timeout and 200 ms suspicion had
// live members marked failed now and then).
var gsFast = Tuning{
	Profile:                 "local",
	ProbeInterval:           200 * time.Millisecond,
	ProbeTimeout:            100 * time.Millisecond,
	SuspicionMult:           3,
	SuspicionMaxTimeoutMult: 2,
	GossipInterval:          20 * time.Millisecond,
	PushPullInterval:        500 * time.Millisecond,
	TCPTimeout:              500 * time.Millisecond,
}

// gsRegistry stands in for the record: which key each node enrolled with.
type gsRegistry struct {
	mu      sync.Mutex
	keys    map[string]ed25519.PublicKey
	revoked map[string]bool
}

func (r *gsRegistry) enrol(t testing.TB, node string) ed25519.PrivateKey {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.keys == nil {
		r.keys = map[string]ed25519.PublicKey{}
	}
	r.keys[node] = pub
	return priv
}

func (r *gsRegistry) verify(node string) (ed25519.PublicKey, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k, ok := r.keys[node]
	return k, ok
}

func gsKey(t testing.TB) []byte {
	t.Helper()
	k := make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

func gsLogger() *slog.Logger {
	if os.Getenv("MESHD_GOSSIP_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return nil
}

// gsMember is one member under test and every event it saw.
type gsMember struct {
	*Gossip
	events chan MemberEvent
}

type gsOpt func(*Config)

func gsStart(t testing.TB, reg *gsRegistry, name string, ring [][]byte, join []string, tuning Tuning, opts ...gsOpt) (*gsMember, error) {
	t.Helper()
	ev := make(chan MemberEvent, 1024)
	cfg := Config{
		Name:     name,
		BindAddr: "127.0.0.1",
		Keyring:  ring,
		Identity: reg.enrol(t, name),
		Verify:   reg.verify,
		Join:     join,
		Logger:   gsLogger(),
		Events:   ev,
		Tuning:   tuning,
	}
	for _, o := range opts {
		o(&cfg)
	}
	g, err := Start(cfg)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = g.Shutdown() })
	return &gsMember{Gossip: g, events: ev}, nil
}

// gsMesh starts len(names) members with one key, each joining the first.
func gsMesh(t testing.TB, reg *gsRegistry, ring [][]byte, tuning Tuning, names ...string) []*gsMember {
	t.Helper()
	var ms []*gsMember
	for i, name := range names {
		var join []string
		if i > 0 {
			join = []string{ms[0].Addr()}
		}
		m, err := gsStart(t, reg, name, ring, join, tuning)
		if err != nil {
			t.Fatalf("start %s: %v", name, err)
		}
		ms = append(ms, m)
	}
	gsAllSee(t, ms, 10*time.Second, names...)
	return ms
}

// gsEventually polls cond until it holds or the deadline passes.
func gsEventually(t testing.TB, within time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(within)
	for {
		ok, detail := cond()
		if ok {
			return time.Since(start)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %s", what, within, detail)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func gsState(g *Gossip, name string) (State, bool) {
	for _, m := range g.Members() {
		if m.Name == name {
			return m.State, true
		}
	}
	return "", false
}

// gsAllSee waits until every member sees every named member alive.
func gsAllSee(t testing.TB, ms []*gsMember, within time.Duration, names ...string) {
	t.Helper()
	gsEventually(t, within, "every member sees "+strings.Join(names, ", ")+" alive", func() (bool, string) {
		for _, m := range ms {
			for _, n := range names {
				if st, _ := gsState(m.Gossip, n); st != StateAlive {
					return false, fmt.Sprintf("%s sees %s as %q: %v", m.Name(), n, st, m.Members())
				}
			}
		}
		return true, ""
	})
}

// gsNoLoss fails if any member saw another fail or leave.
func gsNoLoss(t *testing.T, ms []*gsMember) {
	t.Helper()
	for _, m := range ms {
		for {
			select {
			case ev := <-m.events:
				if ev.Kind == EventFailed || ev.Kind == EventLeft {
					t.Fatalf("%s saw %s %s", m.Name(), ev.Member.Name, ev.Kind)
				}
				continue
			default:
			}
			break
		}
	}
}

func TestThreeMembersJoin(t *testing.T) {
	reg := &gsRegistry{}
	ms := gsMesh(t, reg, [][]byte{gsKey(t)}, gsFast, "gs-a", "gs-b", "gs-c")
	for _, m := range ms {
		got := m.Members()
		if len(got) != 3 {
			t.Fatalf("%s sees %d members, want 3: %v", m.Name(), len(got), got)
		}
		for _, mm := range got {
			if !strings.HasPrefix(mm.Addr, "127.0.0.1:") || mm.Since.IsZero() {
				t.Errorf("%s: member %+v: want a 127.0.0.1 address and a change time", m.Name(), mm)
			}
		}
	}
	// Each saw a join event for the two others.
	for _, m := range ms {
		seen := map[string]bool{}
		for len(m.events) > 0 {
			ev := <-m.events
			if ev.Kind == EventJoin {
				seen[ev.Member.Name] = true
			}
		}
		for _, other := range ms {
			if !seen[other.Name()] {
				t.Errorf("%s had no join event for %s", m.Name(), other.Name())
			}
		}
	}
}

func TestKilledMemberIsSeenFailed(t *testing.T) {
	reg := &gsRegistry{}
	ms := gsMesh(t, reg, [][]byte{gsKey(t)}, gsFast, "gs-a", "gs-b", "gs-c")
	bound := ms[0].DetectionBound()
	t.Logf("detection bound with 3 members: %v", bound)

	if err := ms[2].Shutdown(); err != nil { // killed: no leave
		t.Fatal(err)
	}
	took := gsEventually(t, bound, "every member sees gs-c failed", func() (bool, string) {
		for _, m := range ms[:2] {
			if st, _ := gsState(m.Gossip, "gs-c"); st != StateFailed {
				return false, fmt.Sprintf("%s sees gs-c as %q", m.Name(), st)
			}
		}
		return true, ""
	})
	t.Logf("gs-c seen failed by every member after %v (bound %v)", took, bound)
	for _, m := range ms[:2] {
		if st, _ := gsState(m.Gossip, "gs-a"); st != StateAlive {
			t.Errorf("%s sees gs-a as %q", m.Name(), st)
		}
	}
}

func TestGracefulLeaveIsSeenLeftAtOnce(t *testing.T) {
	// Slow failure detection: a leave mistaken for a failure would take
	// many seconds; a real leave must show within one probe interval.
	slow := gsFast
	slow.ProbeInterval = 2 * time.Second
	slow.ProbeTimeout = 500 * time.Millisecond
	slow.SuspicionMult = 4
	reg := &gsRegistry{}
	ms := gsMesh(t, reg, [][]byte{gsKey(t)}, slow, "gs-a", "gs-b", "gs-c")

	start := time.Now()
	if err := ms[2].Leave(slow.ProbeInterval); err != nil {
		t.Fatal(err)
	}
	gsEventually(t, slow.ProbeInterval-time.Since(start), "every member sees gs-c left", func() (bool, string) {
		for _, m := range ms[:2] {
			if st, _ := gsState(m.Gossip, "gs-c"); st != StateLeft {
				return false, fmt.Sprintf("%s sees gs-c as %q", m.Name(), st)
			}
		}
		return true, ""
	})
	t.Logf("gs-c seen left by every member %v after its leave began (probe interval %v)", time.Since(start), slow.ProbeInterval)
	if err := ms[2].Shutdown(); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms[:2] {
		for len(m.events) > 0 {
			if ev := <-m.events; ev.Kind == EventFailed {
				t.Errorf("%s saw %s failed, want left", m.Name(), ev.Member.Name)
			}
		}
	}
}

func TestWrongGossipKeyCannotJoin(t *testing.T) {
	reg := &gsRegistry{}
	ms := gsMesh(t, reg, [][]byte{gsKey(t)}, gsFast, "gs-a", "gs-b")

	_, err := gsStart(t, reg, "gs-intruder", [][]byte{gsKey(t)}, []string{ms[0].Addr()}, gsFast)
	if err == nil {
		t.Fatal("a member with the wrong gossip key joined")
	}
	if !strings.Contains(err.Error(), ms[0].Addr()) {
		t.Errorf("join error does not name the address %s: %v", ms[0].Addr(), err)
	}
	t.Logf("refused: %v", err)

	// Nor can the mesh pull it in: joining it from inside fails too.
	intruder, err := gsStart(t, reg, "gs-intruder2", [][]byte{gsKey(t)}, nil, gsFast)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ms[1].Join([]string{intruder.Addr()}); err == nil {
		t.Fatal("the mesh joined a member with another gossip key")
	}
	for _, m := range ms {
		for _, mm := range m.Members() {
			if strings.HasPrefix(mm.Name, "gs-intruder") {
				t.Errorf("%s lists %s", m.Name(), mm.Name)
			}
		}
	}
	if n := len(intruder.Members()); n != 1 {
		t.Errorf("the intruder sees %d members, want only itself: %v", n, intruder.Members())
	}
}

func TestKeyRotationOnARunningMesh(t *testing.T) {
	reg := &gsRegistry{}
	oldKey, newKey := gsKey(t), gsKey(t)
	names := []string{"gs-a", "gs-b", "gs-c"}
	ms := gsMesh(t, reg, [][]byte{oldKey}, gsFast, names...)
	gsNoLoss(t, ms) // drain the join events

	// Every step must leave encrypted traffic flowing between every pair:
	// each member publishes a fresh report and every other one must get it.
	round := 0
	flowing := func(step string) {
		t.Helper()
		round++
		for _, m := range ms {
			if err := m.Publish(fmt.Appendf(nil, `{"step":%q,"round":%d}`, step, round)); err != nil {
				t.Fatal(err)
			}
		}
		want := fmt.Sprintf(`"round":%d}`, round)
		gsEventually(t, 5*time.Second, step+": every report reaches every member", func() (bool, string) {
			for _, m := range ms {
				rs := m.Reports()
				for _, n := range names {
					if !bytes.Contains(rs[n].Payload, []byte(want)) {
						return false, fmt.Sprintf("%s has %s's %q", m.Name(), n, rs[n].Payload)
					}
				}
			}
			return true, ""
		})
		gsAllSee(t, ms, time.Second, names...)
		gsNoLoss(t, ms)
	}
	flowing("before")

	if err := ms[0].KeyringRemove(oldKey); err == nil || !strings.Contains(err.Error(), "primary") {
		t.Fatalf("removing the primary key: got %v, want a refusal naming the primary", err)
	} else {
		t.Logf("refused: %v", err)
	}

	for _, m := range ms {
		if err := m.KeyringInstall(newKey); err != nil {
			t.Fatal(err)
		}
	}
	flowing("installed")
	for _, m := range ms {
		if err := m.KeyringUse(newKey); err != nil {
			t.Fatal(err)
		}
	}
	flowing("used")
	for _, m := range ms {
		if err := m.KeyringRemove(oldKey); err != nil {
			t.Fatal(err)
		}
	}
	flowing("removed")

	for _, m := range ms {
		keys := m.KeyringList()
		if len(keys) != 1 || !bytes.Equal(keys[0].Key, newKey) || !keys[0].Primary {
			t.Errorf("%s's ring after rotation: %+v, want only the new key, primary", m.Name(), keys)
		}
	}
	// The old key no longer gets anyone in.
	if _, err := gsStart(t, reg, "gs-old", [][]byte{oldKey}, []string{ms[0].Addr()}, gsFast); err == nil {
		t.Fatal("a member with the retired key joined")
	}
	// And the new one does.
	late, err := gsStart(t, reg, "gs-d", [][]byte{newKey}, []string{ms[1].Addr()}, gsFast)
	if err != nil {
		t.Fatal(err)
	}
	gsAllSee(t, append(ms, late), 5*time.Second, "gs-a", "gs-b", "gs-c", "gs-d")
}

func TestKeyringErrors(t *testing.T) {
	reg := &gsRegistry{}
	k := gsKey(t)
	m, err := gsStart(t, reg, "gs-a", [][]byte{k}, nil, gsFast)
	if err != nil {
		t.Fatal(err)
	}
	other := gsKey(t)
	for _, tc := range []struct {
		what string
		err  error
		want string
	}{
		{"install short key", m.KeyringInstall(other[:16]), "16 bytes"},
		{"use uninstalled", m.KeyringUse(other), "not installed"},
		{"remove uninstalled", m.KeyringRemove(other), "not installed"},
		{"remove primary", m.KeyringRemove(k), "key 0, the primary"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error containing %q", tc.what, tc.err, tc.want)
		}
		if tc.err != nil && strings.Contains(tc.err.Error(), fmt.Sprintf("%x", other)) {
			t.Errorf("%s: error shows the key itself: %v", tc.what, tc.err)
		}
	}
	if got := m.KeyringList(); len(got) != 1 || got[0].ID != KeyID(k) {
		t.Errorf("ring changed by refused operations: %+v", got)
	}
}

func TestStartErrorsNameTheThing(t *testing.T) {
	reg := &gsRegistry{}
	first, err := gsStart(t, reg, "gs-a", [][]byte{gsKey(t)}, nil, gsFast)
	if err != nil {
		t.Fatal(err)
	}
	port := first.ml.LocalNode().Port
	_, err = gsStart(t, reg, "gs-b", [][]byte{gsKey(t)}, nil, gsFast, func(c *Config) { c.BindPort = int(port) })
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("127.0.0.1:%d", port)) {
		t.Errorf("port in use: got %v, want an error naming 127.0.0.1:%d", err, port)
	}
	_, err = gsStart(t, reg, "gs-c", [][]byte{gsKey(t), make([]byte, 31)}, nil, gsFast)
	if err == nil || !strings.Contains(err.Error(), "key 1 is 31 bytes") {
		t.Errorf("short key: got %v, want an error naming key 1", err)
	}
	_, err = gsStart(t, reg, "gs-d", [][]byte{gsKey(t)}, nil, gsFast, func(c *Config) {
		_, c.Identity, _ = ed25519.GenerateKey(rand.Reader)
	})
	if err == nil || !strings.Contains(err.Error(), "node gs-d enrolled with") {
		t.Errorf("identity not the enrolled one: got %v", err)
	}
}

// A leave intent that arrives after memberlist's leave message (the
// acknowledgement timed out) turns "failed" into "left"; a forged one
// does not.
func TestLateLeaveIntentTurnsFailedIntoLeft(t *testing.T) {
	reg := &gsRegistry{}
	key := reg.enrol(t, "gs-c")
	ev := make(chan MemberEvent, 4)
	g := gsBare(reg, "gs-a", nil)
	g.cfg.Events = ev
	g.members["gs-c"] = &Member{Name: "gs-c", State: StateFailed, Since: time.Now()}

	_, wrong, _ := ed25519.GenerateKey(rand.Reader)
	forged := leaveIntent{Node: "gs-c", At: time.Now().UnixNano()}
	forged.Sig = ed25519.Sign(wrong, forged.signedBytes())
	raw, _ := json.Marshal(&forged)
	g.receiveLeave(raw)
	if st, _ := gsState(g, "gs-c"); st != StateFailed || g.Rejected()[ReasonBadSignature] != 1 {
		t.Fatalf("forged intent: gs-c is %q, rejected %v", st, g.Rejected())
	}

	genuine := leaveIntent{Node: "gs-c", At: time.Now().UnixNano()}
	genuine.Sig = ed25519.Sign(key, genuine.signedBytes())
	raw, _ = json.Marshal(&genuine)
	g.receiveLeave(raw)
	if st, _ := gsState(g, "gs-c"); st != StateLeft {
		t.Fatalf("genuine intent: gs-c is %q, want left", st)
	}
	if e := <-ev; e.Kind != EventLeft || e.Member.Name != "gs-c" {
		t.Fatalf("event %+v, want gs-c left", e)
	}
}

// A leave intent is good once and for LeaveMaxAge: one signed long ago (a
// recording replayed), or the very intent already taken sent again, is
// refused as stale and leaves a failed node failed.
func TestStaleOrReplayedLeaveIntentIsRefused(t *testing.T) {
	reg := &gsRegistry{}
	key := reg.enrol(t, "gs-c")
	g := gsBare(reg, "gs-a", nil)
	g.members["gs-c"] = &Member{Name: "gs-c", State: StateFailed, Since: time.Now()}
	signed := func(at time.Time) []byte {
		l := leaveIntent{Node: "gs-c", At: at.UnixNano()}
		l.Sig = ed25519.Sign(key, l.signedBytes())
		raw, _ := json.Marshal(&l)
		return raw
	}
	for what, at := range map[string]time.Time{"an hour old": time.Now().Add(-time.Hour), "an hour ahead": time.Now().Add(time.Hour)} {
		g.receiveLeave(signed(at))
		if st, _ := gsState(g, "gs-c"); st != StateFailed {
			t.Fatalf("a genuine intent %s made gs-c %q", what, st)
		}
	}
	if n := g.Rejected()[ReasonStale]; n != 2 {
		t.Fatalf("stale intents rejected %d times, want 2: %v", n, g.Rejected())
	}

	fresh := signed(time.Now())
	g.receiveLeave(fresh)
	if st, _ := gsState(g, "gs-c"); st != StateLeft {
		t.Fatalf("a fresh intent: gs-c is %q, want left", st)
	}
	// gs-c comes back, fails again; the intent it sent last time is replayed.
	g.mu.Lock()
	delete(g.intents, "gs-c")
	g.members["gs-c"].State = StateFailed
	g.mu.Unlock()
	g.receiveLeave(fresh)
	if st, _ := gsState(g, "gs-c"); st != StateFailed || g.Rejected()[ReasonStale] != 3 {
		t.Fatalf("a replayed intent: gs-c is %q, rejected %v", st, g.Rejected())
	}
}

// revoke takes node out of the registry and revokes its key, as `meshd node remove` does in the
// record.
func (r *gsRegistry) revoke(node string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.revoked == nil {
		r.revoked = map[string]bool{}
	}
	r.revoked[string(r.keys[node])] = true
	delete(r.keys, node)
}

func (r *gsRegistry) isRevoked(pub ed25519.PublicKey) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.revoked[string(pub)]
}

// A node removed from the mesh while its agent still runs is out of gossip at once, not once
// memberlist finds it failed (it never does while it answers): the others show it removed, drop
// the report its key signed and reject the ones it publishes after; restarted with its revoked
// key it is not admitted again; a new machine enrolled under the same name, with a new key, is.
func TestRemovedMemberIsOutAtOnce(t *testing.T) {
	reg := &gsRegistry{}
	ring := [][]byte{gsKey(t)}
	withRevoked := func(c *Config) { c.Revoked = reg.isRevoked }
	var ms []*gsMember
	for i, name := range []string{"gs-a", "gs-b", "gs-c"} {
		var join []string
		if i > 0 {
			join = []string{ms[0].Addr()}
		}
		m, err := gsStart(t, reg, name, ring, join, gsFast, withRevoked)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	a, b, c := ms[0], ms[1], ms[2]
	gsAllSee(t, ms, 10*time.Second, "gs-a", "gs-b", "gs-c")
	if err := c.Publish([]byte(`{"before":"removal"}`)); err != nil {
		t.Fatal(err)
	}
	gsEventually(t, 5*time.Second, "gs-c's report reaches gs-a and gs-b", func() (bool, string) {
		_, okA := a.Reports()["gs-c"]
		_, okB := b.Reports()["gs-c"]
		return okA && okB, fmt.Sprintf("gs-a %v, gs-b %v", okA, okB)
	})
	oldKey := append(ed25519.PrivateKey(nil), c.cfg.Identity...)
	_, port, _ := net.SplitHostPort(c.Addr())
	cPort, _ := strconv.Atoi(port)
	samePort := func(c *Config) { c.BindPort = cPort } // the agent binds its mesh.gossip setting

	reg.revoke("gs-c")
	for _, m := range []*gsMember{a, b} {
		if st, _ := gsState(m.Gossip, "gs-c"); st != StateRemoved {
			t.Fatalf("%s sees gs-c %q right after its removal, want removed", m.Name(), st)
		}
		if _, ok := m.Reports()["gs-c"]; ok {
			t.Fatalf("%s still holds gs-c's report after its removal", m.Name())
		}
	}
	gsEventually(t, time.Second, "gs-a's removed event", func() (bool, string) {
		for {
			select {
			case ev := <-a.events:
				if ev.Kind == EventRemoved && ev.Member.Name == "gs-c" && ev.Member.State == StateRemoved {
					return true, ""
				}
				continue
			default:
			}
			return false, "no removed event for gs-c"
		}
	})

	// gs-c, still running, publishes again: rejected, never kept, and it stays removed.
	rejected := func() uint64 { return a.Rejected()[ReasonUnknownNode] + b.Rejected()[ReasonUnknownNode] }
	before := rejected()
	gsEventually(t, 5*time.Second, "gs-c's new report rejected", func() (bool, string) {
		if err := c.Publish([]byte(`{"after":"removal"}`)); err != nil {
			return false, err.Error()
		}
		return rejected() > before, fmt.Sprintf("rejected %v / %v", a.Rejected(), b.Rejected())
	})
	for _, m := range []*gsMember{a, b} {
		if _, ok := m.Reports()["gs-c"]; ok {
			t.Fatalf("%s kept a report of the removed gs-c", m.Name())
		}
		if st, _ := gsState(m.Gossip, "gs-c"); st != StateRemoved {
			t.Fatalf("%s sees the removed gs-c %q", m.Name(), st)
		}
	}

	// A member that starts now (a server restarting) learns of gs-c from gs-a's state and never
	// takes it for a peer: memberlist on it does not hold gs-c at all.
	d, err := gsStart(t, reg, "gs-d", ring, []string{a.Addr()}, gsFast, withRevoked)
	if err != nil {
		t.Fatal(err)
	}
	gsAllSee(t, []*gsMember{d}, 5*time.Second, "gs-a", "gs-b")
	for _, n := range d.memberlist().Members() {
		if n.Name == "gs-c" {
			t.Fatalf("gs-d, started after gs-c's removal, holds it as a memberlist peer (%s)", n.Address())
		}
	}
	if st, ok := gsState(d.Gossip, "gs-c"); ok {
		t.Fatalf("gs-d sees the removed gs-c as %q", st)
	}

	// Its agent stops, and comes back with its revoked key and the view it had: refused as a peer.
	_ = c.Shutdown()
	stale := func(node string) (ed25519.PublicKey, bool) {
		if node == "gs-c" {
			return oldKey.Public().(ed25519.PublicKey), true
		}
		return reg.verify(node)
	}
	back, err := gsStart(t, reg, "gs-c", ring, []string{a.Addr()}, gsFast, samePort, func(c *Config) {
		c.Identity, c.Verify = oldKey, stale
	})
	t.Logf("the removed gs-c restarted with its revoked key: %v", err)
	if err == nil {
		// The join's push-pull went through (gs-c took gs-a's state), so gs-a saw gs-c's too.
		gsEventually(t, 5*time.Second, "the restarted gs-c sees gs-a", func() (bool, string) {
			st, _ := gsState(back.Gossip, "gs-a")
			return st == StateAlive, string(st)
		})
	}
	reg.revoke("gs-c") // gsStart enrolled a fresh key for the name; the machine is still the removed one
	if st, _ := gsState(a.Gossip, "gs-c"); st == StateAlive {
		t.Fatalf("the removed gs-c, restarted with its revoked key, is alive again on gs-a")
	}
	if back != nil {
		_ = back.Shutdown()
	}

	// A new machine enrolled under the name, with a new key: a member like any other.
	fresh, err := gsStart(t, reg, "gs-c", ring, []string{a.Addr()}, gsFast, withRevoked, samePort)
	if err != nil {
		t.Fatal(err)
	}
	gsAllSee(t, []*gsMember{a, b, d, fresh}, 10*time.Second, "gs-a", "gs-b", "gs-c", "gs-d")
}
