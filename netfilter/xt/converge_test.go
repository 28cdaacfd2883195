package xt

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"meshd/netfilter"
)

// fakeXT is iptables-nft with one filter table in memory, as a Runner: iptables-save prints
// it, iptables-restore --noflush applies -D and -I lines to it. failRestore makes the next
// restore return an error, after applying it when commitOnFail is set. six is ip6tables-nft's
// table, the same kind of fake (its own six unused); saves counts the reads of each table.
type fakeXT struct {
	chains       []string
	rules        []Rule
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
			if i := slices.IndexFunc(f.rules, func(r Rule) bool { return r.Line == line }); i >= 0 {
				f.rules = slices.Delete(f.rules, i, i+1)
			}
		case strings.HasPrefix(l, "-I "):
			fl := strings.Fields(l) // -I CHAIN 1 args...
			line := "-A " + fl[1] + " " + strings.Join(fl[3:], " ")
			at := slices.IndexFunc(f.rules, func(r Rule) bool { return r.Chain == fl[1] })
			if at < 0 {
				at = len(f.rules)
			}
			f.rules = slices.Insert(f.rules, at, Rule{Chain: fl[1], Line: line, Mark: markIn(line)})
		}
	}
}

func (f *fakeXT) add(chain, line string) {
	line = "-A " + chain + " " + line
	f.rules = append(f.rules, Rule{Chain: chain, Line: line, Mark: markIn(line)})
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
	priv := netfilter.Private{Interface: "wg0", Range: netip.MustParsePrefix("10.99.0.0/16")}
	web := netfilter.Opening{Module: "web", Proto: "tcp", Port: 7000, From: netfilter.FromAnywhere, Path: netfilter.PathIncoming}
	store := netfilter.Opening{Module: "store", Proto: "tcp", Port: 7001, From: netfilter.FromPrivate, Path: netfilter.PathIncoming}
	app := netfilter.Opening{Module: "app", Proto: "tcp", Port: 8080, From: netfilter.FromAnywhere, Path: netfilter.PathForwarded}
	found := func(f *fakeXT) []string {
		var out []string
		for _, r := range append(slices.Clone(f.rules), f.six.rules...) {
			if r.Mark == "" {
				out = append(out, r.Line)
			}
		}
		return out
	}
	converge := func(t *testing.T, f *fakeXT, want ...netfilter.Opening) netfilter.Report {
		t.Helper()
		d := New(netfilter.Env{Runner: f}, priv, "nft")
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
			if o.State != netfilter.InForce {
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
		args, _ := openingArgs(web, priv, false)
		f.add("INPUT", args)
		f.add("INPUT", args)
		old, _ := openingArgs(app, priv, false)
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
			if o.State != netfilter.InForce {
				t.Fatalf("%s: %s (%s)", o.Opening, o.State, o.Reason)
			}
		}
	})

	t.Run("a failed batch that did not commit fails its openings", func(t *testing.T) {
		f := newFakeXT()
		f.failRestore = true
		r := converge(t, f, web)
		if r.Added != 0 || len(r.Openings) != 1 || r.Openings[0].State != netfilter.Failed || !strings.Contains(r.Openings[0].Reason, "line 3 failed") {
			t.Fatalf("after a failed batch: %+v", r)
		}
		if r = converge(t, f, web); r.Added != 1 || r.Openings[0].State != netfilter.InForce {
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
		v6only := netfilter.Opening{Module: "v6", Proto: "tcp", Port: 7002, From: "2001:db8::/32", Path: netfilter.PathIncoming}
		v4only := netfilter.Opening{Module: "v4", Proto: "udp", Port: 7003, From: "192.0.2.0/24", Path: netfilter.PathIncoming}
		r := converge(t, f, web, store, app, v6only, v4only)
		// IPv4: web, store, app (DOCKER-USER), v4; IPv6: web, app (DOCKER-USER and the proxy's
		// INPUT), v6. The private network's range is IPv4: store has no IPv6 twin.
		if r.Added != 8 || len(f.restores) != 1 || len(f.six.restores) != 1 {
			t.Fatalf("first converge: %d added in %d+%d restores; want 8 in 1+1", r.Added, len(f.restores), len(f.six.restores))
		}
		for _, o := range r.Openings {
			if o.State != netfilter.InForce {
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
		f.six.rules = slices.DeleteFunc(f.six.rules, func(r Rule) bool { return r.Mark == "" && r.Chain == "INPUT" })
		r = converge(t, f, web, store, v6only, v4only)
		if r.Removed != 2 || len(f.six.rules) != 1 {
			t.Fatalf("ip6tables flushed: %d removed, %d rules left in it; want 2 and Docker's RETURN", r.Removed, len(f.six.rules))
		}
		for _, o := range r.Openings {
			if o.State != netfilter.InForce {
				t.Fatalf("%s: %s (%s)", o.Opening, o.State, o.Reason)
			}
		}
	})

	t.Run("an IPv6 batch that fails fails its openings", func(t *testing.T) {
		f := newFakeXT6()
		f.six.failRestore = true
		r := converge(t, f, web, store)
		states := map[string]netfilter.OpeningState{}
		for _, o := range r.Openings {
			states[o.Opening.Module] = o
		}
		if states["web"].State != netfilter.Failed || !strings.Contains(states["web"].Reason, "ip6tables-nft-restore") || states["store"].State != netfilter.InForce {
			t.Fatalf("after a failed IPv6 batch: %+v", r.Openings)
		}
		if r = converge(t, f, web, store); r.Added != 1 || f.six.count(web.Mark()) != 1 {
			t.Fatalf("the next pass: %+v", r)
		}
	})

	t.Run("an opening that cannot be written fails alone", func(t *testing.T) {
		f := newFakeXT()
		d := New(netfilter.Env{Runner: f}, netfilter.Private{}, "nft")
		r, err := d.Converge(ctx, []netfilter.Opening{web, store})
		if err != nil {
			t.Fatal(err)
		}
		states := map[string]netfilter.State{}
		for _, o := range r.Openings {
			states[o.Opening.Module] = o.State
		}
		if r.Added != 1 || states["web"] != netfilter.InForce || states["store"] != netfilter.Failed {
			t.Fatalf("with no private network known: %d added, states %v", r.Added, states)
		}
	})
}
