package netfilter

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/nftables"
)

// These tests need no root: plan and the deciding halves of the drivers are pure, and the
// iptables driver is driven through a fake iptables that keeps its filter table in memory.

// rule is a marked rule in a slot; id tells copies apart.
type rule struct {
	s  string
	id int
}

func (r rule) Slot() string { return r.s }

func rules(spec ...string) []rule {
	out := make([]rule, len(spec))
	for i, s := range spec {
		out[i] = rule{s: s, id: i}
	}
	return out
}

func slotsOf(rs []rule) []string {
	out := []string{}
	for _, r := range rs {
		out = append(out, r.s)
	}
	return out
}

func TestPlan(t *testing.T) {
	cases := []struct {
		name               string
		have, want         []rule
		wantAdd, wantRemov []string
		keptIDs            []int // ids of have that stay (not removed)
	}{
		{name: "empty have and want", wantAdd: []string{}, wantRemov: []string{}},
		{name: "empty have", want: rules("b", "a"), wantAdd: []string{"a", "b"}, wantRemov: []string{}},
		{name: "empty want removes every marked rule", have: rules("a", "b"), wantAdd: []string{}, wantRemov: []string{"a", "b"}},
		{name: "nothing to do", have: rules("a", "b", "c"), want: rules("c", "a", "b"), wantAdd: []string{}, wantRemov: []string{}, keptIDs: []int{0, 1, 2}},
		{name: "add and remove", have: rules("a", "b"), want: rules("b", "c"), wantAdd: []string{"c"}, wantRemov: []string{"a"}, keptIDs: []int{1}},
		{name: "every extra copy of a wanted rule goes", have: rules("a", "a", "b", "a"), want: rules("a", "b"),
			wantAdd: []string{}, wantRemov: []string{"a", "a"}, keptIDs: []int{0, 2}},
		{name: "every copy of an unwanted rule goes", have: rules("x", "a", "x", "x"), want: rules("a"),
			wantAdd: []string{}, wantRemov: []string{"x", "x", "x"}, keptIDs: []int{1}},
		{name: "a slot wanted twice is added once", want: rules("a", "a", "b"), wantAdd: []string{"a", "b"}, wantRemov: []string{}},
		{name: "a slot wanted twice and held is left", have: rules("a"), want: rules("a", "a"), wantAdd: []string{}, wantRemov: []string{}, keptIDs: []int{0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			add, remove := Plan(c.have, c.want)
			if got := slotsOf(add); !reflect.DeepEqual(got, c.wantAdd) {
				t.Errorf("add %q, want %q", got, c.wantAdd)
			}
			if got := slotsOf(remove); !reflect.DeepEqual(got, c.wantRemov) {
				t.Errorf("remove %q, want %q", got, c.wantRemov)
			}
			removed := map[int]bool{}
			for _, r := range remove {
				removed[r.id] = true
			}
			var kept []int
			for _, r := range c.have {
				if !removed[r.id] {
					kept = append(kept, r.id)
				}
			}
			if !slices.Equal(kept, c.keptIDs) {
				t.Errorf("kept copies %v, want %v", kept, c.keptIDs)
			}
			// Applying the plan leaves exactly one rule per wanted slot.
			after := HeldSlots(c.have)
			for _, r := range remove {
				after[r.s]--
			}
			for _, w := range add {
				after[w.s]++
			}
			for s := range HeldSlots(c.want) {
				if after[s] != 1 {
					t.Errorf("after applying, slot %s holds %d rules, want 1", s, after[s])
				}
				delete(after, s)
			}
			for s, n := range after {
				if n != 0 {
					t.Errorf("after applying, unwanted slot %s holds %d rules", s, n)
				}
			}
		})
	}
}

