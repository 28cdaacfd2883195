package gossip

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestReportReachesEveryMemberVerified(t *testing.T) {
	reg := &gsRegistry{}
	ms := gsMesh(t, reg, [][]byte{gsKey(t)}, gsFast, "gs-a", "gs-b", "gs-c")

	small := []byte(`{"firewall":"ufw","held":3}`)
	if err := ms[0].Publish(small); err != nil {
		t.Fatal(err)
	}
	gsEventually(t, 5*time.Second, "gs-a's report reaches gs-b and gs-c", func() (bool, string) {
		for _, m := range ms[1:] {
			r, ok := m.Reports()["gs-a"]
			if !ok || !bytes.Equal(r.Payload, small) {
				return false, fmt.Sprintf("%s has %+v", m.Name(), r)
			}
		}
		return true, ""
	})
	for _, m := range ms[1:] {
		r := m.Reports()["gs-a"]
		if r.Node != "gs-a" || r.Seq == 0 || r.At.IsZero() || r.From == "local" {
			t.Errorf("%s: report %+v", m.Name(), r)
		}
	}
	if r := ms[0].Reports()["gs-a"]; r.From != "local" {
		t.Errorf("gs-a's own report: From %q, want local", r.From)
	}

	// A report too big for a UDP packet travels over TCP, from its node.
	big := fmt.Appendf(nil, `{"held":%q}`, strings.Repeat("x", 20000))
	if err := ms[1].Publish(big); err != nil {
		t.Fatal(err)
	}
	gsEventually(t, 5*time.Second, "gs-b's large report reaches gs-a and gs-c", func() (bool, string) {
		for _, m := range []*gsMember{ms[0], ms[2]} {
			if r := m.Reports()["gs-b"]; !bytes.Equal(r.Payload, big) {
				return false, fmt.Sprintf("%s has %d bytes from %s", m.Name(), len(r.Payload), r.From)
			}
		}
		return true, ""
	})

	// A server joining later (with no Config.Server every member is one) gets every report: from
	// the servers already there, who send what its digest lacks, or from the node itself, asked
	// when the join's push-pull showed a version it did not hold.
	late, err := gsStart(t, reg, "gs-d", [][]byte{ms[0].KeyringList()[0].Key}, []string{ms[2].Addr()}, gsFast)
	if err != nil {
		t.Fatal(err)
	}
	gsEventually(t, 5*time.Second, "the late member has both reports", func() (bool, string) {
		rs := late.Reports()
		return bytes.Equal(rs["gs-a"].Payload, small) && bytes.Equal(rs["gs-b"].Payload, big), fmt.Sprintf("%d reports", len(rs))
	})
	if r := late.Reports()["gs-a"]; r.From != "relay" && r.From != "datagram" {
		t.Errorf("late member got gs-a's report via %q, want relay (the servers' digest) or datagram (gs-a asked)", r.From)
	}
	for _, m := range append(ms, late) {
		if rj := m.Rejected(); len(rj) != 0 {
			t.Errorf("%s rejected genuine reports: %v", m.Name(), rj)
		}
	}
}

// gsInject has m send raw as a report to every other member: what a member
// that holds the gossip key, but not another node's identity, can do. It
// goes over TCP so each member surely gets it (broadcasts are best effort).
func gsInject(t *testing.T, m *gsMember, raw []byte) {
	t.Helper()
	msg := append([]byte{msgReport}, raw...)
	for _, n := range m.ml.Members() {
		if n.Name == m.Name() {
			continue
		}
		if err := m.ml.SendReliable(n, msg); err != nil {
			t.Fatalf("inject to %s: %v", n.Name, err)
		}
	}
}

