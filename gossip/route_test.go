package gossip

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"
)

// Reports go where they are read: in a mesh of two servers and four clients, each publishing
// (small reports in a datagram, one too large for it over TCP), every server holds all six
// reports and each client its own alone; no client sent a report but its own, none received
// another client's, and a member's push-pull state is its report's version, a few bytes. A
// server that joins later has every report from the other server, and a client that hears an
// older member's push-pull (every report it holds) keeps none of the others. A member with the
// gossip key sending digests in a server's name has every report sent once, not ten times.
func TestReportsGoToTheServersOnly(t *testing.T) {
	reg := &gsRegistry{}
	servers := map[string]bool{"srv-1": true, "srv-2": true, "srv-3": true}
	isServer := func(c *Config) { c.Server = func(n string) bool { return servers[n] } }
	names := []string{"srv-1", "cl-1", "cl-2", "cl-3", "cl-4", "srv-2"}
	ring := [][]byte{gsKey(t)}
	var ms []*gsMember
	for i, name := range names {
		var join []string
		if i > 0 {
			join = []string{ms[0].Addr()}
		}
		m, err := gsStart(t, reg, name, ring, join, gsFast, isServer)
		if err != nil {
			t.Fatalf("start %s: %v", name, err)
		}
		ms = append(ms, m)
	}
	gsAllSee(t, ms, 10*time.Second, names...)
	for i, m := range ms {
		payload := fmt.Appendf(nil, `{"node":%q}`, m.Name())
		if i == 2 {
			payload = fmt.Appendf(nil, `{"node":%q,"pad":%q}`, m.Name(), strings.Repeat("x", 4000))
		}
		if err := m.Publish(payload); err != nil {
			t.Fatal(err)
		}
	}
	holds := func(m *gsMember) string {
		var out []string
		for n := range m.Reports() {
			out = append(out, n)
		}
		sort.Strings(out)
		return strings.Join(out, " ")
	}
	all := "cl-1 cl-2 cl-3 cl-4 srv-1 srv-2"
	gsEventually(t, 10*time.Second, "both servers hold every report", func() (bool, string) {
		for _, m := range []*gsMember{ms[0], ms[5]} {
			if got := holds(m); got != all {
				return false, m.Name() + " holds " + got
			}
		}
		return true, ""
	})

	late, err := gsStart(t, reg, "srv-3", ring, []string{ms[1].Addr()}, gsFast, isServer)
	if err != nil {
		t.Fatal(err)
	}
	gsEventually(t, 10*time.Second, "a server joining later holds every report", func() (bool, string) {
		got := holds(late)
		return got == all+" srv-3" || got == all, "srv-3 holds " + got
	})

	// An older member's push-pull state: every report it holds.
	var old pushPull
	for _, m := range []*gsMember{ms[0], ms[2]} {
		m.mu.Lock()
		for _, st := range m.store.byNode {
			old.Reports = append(old.Reports, st.raw)
		}
		m.mu.Unlock()
	}
	b, _ := json.Marshal(&old)
	(*delegate)(ms[1].Gossip).MergeRemoteState(append([]byte{stateVersion}, b...), false)

	for _, m := range ms[1:5] {
		if got := holds(m); got != m.Name() {
			t.Errorf("client %s holds the reports of %s, want its own only", m.Name(), got)
		}
		if n := m.relayed.Load(); n != 0 {
			t.Errorf("client %s sent %d reports of other nodes", m.Name(), n)
		}
		if st := (*delegate)(m.Gossip).LocalState(false); len(st) > 64 {
			t.Errorf("client %s's push-pull state is %d bytes: %q", m.Name(), len(st), st)
		}
	}
	for _, m := range ms[2:5] {
		if n := m.foreign.Load(); n != 0 {
			t.Errorf("client %s received %d reports of other nodes", m.Name(), n)
		}
	}
	if n := ms[1].foreign.Load(); n == 0 {
		t.Error("cl-1 was handed an older member's every report and counted none as not its own")
	}
	// Stats says the same to a reader outside the package (the fleet simulator).
	if st := ms[1].Stats(); st.ReceivedOthers == 0 || st.HeldOthers != 0 || st.StateIn < 100 {
		t.Errorf("cl-1's stats after an older member's push-pull: %+v, want others received, none held, the state's size", st)
	}
	for _, m := range ms[2:5] {
		if st := m.Stats(); st.ReceivedOthers != 0 || st.HeldOthers != 0 || st.Relayed != 0 || st.Sent == 0 || st.StateOut > 64 {
			t.Errorf("client %s's stats: %+v, want its own report sent and nothing of another node's", m.Name(), st)
		}
	}
	if st := ms[0].Stats(); st.HeldOthers != 5 {
		t.Errorf("server srv-1 holds %d reports of other nodes, want 5: %+v", st.HeldOthers, st)
	}
	// Digests in another server's name, asking for everything, ten times: answered once.
	srv := ms[0]
	srv.mu.Lock()
	delete(srv.answered, "srv-2")
	kept := len(srv.store.byNode)
	srv.mu.Unlock()
	before := srv.relayed.Load()
	forged, _ := json.Marshal(&digest{From: "srv-2", Have: map[string]uint64{}})
	for range 10 {
		srv.receiveDigest(forged)
	}
	if n := srv.relayed.Load() - before; n != uint64(kept) {
		t.Errorf("ten digests asking for every report: %d reports sent, want the %d kept, once", n, kept)
	}

	for _, m := range append(ms, late) {
		if rj := m.Rejected(); len(rj) != 0 {
			t.Errorf("%s rejected genuine reports: %v", m.Name(), rj)
		}
	}
}