func TestPlanOrderIndependent(t *testing.T) {
	have := rules("a", "x", "b", "a", "y", "a", "x")
	want := rules("c", "a", "d", "b", "c")
	add0, rem0 := Plan(have, want)
	// every rotation and the reversal of both inputs
	for i := range have {
		for j := range want {
			for _, rev := range []bool{false, true} {
				h := append(slices.Clone(have[i:]), have[:i]...)
				w := append(slices.Clone(want[j:]), want[:j]...)
				if rev {
					slices.Reverse(h)
					slices.Reverse(w)
				}
				add, rem := Plan(h, w)
				if !reflect.DeepEqual(slotsOf(add), slotsOf(add0)) || !reflect.DeepEqual(slotsOf(rem), slotsOf(rem0)) {
					t.Fatalf("have %v want %v: add %q remove %q; in the first order add %q remove %q",
						slotsOf(h), slotsOf(w), slotsOf(add), slotsOf(rem), slotsOf(add0), slotsOf(rem0))
				}
			}
		}
	}
}

func TestPlanWritten(t *testing.T) {
	have := rules("a", "a", "a", "x", "x")
	want := rules("a", "b", "c")
	add, remove := Plan(have, want) // add b, c; remove a, a, x, x
	cases := []struct {
		name                   string
		after                  []rule
		wantAdded, wantRemoved int
		wantUnheld             []string
	}{
		{"all landed", rules("a", "b", "c"), 2, 4, nil},
		{"nothing landed", have, 0, 0, []string{"b", "c"}},
		{"partly", rules("a", "a", "x", "b"), 1, 2, []string{"c"}},
		{"the kept copy went too", rules("b", "c"), 2, 4, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			added, removed, unheld := Written(c.after, want, add, remove)
			if added != c.wantAdded || removed != c.wantRemoved {
				t.Errorf("written: %d added, %d removed; want %d, %d", added, removed, c.wantAdded, c.wantRemoved)
			}
			if got := slotsOf(unheld); len(got)+len(c.wantUnheld) > 0 && !reflect.DeepEqual(got, c.wantUnheld) {
				t.Errorf("unheld %q, want %q", got, c.wantUnheld)
			}
		})
	}
}

// fakeXT is iptables-nft with one filter table in memory, as a Runner: iptables-save prints
// it, iptables-restore --noflush applies -D and -I lines to it. failRestore makes the next
// restore return an error, after applying it when commitOnFail is set. six is ip6tables-nft's
// table, the same kind of fake (its own six unused); saves counts the reads of each table.
type fakeXT struct {
	chains       []string
	rules        []xtRule
	restores     []string
	saves        int
	failRestore  bool
	commitOnFail bool
	six          *fakeXT
}

func (f *fakeXT) Run(_ context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	switch {
	case name == "sh" && len(args) == 2 && strings.HasPrefix(args[1], "iptables-nft-save -t filter"):
		return f.save(), nil
	case name == "sh" && len(args) == 2 && strings.HasPrefix(args[1], "ip6tables-nft-save -t filter"):
		return f.six.save(), nil
	case name == "iptables-nft-restore" && slices.Equal(args, []string{"--noflush"}):
		return f.restoreCmd(name, stdin)
	case name == "ip6tables-nft-restore" && slices.Equal(args, []string{"--noflush"}):
		return f.six.restoreCmd(name, stdin)
	}
	return nil, fmt.Errorf("fake iptables: %s %s: not known", name, strings.Join(args, " "))
}

func (f *fakeXT) save() []byte {
	f.saves++
	var b strings.Builder
	b.WriteString("*filter\n")
	for _, c := range f.chains {
		fmt.Fprintf(&b, ":%s ACCEPT [0:0]\n", c)
	}
	for _, r := range f.rules {
		b.WriteString(r.Line + "\n")
	}
	b.WriteString("COMMIT\n")
	return []byte(b.String())
}

func (f *fakeXT) restoreCmd(name string, stdin []byte) ([]byte, error) {
	f.restores = append(f.restores, string(stdin))
	fail := f.failRestore
	f.failRestore = false
	if fail && !f.commitOnFail {
		return nil, errors.New(name + ": line 3 failed")
	}
	f.restore(string(stdin))
	if fail {
		return nil, errors.New(name + ": netlink: no buffer space available")
	}
	return nil, nil
}