func TestForgedReportsAreRejected(t *testing.T) {
	reg := &gsRegistry{}
	ms := gsMesh(t, reg, [][]byte{gsKey(t)}, gsFast, "gs-a", "gs-b", "gs-c")
	a, b, c := ms[0], ms[1], ms[2]
	if err := b.Publish([]byte(`{"tunnel":"genuine-b"}`)); err != nil {
		t.Fatal(err)
	}
	gsEventually(t, 5*time.Second, "gs-b's genuine report reaches gs-a", func() (bool, string) {
		return a.Reports()["gs-b"].Payload != nil, ""
	})

	rejectedAt := func(m *gsMember, reason Reason, n uint64) func() (bool, string) {
		return func() (bool, string) {
			got := m.Rejected()
			return got[reason] >= n, fmt.Sprintf("%s rejected %v", m.Name(), got)
		}
	}

	// gs-c, signed by a key it never enrolled with, with a huge sequence
	// number that must not stick.
	_, wrong, _ := ed25519.GenerateKey(rand.Reader)
	forged, err := signEnvelope(wrong, "gs-c", 1<<62, time.Now(), []byte(`{"tunnel":"forged"}`))
	if err != nil {
		t.Fatal(err)
	}
	gsInject(t, c, forged)
	for _, m := range []*gsMember{a, b} {
		gsEventually(t, 5*time.Second, "wrong key rejected", rejectedAt(m, ReasonBadSignature, 1))
		if _, kept := m.Reports()["gs-c"]; kept {
			t.Fatalf("%s kept a report signed by the wrong key", m.Name())
		}
	}
	// The right one after it is still accepted.
	if err := c.Publish([]byte(`{"tunnel":"genuine-c"}`)); err != nil {
		t.Fatal(err)
	}
	for _, m := range []*gsMember{a, b} {
		gsEventually(t, 5*time.Second, "genuine report after a forged one", func() (bool, string) {
			r := m.Reports()["gs-c"]
			return bytes.Equal(r.Payload, []byte(`{"tunnel":"genuine-c"}`)), fmt.Sprintf("%s has %+v", m.Name(), r)
		})
	}

	// gs-c publishes a report naming gs-b, signed with its own (genuine) key.
	imp := envelope{Node: "gs-b", Signer: "gs-c", Seq: 1 << 62, At: time.Now().UnixNano(), Payload: []byte(`{"tunnel":"moved"}`)}
	imp.Sig = ed25519.Sign(c.cfg.Identity, imp.signedBytes())
	raw, _ := json.Marshal(&imp)
	gsInject(t, c, raw)
	// And one naming gs-b as the signer too: gs-c cannot produce gs-b's signature.
	imp.Signer = "gs-b"
	imp.Sig = ed25519.Sign(c.cfg.Identity, imp.signedBytes())
	raw2, _ := json.Marshal(&imp)
	gsInject(t, c, raw2)
	gsEventually(t, 5*time.Second, "impersonation rejected", rejectedAt(a, ReasonImpersonates, 1))
	gsEventually(t, 5*time.Second, "borrowed signer rejected", rejectedAt(a, ReasonBadSignature, 2))
	if got := a.Reports()["gs-b"]; !bytes.Equal(got.Payload, []byte(`{"tunnel":"genuine-b"}`)) {
		t.Fatalf("gs-a holds %q for gs-b, want the genuine report", got.Payload)
	}

	// Truncated and garbled envelopes.
	gsInject(t, c, forged[:len(forged)/2])
	gsEventually(t, 5*time.Second, "truncated rejected", rejectedAt(a, ReasonGarbled, 1))
	t.Logf("gs-a rejected: %v", a.Rejected())
}

// gsBare is a Gossip with no network: enough to drive receive directly.
func gsBare(reg *gsRegistry, name string, onReject func(Rejection)) *Gossip {
	return &Gossip{
		cfg:       Config{Name: name, Verify: reg.verify, OnReject: onReject},
		log:       slog.New(slog.DiscardHandler),
		members:   map[string]*Member{},
		store:     newReportStore(),
		rejected:  map[Reason]uint64{},
		intents:   map[string]time.Time{},
		lastLeave: map[string]int64{},
	}
}

