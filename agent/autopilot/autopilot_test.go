package autopilot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// fakeRaft is the leader's Raft configuration in memory; it records what the autopilot asked.
type fakeRaft struct {
	servers []raft.Server
	commit  uint64
	calls   []string
}

func (f *fakeRaft) IsLeader() bool                        { return true }
func (f *fakeRaft) Configuration() ([]raft.Server, error) { return slices.Clone(f.servers), nil }
func (f *fakeRaft) CommitIndex() uint64                   { return f.commit }

func (f *fakeRaft) AddNonvoter(id, addr string, _ time.Duration) error {
	f.calls = append(f.calls, "add-nonvoter "+id)
	f.servers = append(f.servers, raft.Server{Suffrage: raft.Nonvoter, ID: raft.ServerID(id), Address: raft.ServerAddress(addr)})
	return nil
}

func (f *fakeRaft) AddVoter(id, addr string, _ time.Duration) error {
	f.calls = append(f.calls, "add-voter "+id)
	for i := range f.servers {
		if f.servers[i].ID == raft.ServerID(id) {
			f.servers[i].Suffrage = raft.Voter
		}
	}
	return nil
}

func (f *fakeRaft) RemoveServer(id string, _ time.Duration) error {
	f.calls = append(f.calls, "remove "+id)
	f.servers = slices.DeleteFunc(f.servers, func(s raft.Server) bool { return s.ID == raft.ServerID(id) })
	return nil
}

func (f *fakeRaft) TransferLeadership(id, addr string) error {
	f.calls = append(f.calls, "transfer "+id+" "+addr)
	return nil
}

// fakeRecord is the record's servers and the bus's answers: applied by server name, absent when
// the server does not answer.
type fakeRecord struct {
	servers []Server
	removed map[string]bool
	control string
	applied map[string]uint64
}

func (r *fakeRecord) Servers() ([]Server, map[string]bool, string) {
	return r.servers, r.removed, r.control
}
func (r *fakeRecord) ControlNode() string { return r.control }

func (r *fakeRecord) Applied(_ context.Context, s Server) (uint64, error) {
	a, ok := r.applied[s.Name]
	if !ok {
		return 0, errors.New("no answer")
	}
	return a, nil
}

func srv(name string) Server { return Server{Name: name, ID: name + "-id", RaftAddr: name + ":8071"} }

func member(name string, suffrage raft.ServerSuffrage) raft.Server {
	return raft.Server{Suffrage: suffrage, ID: raft.ServerID(name + "-id"), Address: raft.ServerAddress(name + ":8071")}
}

// bed is an autopilot on server self over fakes, with a clock the test moves.
type bed struct {
	ap   *Autopilot
	raft *fakeRaft
	rec  *fakeRecord
	now  time.Time
}