func (f *fakeXT) restore(script string) {
	for _, l := range strings.Split(script, "\n") {
		switch {
		case strings.HasPrefix(l, "-D "):
			line := "-A" + strings.TrimPrefix(l, "-D")
			if i := slices.IndexFunc(f.rules, func(r xtRule) bool { return r.Line == line }); i >= 0 {
				f.rules = slices.Delete(f.rules, i, i+1)
			}
		case strings.HasPrefix(l, "-I "):
			fl := strings.Fields(l) // -I CHAIN 1 args...
			line := "-A " + fl[1] + " " + strings.Join(fl[3:], " ")
			at := slices.IndexFunc(f.rules, func(r xtRule) bool { return r.Chain == fl[1] })
			if at < 0 {
				at = len(f.rules)
			}
			f.rules = slices.Insert(f.rules, at, xtRule{Chain: fl[1], Line: line, Mark: xtComment(line)})
		}
	}
}

func (f *fakeXT) add(chain, line string) {
	line = "-A " + chain + " " + line
	f.rules = append(f.rules, xtRule{Chain: chain, Line: line, Mark: xtComment(line)})
}

func (f *fakeXT) count(mark string) int {
	n := 0
	for _, r := range f.rules {
		if r.Mark == mark {
			n++
		}
	}
	return n
}

// newFakeXT is a found firewall in iptables alone: ip6tables holds only Docker's empty
// DOCKER-USER, so it filters nothing.
func newFakeXT() *fakeXT {
	f := &fakeXT{chains: []string{"INPUT", "FORWARD", "OUTPUT", "DOCKER-USER"}}
	f.add("INPUT", "-p tcp -m tcp --dport 22 -j ACCEPT") // the found firewall's own
	f.add("INPUT", "-j DROP")
	f.six = &fakeXT{chains: []string{"INPUT", "FORWARD", "OUTPUT", "DOCKER-USER"}}
	f.six.add("DOCKER-USER", "-j RETURN")
	return f
}

// newFakeXT6 is a found firewall in both families: ip6tables holds the same rules as iptables.
func newFakeXT6() *fakeXT {
	f := newFakeXT()
	f.six.add("INPUT", "-p tcp -m tcp --dport 22 -j ACCEPT")
	f.six.add("INPUT", "-j DROP")
	return f
}