func TestVerifyReport(t *testing.T) {
	reg := &gsRegistry{}
	keyA := reg.enrol(t, "gs-a")
	keyB := reg.enrol(t, "gs-b")
	_, stranger, _ := ed25519.GenerateKey(rand.Reader)
	now := time.Now()
	good, _ := signEnvelope(keyA, "gs-a", 7, now, []byte(`{"x":1}`))

	flip := bytes.Clone(good)
	i := bytes.Index(flip, []byte(`"payload":"`)) + len(`"payload":"`)
	flip[i] ^= 0x01 // still valid base64 → a different payload under the same signature

	ghost, _ := signEnvelope(stranger, "gs-ghost", 1, now, nil)
	wrongKey, _ := signEnvelope(keyB, "gs-a", 8, now, nil)
	imp := envelope{Node: "gs-a", Signer: "gs-b", Seq: 9, At: now.UnixNano()}
	imp.Sig = ed25519.Sign(keyB, imp.signedBytes())
	impRaw, _ := json.Marshal(&imp)
	noSig := envelope{Node: "gs-a", Signer: "gs-a", Seq: 9}
	noSigRaw, _ := json.Marshal(&noSig)

	for _, tc := range []struct {
		name string
		raw  []byte
		want Reason
	}{
		{"good", good, ""},
		{"truncated", good[:len(good)-10], ReasonGarbled},
		{"empty", nil, ReasonGarbled},
		{"not json", []byte("\x00\x01garbage"), ReasonGarbled},
		{"trailing data", append(bytes.Clone(good), []byte(`{}`)...), ReasonGarbled},
		{"unknown field", []byte(strings.Replace(string(good), `{"node"`, `{"extra":1,"node"`, 1)), ReasonGarbled},
		{"no signature", noSigRaw, ReasonGarbled},
		{"payload changed", flip, ReasonBadSignature},
		{"wrong key", wrongKey, ReasonBadSignature},
		{"unknown node", ghost, ReasonUnknownNode},
		{"another node's name", impRaw, ReasonImpersonates},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, reason, err := verifyReport(tc.raw, reg.verify)
			if reason != tc.want {
				t.Fatalf("reason %q (%v), want %q", reason, err, tc.want)
			}
			if tc.want == "" {
				if err != nil || r.Node != "gs-a" || r.Seq != 7 || !r.At.Equal(time.Unix(0, now.UnixNano())) || string(r.Payload) != `{"x":1}` {
					t.Fatalf("got %+v, %v", r, err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error for a rejection")
			}
			t.Logf("%v", err)
		})
	}
}

func TestOlderSequenceNeverReplacesNewer(t *testing.T) {
	reg := &gsRegistry{}
	key := reg.enrol(t, "gs-a")
	var mu sync.Mutex
	var rejections []Rejection
	g := gsBare(reg, "gs-b", func(r Rejection) { mu.Lock(); rejections = append(rejections, r); mu.Unlock() })

	newer, _ := signEnvelope(key, "gs-a", 20, time.Now(), []byte("new"))
	older, _ := signEnvelope(key, "gs-a", 10, time.Now(), []byte("old"))
	if _, kept := g.receive(newer, "broadcast"); !kept {
		t.Fatal("newer report not kept")
	}
	if _, kept := g.receive(older, "push-pull"); kept {
		t.Fatal("older report replaced a newer one")
	}
	if _, kept := g.receive(newer, "broadcast"); kept {
		t.Fatal("the same report kept twice")
	}
	if r := g.Reports()["gs-a"]; r.Seq != 20 || string(r.Payload) != "new" {
		t.Fatalf("held %+v, want seq 20", r)
	}
	if len(rejections) != 0 {
		t.Fatalf("stale or duplicate reports counted as rejections: %v", rejections)
	}

	// A garbled push-pull state is one rejection, and changes nothing.
	(*delegate)(g).MergeRemoteState([]byte{stateVersion, '{', 'x'}, false)
	if g.Rejected()[ReasonGarbled] != 1 || len(rejections) != 1 || rejections[0].From != "push-pull" {
		t.Fatalf("garbled state: rejected %v, %v", g.Rejected(), rejections)
	}

	// Our own report from an earlier life pushes our sequence above it.
	self := reg.enrol(t, "gs-b")
	g.cfg.Identity = self
	ahead, _ := signEnvelope(self, "gs-b", 1<<62, time.Now(), []byte("before restart"))
	g.receive(ahead, "push-pull")
	if err := g.Publish([]byte("after restart")); err != nil {
		t.Fatal(err)
	}
	if r := g.Reports()["gs-b"]; r.Seq <= 1<<62 || string(r.Payload) != "after restart" {
		t.Fatalf("after restart: %+v, want a seq above the earlier life's", r)
	}
}

func BenchmarkVerifyReport(b *testing.B) {
	reg := &gsRegistry{}
	key := reg.enrol(b, "gs-a")
	payload := bytes.Repeat([]byte(`{"held":"/etc/app/conf.yaml","changed":false},`), 80) // ~4 KiB, a busy host
	raw, err := signEnvelope(key, "gs-a", 1, time.Now(), payload)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if _, reason, err := verifyReport(raw, reg.verify); err != nil {
			b.Fatal(reason, err)
		}
	}
}