func newBed(self string, r *fakeRaft, rec *fakeRecord) *bed {
	b := &bed{raft: r, rec: rec, now: time.Unix(1_700_000_000, 0)}
	b.ap = New(Config{Name: self, ID: self + "-id", Raft: r, Record: rec, Asker: rec,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	b.ap.now = func() time.Time { return b.now }
	return b
}

// pass makes a pass after d more time, and says what the autopilot asked of Raft in it.
func (b *bed) pass(d time.Duration) []string {
	b.now = b.now.Add(d)
	b.raft.calls = nil
	b.ap.Pass(context.Background())
	return b.raft.calls
}

// A non-voter is promoted once it has been current for Stabilization, not before.
func TestPromotesAfterStable(t *testing.T) {
	r := &fakeRaft{servers: []raft.Server{member("hub", raft.Voter), member("s2", raft.Nonvoter)}, commit: 100}
	b := newBed("hub", r, &fakeRecord{servers: []Server{srv("hub"), srv("s2")}, control: "hub",
		applied: map[string]uint64{"s2": 100 - TrailingEntries}})
	for _, d := range []time.Duration{0, time.Second, Stabilization - time.Second - time.Millisecond} {
		if calls := b.pass(d); len(calls) > 0 {
			t.Fatalf("current for less than %s: %v", Stabilization, calls)
		}
	}
	if calls := b.pass(time.Millisecond); !slices.Equal(calls, []string{"add-voter s2-id"}) {
		t.Fatalf("current for %s: %v, want s2 promoted", Stabilization, calls)
	}
}

// A non-voter whose record lags more than TrailingEntries is not promoted, however long it
// stays; once it lags, its time current starts again.
func TestNoPromotionWhileLagging(t *testing.T) {
	r := &fakeRaft{servers: []raft.Server{member("hub", raft.Voter), member("s2", raft.Nonvoter)}, commit: 100}
	rec := &fakeRecord{servers: []Server{srv("hub"), srv("s2")}, control: "hub",
		applied: map[string]uint64{"s2": 100 - TrailingEntries - 1}}
	b := newBed("hub", r, rec)
	for range 5 {
		if calls := b.pass(time.Second); len(calls) > 0 {
			t.Fatalf("lagging: %v", calls)
		}
	}
	rec.applied["s2"] = 100
	b.pass(time.Second)
	b.pass(time.Second)
	rec.applied["s2"] = 10 // lags again before it was current for Stabilization
	b.pass(500 * time.Millisecond)
	rec.applied["s2"] = 100
	if calls := b.pass(500 * time.Millisecond); len(calls) > 0 {
		t.Fatalf("promoted although it lagged %s ago: %v", 500*time.Millisecond, calls)
	}
	delete(rec.applied, "s2") // does not answer
	if calls := b.pass(3 * time.Second); len(calls) > 0 {
		t.Fatalf("promoted without an answer: %v", calls)
	}
}

// A server the record has and Raft has not is added as a non-voter; one the record no longer
// counts as a server is taken out; the leader never takes out itself.
func TestAddsAndRemovesByTheRecord(t *testing.T) {
	r := &fakeRaft{servers: []raft.Server{member("hub", raft.Voter), member("s3", raft.Voter)}, commit: 100}
	b := newBed("hub", r, &fakeRecord{servers: []Server{srv("hub"), srv("s2")}, control: "hub",
		removed: map[string]bool{"s3-id": true, "hub-id": true}})
	calls := b.pass(0)
	slices.Sort(calls)
	if want := []string{"add-nonvoter s2-id", "remove s3-id"}; !slices.Equal(calls, want) {
		t.Fatalf("calls %v, want %v", calls, want)
	}
	if calls := b.pass(time.Second); len(calls) > 0 {
		t.Fatalf("second pass: %v, want nothing more", calls)
	}
}

// A leader other than the control-node hands leadership back once the control-node is a voter
// and has been current for Stabilization; the why says each step.
func TestLeadsBackToTheControlNode(t *testing.T) {
	r := &fakeRaft{servers: []raft.Server{member("hub", raft.Nonvoter), member("s2", raft.Voter), member("s3", raft.Voter)},
		commit: 100}
	rec := &fakeRecord{servers: []Server{srv("hub"), srv("s2"), srv("s3")}, control: "hub", applied: map[string]uint64{}}
	b := newBed("s2", r, rec)
	if why := b.ap.Why(); !strings.Contains(why, "s2 was elected") {
		t.Fatalf("before a pass: %q", why)
	}
	b.pass(0)
	if why := b.ap.Why(); !strings.Contains(why, "control-node hub is not a voter (yet)") {
		t.Fatalf("hub a non-voter: %q", why)
	}
	r.servers[0].Suffrage = raft.Voter
	b.pass(time.Second)
	if why := b.ap.Why(); !strings.Contains(why, "control-node hub is down or catching up") {
		t.Fatalf("hub not answering: %q", why)
	}
	rec.applied["hub"] = 100
	if calls := b.pass(time.Second); len(calls) > 0 {
		t.Fatalf("hub just current: %v", calls)
	}
	calls := b.pass(Stabilization)
	if want := []string{"transfer hub-id hub:8071"}; !slices.Equal(calls, want) {
		t.Fatalf("hub current for %s: %v, want %v", Stabilization, calls, want)
	}
	if why := b.ap.Why(); !strings.Contains(why, "handing leadership back to control-node hub") {
		t.Fatalf("handing back: %q", why)
	}
}

// Why the leader leads: the control-node leading says so, before its first pass too; a record
// without the control-node among its servers says so.
func TestWhyTheLeaderLeads(t *testing.T) {
	r := &fakeRaft{servers: []raft.Server{member("hub", raft.Voter)}, commit: 1}
	b := newBed("hub", r, &fakeRecord{servers: []Server{srv("hub")}, control: "hub"})
	if why := b.ap.Why(); why != "the control-node leads" {
		t.Fatalf("control-node before a pass: %q", why)
	}
	b.pass(0)
	if why := b.ap.Why(); why != "the control-node leads" {
		t.Fatalf("control-node: %q", why)
	}
	r2 := &fakeRaft{servers: []raft.Server{member("s2", raft.Voter)}, commit: 1}
	b2 := newBed("s2", r2, &fakeRecord{servers: []Server{srv("s2")}, control: "gone"})
	b2.pass(0)
	if want := fmt.Sprintf("the record names no control-node server (%q); s2 leads", "gone"); b2.ap.Why() != want {
		t.Fatalf("no control-node server: %q, want %q", b2.ap.Why(), want)
	}
}