func TestPlanIptablesConverge(t *testing.T) {
	ctx := context.Background()
	priv := Private{Interface: "wg0", Range: netip.MustParsePrefix("10.99.0.0/16")}
	web := Opening{Module: "web", Proto: "tcp", Port: 7000, From: FromAnywhere, Path: PathIncoming}
	store := Opening{Module: "store", Proto: "tcp", Port: 7001, From: FromPrivate, Path: PathIncoming}
	app := Opening{Module: "app", Proto: "tcp", Port: 8080, From: FromAnywhere, Path: PathForwarded}
	found := func(f *fakeXT) []string {
		var out []string
		for _, r := range append(slices.Clone(f.rules), f.six.rules...) {
			if r.Mark == "" {
				out = append(out, r.Line)
			}
		}
		return out
	}
	converge := func(t *testing.T, f *fakeXT, want ...Opening) Report {
		t.Helper()
		d, err := NewDriver(Env{Runner: f}, Found{Kind: KindIptables, Backend: "nft"}, priv)
		if err != nil {
			t.Fatal(err)
		}
		before := found(f)
		r, err := d.Converge(ctx, want)
		if err != nil {
			t.Fatal(err)
		}
		if got := found(f); !slices.Equal(got, before) {
			t.Fatalf("the found firewall's rules changed: %q, were %q", got, before)
		}
		return r
	}

	t.Run("one batch, then nothing to do writes nothing", func(t *testing.T) {
		f := newFakeXT()
		r := converge(t, f, web, store, app)
		if r.Added != 3 || r.Removed != 0 || len(f.restores) != 1 {
			t.Fatalf("first converge: %d added, %d removed in %d restores; want 3, 0 in 1", r.Added, r.Removed, len(f.restores))
		}
		for _, o := range r.Openings {
			if o.State != InForce {
				t.Fatalf("%s: %s (%s)", o.Opening, o.State, o.Reason)
			}
		}
		if f.count(app.Mark()) != 1 || !strings.Contains(f.restores[0], "-I DOCKER-USER 1 ") {
			t.Fatalf("the forwarded opening is not in DOCKER-USER: %q", f.restores[0])
		}
		r = converge(t, f, store, app, web)
		if r.Added+r.Removed != 0 || len(f.restores) != 1 {
			t.Fatalf("no-op converge wrote %d added, %d removed in %d more restores", r.Added, r.Removed, len(f.restores)-1)
		}
	})

	t.Run("every extra copy of a marked rule goes in one pass", func(t *testing.T) {
		f := newFakeXT()
		converge(t, f, web, store)
		args, _ := xtOpeningArgs(web, priv, false)
		f.add("INPUT", args)
		f.add("INPUT", args)
		old, _ := xtOpeningArgs(app, priv, false)
		f.add("FORWARD", old) // a marked rule no opening wants any more
		f.add("FORWARD", old)
		r := converge(t, f, web, store)
		if r.Added != 0 || r.Removed != 4 || len(f.restores) != 2 {
			t.Fatalf("converge over copies: %d added, %d removed in %d restores; want 0, 4 in 2", r.Added, r.Removed, len(f.restores))
		}
		if f.count(web.Mark()) != 1 || f.count(store.Mark()) != 1 || f.count(app.Mark()) != 0 {
			t.Fatalf("after: %d web, %d store, %d app rules; want 1, 1, 0", f.count(web.Mark()), f.count(store.Mark()), f.count(app.Mark()))
		}
		if r = converge(t, f, web, store); r.Added+r.Removed != 0 {
			t.Fatalf("second pass wrote %d added, %d removed", r.Added, r.Removed)
		}
	})

	t.Run("a failed batch that committed is read back as written", func(t *testing.T) {
		f := newFakeXT()
		f.failRestore, f.commitOnFail = true, true
		r := converge(t, f, web, app)
		if r.Added != 2 {
			t.Fatalf("after a failed batch that committed: %d added, want 2", r.Added)
		}
		for _, o := range r.Openings {
			if o.State != InForce {
				t.Fatalf("%s: %s (%s)", o.Opening, o.State, o.Reason)
			}
		}
	})

	t.Run("a failed batch that did not commit fails its openings", func(t *testing.T) {
		f := newFakeXT()
		f.failRestore = true
		r := converge(t, f, web)
		if r.Added != 0 || len(r.Openings) != 1 || r.Openings[0].State != Failed || !strings.Contains(r.Openings[0].Reason, "line 3 failed") {
			t.Fatalf("after a failed batch: %+v", r)
		}
		if r = converge(t, f, web); r.Added != 1 || r.Openings[0].State != InForce {
			t.Fatalf("the next pass: %+v", r)
		}
	})

	t.Run("ip6tables that filters nothing is read once and never written", func(t *testing.T) {
		f := newFakeXT()
		converge(t, f, web, store, app)
		converge(t, f, web, store, app)
		if len(f.six.restores) != 0 || f.six.saves != 2 {
			t.Fatalf("ip6tables: %d restores, %d reads in two passes; want 0, 2", len(f.six.restores), f.six.saves)
		}
	})

	t.Run("both families: each opening has its IPv6 twin, and goes from both", func(t *testing.T) {
		f := newFakeXT6()
		v6only := Opening{Module: "v6", Proto: "tcp", Port: 7002, From: "2001:db8::/32", Path: PathIncoming}
		v4only := Opening{Module: "v4", Proto: "udp", Port: 7003, From: "192.0.2.0/24", Path: PathIncoming}
		r := converge(t, f, web, store, app, v6only, v4only)
		// IPv4: web, store, app (DOCKER-USER), v4; IPv6: web, app (DOCKER-USER and the proxy's
		// INPUT), v6. The private network's range is IPv4: store has no IPv6 twin.
		if r.Added != 8 || len(f.restores) != 1 || len(f.six.restores) != 1 {
			t.Fatalf("first converge: %d added in %d+%d restores; want 8 in 1+1", r.Added, len(f.restores), len(f.six.restores))
		}
		for _, o := range r.Openings {
			if o.State != InForce {
				t.Fatalf("%s: %s (%s)", o.Opening, o.State, o.Reason)
			}
		}
		four, six := f.restores[0], f.six.restores[0]
		for _, line := range []string{
			`-I INPUT 1 -p tcp -m tcp --dport 7000 -m comment --comment "` + web.Mark() + `" -j ACCEPT`,
			`-I DOCKER-USER 1 -p tcp -m conntrack --ctorigdstport 8080 -m comment --comment "` + app.Mark() + `" -j ACCEPT`,
			`-I INPUT 1 -p tcp -m tcp --dport 8080 -m comment --comment "` + app.Mark() + `" -j ACCEPT`,
			`-I INPUT 1 -p tcp -s 2001:db8::/32 -m tcp --dport 7002 -m comment --comment "` + v6only.Mark() + `" -j ACCEPT`,
		} {
			if !strings.Contains(six, line+"\n") {
				t.Errorf("ip6tables-restore lacks %q:\n%s", line, six)
			}
		}
		if strings.Contains(six, "10.99.") || strings.Contains(six, store.Mark()) || strings.Contains(six, v4only.Mark()) {
			t.Errorf("an IPv4 source in ip6tables:\n%s", six)
		}
		if strings.Contains(four, "2001:db8") || strings.Contains(four, "-I INPUT 1 -p tcp -m tcp --dport 8080") {
			t.Errorf("an IPv6 source, or the proxy's rule, in iptables:\n%s", four)
		}
		if !strings.Contains(four, `-I INPUT 1 -p tcp -s 10.99.0.0/16 -i wg0 -m tcp --dport 7001 -m comment --comment "`+store.Mark()+`" -j ACCEPT`) {
			t.Errorf("iptables-restore lacks store's rule:\n%s", four)
		}

		// Nothing to do: one read of each family, nothing written.
		reads4, reads6 := f.saves, f.six.saves
		if r = converge(t, f, web, store, app, v6only, v4only); r.Added+r.Removed != 0 || len(f.restores)+len(f.six.restores) != 2 {
			t.Fatalf("no-op converge wrote %d added, %d removed", r.Added, r.Removed)
		}
		if f.saves-reads4 != 1 || f.six.saves-reads6 != 1 {
			t.Fatalf("no-op converge read iptables %d times and ip6tables %d; want once each", f.saves-reads4, f.six.saves-reads6)
		}

		// The forwarded opening unassigned goes from both tables, all three rules.
		r = converge(t, f, web, store, v6only, v4only)
		if r.Removed != 3 || f.count(app.Mark())+f.six.count(app.Mark()) != 0 {
			t.Fatalf("removing the forwarded opening: %d removed, %d+%d rules left", r.Removed, f.count(app.Mark()), f.six.count(app.Mark()))
		}

		// ip6tables no longer filtering (its rules flushed): the IPv6 twins go too, and the
		// openings stay in force (IPv6 is open as the found firewall leaves it).
		f.six.rules = slices.DeleteFunc(f.six.rules, func(r xtRule) bool { return r.Mark == "" && r.Chain == "INPUT" })
		r = converge(t, f, web, store, v6only, v4only)
		if r.Removed != 2 || len(f.six.rules) != 1 {
			t.Fatalf("ip6tables flushed: %d removed, %d rules left in it; want 2 and Docker's RETURN", r.Removed, len(f.six.rules))
		}
		for _, o := range r.Openings {
			if o.State != InForce {
				t.Fatalf("%s: %s (%s)", o.Opening, o.State, o.Reason)
			}
		}
	})

	t.Run("an IPv6 batch that fails fails its openings", func(t *testing.T) {
		f := newFakeXT6()
		f.six.failRestore = true
		r := converge(t, f, web, store)
		states := map[string]OpeningState{}
		for _, o := range r.Openings {
			states[o.Opening.Module] = o
		}
		if states["web"].State != Failed || !strings.Contains(states["web"].Reason, "ip6tables-nft-restore") || states["store"].State != InForce {
			t.Fatalf("after a failed IPv6 batch: %+v", r.Openings)
		}
		if r = converge(t, f, web, store); r.Added != 1 || f.six.count(web.Mark()) != 1 {
			t.Fatalf("the next pass: %+v", r)
		}
	})

	t.Run("an opening that cannot be written fails alone", func(t *testing.T) {
		f := newFakeXT()
		d, _ := NewDriver(Env{Runner: f}, Found{Kind: KindIptables, Backend: "nft"}, Private{})
		r, err := d.Converge(ctx, []Opening{web, store})
		if err != nil {
			t.Fatal(err)
		}
		states := map[string]State{}
		for _, o := range r.Openings {
			states[o.Opening.Module] = o.State
		}
		if r.Added != 1 || states["web"] != InForce || states["store"] != Failed {
			t.Fatalf("with no private network known: %d added, states %v", r.Added, states)
		}
	})
}

// The IPv6 twin ufw keeps in user6.rules of a rule from anywhere is the same ufw rule, not a
// copy to remove; a stale rule under a mark is.
func TestPlanUFWTuples(t *testing.T) {
	web := Opening{Module: "web", Proto: "tcp", Port: 7000, From: FromAnywhere, Path: PathIncoming}
	v6 := Opening{Module: "v6", Proto: "tcp", Port: 7002, From: "2001:db8::/32", Path: PathIncoming}
	priv := Private{Interface: "wg0", Range: netip.MustParsePrefix("10.99.0.0/16")}
	store := Opening{Module: "store", Proto: "tcp", Port: 7001, From: FromPrivate, Path: PathIncoming}
	want, keys, err := Dedupe([]Opening{web, v6, store})
	if err != nil {
		t.Fatal(err)
	}
	text := func(o Opening) string { s, _ := ufwTupleText(o, priv); return s }
	tuples := []ufwTuple{
		{Text: "allow tcp 22 0.0.0.0/0 any 0.0.0.0/0 in"}, // the found firewall's own
		{Text: text(web), Comment: web.Mark()},
		{Text: text(v6), Comment: v6.Mark()},
		{Text: "allow tcp 7001 0.0.0.0/0 any 10.1.0.0/16 in_wg0", Comment: store.Mark()}, // an old private range
		{Text: "allow tcp 22 ::/0 any ::/0 in"},
		{Text: strings.ReplaceAll(text(web), "0.0.0.0/0", "::/0"), Comment: web.Mark()},
	}
	wantRules, heldBy, failed := ufwWant(tuples, want, keys, priv, true)
	if len(heldBy)+len(failed) != 0 {
		t.Fatalf("held by %v, failed %v", heldBy, failed)
	}
	add, remove := Plan(markedTuples(tuples), wantRules)
	if len(add) != 1 || add[0] != (ufwMarked{store.Mark(), text(store)}) {
		t.Fatalf("add %v, want only store's rule on the current range", add)
	}
	if len(remove) != 1 || remove[0].text != "allow tcp 7001 0.0.0.0/0 any 10.1.0.0/16 in_wg0" {
		t.Fatalf("remove %v, want only store's rule on the old range", remove)
	}

	// An opening the found firewall already allows needs no rule; nor does a second opening
	// with the same tuple.
	ssh := Opening{Module: "ssh", Proto: "tcp", Port: 22, From: FromAnywhere, Path: PathIncoming}
	www := web
	www.Module = "www"
	want, keys, _ = Dedupe([]Opening{ssh, www, web})
	wantRules, heldBy, _ = ufwWant(tuples, want, keys, priv, true)
	if len(wantRules) != 1 || wantRules[0].mark != web.Mark() || heldBy[ssh.Mark()] == "" || heldBy[www.Mark()] == "" {
		t.Fatalf("rules %v, held by %v", wantRules, heldBy)
	}
}

// A chain of a family an opening's source cannot be matched in needs no rule, so it is never
// planned as missing (and the opening never reported restored for it).
func TestPlanNftWant(t *testing.T) {
	ip := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: "f4"}
	inet := &nftables.Table{Family: nftables.TableFamilyINet, Name: "f"}
	v := &nftView{input: []*nftables.Chain{{Table: ip, Name: "input"}, {Table: inet, Name: "input"}}}
	v6 := Opening{Module: "v6", Proto: "tcp", Port: 7002, From: "2001:db8::/32", Path: PathIncoming}
	web := Opening{Module: "web", Proto: "tcp", Port: 7000, From: FromAnywhere, Path: PathIncoming}
	app := Opening{Module: "app", Proto: "tcp", Port: 8080, From: FromAnywhere, Path: PathForwarded}
	store := Opening{Module: "store", Proto: "tcp", Port: 7001, From: FromPrivate, Path: PathIncoming}
	want, keys, _ := Dedupe([]Opening{v6, web, app, store})
	got, unfiltered := nftWant(v, want, keys, Private{})
	var slots []string
	for _, w := range got {
		s := w.Slot()
		if w.err != nil {
			s += " (error)"
		}
		slots = append(slots, s)
	}
	wantSlots := []string{
		"ip/f4/input/" + store.Mark() + " (error)", "inet/f/input/" + store.Mark() + " (error)",
		"inet/f/input/" + v6.Mark(),
		"ip/f4/input/" + web.Mark(), "inet/f/input/" + web.Mark(),
	}
	if !slices.Equal(slots, wantSlots) {
		t.Fatalf("wanted slots\n%q\nwant\n%q", slots, wantSlots)
	}
	if !unfiltered[app.Mark()] || len(unfiltered) != 1 {
		t.Fatalf("unfiltered %v, want only app's", unfiltered)
	}
}

// A forwarded opening through ufw also needs an IPv6 `ufw allow` at the input path, for Docker's
// proxy: from the opening's sources (none from an IPv4 range), only where ufw keeps IPv6 rules,
// none where a rule from anywhere already lets that port in at the input path in both families.
// Its command is IPv6 alone (ufw reads "from any" as both).
func TestPlanUFWProxyTuple(t *testing.T) {
	priv := Private{Interface: "wg0", Range: netip.MustParsePrefix("10.99.0.0/16")}
	app := Opening{Module: "app", Proto: "tcp", Port: 8080, From: FromAnywhere, Path: PathForwarded}
	office := Opening{Module: "office", Proto: "tcp", Port: 8081, From: "2001:db8:7::/48", Path: PathForwarded}
	lan := Opening{Module: "lan", Proto: "tcp", Port: 8082, From: "198.51.100.0/24", Path: PathForwarded}
	store := Opening{Module: "store", Proto: "tcp", Port: 6379, From: FromPrivate, Path: PathForwarded}
	web := Opening{Module: "web", Proto: "tcp", Port: 9000, From: FromAnywhere, Path: PathForwarded}
	webIn := Opening{Module: "webin", Proto: "tcp", Port: 9000, From: FromAnywhere, Path: PathIncoming}
	want, keys, err := Dedupe([]Opening{app, office, lan, store, web, webIn})
	if err != nil {
		t.Fatal(err)
	}
	rules, _, failed := ufwWant(nil, want, keys, priv, true)
	if len(failed) != 0 {
		t.Fatalf("failed %v", failed)
	}
	var got []string
	for _, r := range rules {
		got = append(got, r.mark+" "+r.text)
	}
	for _, w := range []string{
		app.Mark() + " allow tcp 8080 ::/0 any ::/0 in",
		office.Mark() + " allow tcp 8081 ::/0 any 2001:db8:7::/48 in",
	} {
		if !slices.Contains(got, w) {
			t.Errorf("no proxy tuple %q in %q", w, got)
		}
	}
	for _, r := range got {
		if strings.HasPrefix(r, lan.Mark()+" allow") || strings.HasPrefix(r, store.Mark()+" allow") || strings.HasPrefix(r, web.Mark()+" allow") {
			t.Errorf("a proxy tuple that matches no IPv6 packet, or one a rule from anywhere already carries: %q", r)
		}
	}
	if len(rules) != 8 { // six openings' own, two proxy tuples
		t.Errorf("rules %q, want 8", got)
	}
	if rules, _, _ := ufwWant(nil, want, keys, priv, false); len(rules) != 6 {
		t.Errorf("with IPV6=no: %d rules, want only the openings' own 6", len(rules))
	}
	args, err := ufwArgs("allow tcp 8080 ::/0 any ::/0 in", false)
	if err != nil || strings.Join(args, " ") != "allow proto tcp from ::/0 to any port 8080" {
		t.Errorf("ufw args of the proxy tuple: %q %v", args, err)
	}
	args, _ = ufwArgs("allow tcp 8080 0.0.0.0/0 any 0.0.0.0/0 in", true)
	if strings.Join(args, " ") != "delete allow proto tcp from any to any port 8080" {
		t.Errorf("ufw args of a rule from anywhere: %q", args)
	}
}
