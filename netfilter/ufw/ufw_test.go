package ufw_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"meshd/internal/testenv"
	"meshd/netfilter"
	"meshd/netfilter/firewall"
	"meshd/netfilter/internal/nflab"
	"meshd/netfilter/ufw"
)

// ufwState is the found ufw as a person would compare it: its rule tuples, and the kernel's
// filter table outside the chains ufw derives from those tuples.
func ufwState(l *nflab.Lab) (tuples, kernel string) {
	tuples = l.Sh("grep -h '^### tuple' /etc/ufw/user.rules /etc/ufw/user6.rules || true")
	var k []string
	for _, line := range strings.Split(l.Sh("iptables-save -t filter | grep -v '^#'"), "\n") {
		if strings.HasPrefix(line, "-A ufw-user-input ") || strings.HasPrefix(line, "-A ufw-user-forward ") ||
			strings.HasPrefix(line, "-A ufw6-user") {
			continue
		}
		k = append(k, nflab.Counters.ReplaceAllString(line, ""))
	}
	return tuples, strings.Join(k, "\n")
}

func assertTuplesOnlyMarked(t *testing.T, before, after string) {
	t.Helper()
	added, removed := nflab.DiffLines(before, after)
	if len(removed) > 0 {
		t.Fatalf("ufw rules removed that meshd did not mark: %q", removed)
	}
	for _, a := range added {
		if !strings.Contains(a, " comment=6d657368643a") { // hex of "meshd:"
			t.Fatalf("an unmarked ufw rule appeared: %q", a)
		}
	}
}

func TestUFWOpenings(t *testing.T) {
	l := nflab.NewUFW(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f, err := firewall.Detect(ctx, l.Env)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("found: %s", f)
	if f.Kind != netfilter.KindUFW || f.Backend != "nft" || !f.Active || f.Incoming != 2 || f.Config != ufw.ConfigDir || !f.DockerUser {
		t.Fatalf("detected %+v", f)
	}
	pub := l.HostAddr + ":8080"
	l.WantReach(l.Cli, l.HostAddr+":7000", false)
	l.WantReach(l.Cli, pub, false)

	tb, kb := ufwState(l)
	d, _ := firewall.NewDriver(l.Env, f, l.Private)
	want := []netfilter.Opening{
		{Module: "web", Proto: "tcp", Port: 7000, From: netfilter.FromAnywhere, Path: netfilter.PathIncoming},
		{Module: "store", Proto: "tcp", Port: 7001, From: netfilter.FromPrivate, Path: netfilter.PathIncoming},
		{Module: "app", Proto: "tcp", Port: 8080, From: netfilter.FromAnywhere, Path: netfilter.PathForwarded},
		{Module: "ssh", Proto: "tcp", Port: 22, From: netfilter.FromAnywhere, Path: netfilter.PathIncoming},
	}
	r := nflab.MustConverge(t, d, want)
	for _, o := range r.Openings {
		t.Logf("%s: %s %s", o.Opening, o.State, o.Reason)
	}
	l.WantReach(l.Cli, l.HostAddr+":7000", true)
	l.WantReach(l.Cli, pub, true)
	l.WantReach(l.Peer, l.PeerHost+":7001", true)
	l.WantReach(l.Cli, l.HostAddr+":7001", false)
	ta, ka := ufwState(l)
	assertTuplesOnlyMarked(t, tb, ta)
	nflab.AssertOnlyMarked(t, "kernel outside ufw's user chains", kb, ka)
	if strings.Count(ta, "allow tcp 22 ") != strings.Count(tb, "allow tcp 22 ") {
		t.Fatal("the found firewall's own 22/tcp rule was rewritten")
	}

	r = nflab.MustConverge(t, d, want)
	if r.Added+r.Removed != 0 {
		t.Fatalf("no-op converge wrote %d/%d", r.Added, r.Removed)
	}

	// ufw reload and a reboot each lose no opening for longer than 2 s.
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		netfilter.Watch(ctx, l.Env, 500*time.Millisecond, func(ctx context.Context) { d.Converge(ctx, want) })
	}()
	pIn := nflab.StartProbe(l.Cli, l.HostAddr+":7000")
	defer pIn.Close()
	pFwd := nflab.StartProbe(l.Cli, pub)
	defer pFwd.Close()
	l.WantReach(l.Cli, pub, true)
	for _, step := range []struct{ name, cmd string }{
		{"ufw reload", "ufw reload >/dev/null"},
		{"reboot (flush everything, ufw.service, then Docker)", "nft flush ruleset && /lib/ufw/ufw-init start >/dev/null"},
	} {
		l.Sh(step.cmd)
		if strings.HasPrefix(step.name, "reboot") {
			l.Docker()
		}
		// ufw keeps meshd's rules among its own, so a reload's stop/start window (which grows
		// with the machine's load) is ufw's; meshd answers for what is missing once it is done.
		pIn.RestartWindow()
		pFwd.RestartWindow()
		for name, p := range map[string]*nflab.Probe{"incoming 7000": pIn, "forwarded 8080": pFwd} {
			worst, fails := p.Settle(t, 3*time.Second)
			t.Logf("%s: %s: longest outage %v (%d failed probes)", step.name, name, worst, fails)
			if worst > 2*time.Second {
				t.Fatalf("%s: %s unreachable for %v", step.name, name, worst)
			}
		}
		l.WantReach(l.Cli, l.HostAddr+":7000", true)
		l.WantReach(l.Cli, pub, true)
	}
	cancel()
	<-watched // a re-check still in flight would converge the whole set again, racing the unassign below
	pIn.Close()
	pFwd.Close()

	// Unassigning a module removes its openings and nothing else.
	tm, km := ufwState(l)
	// One pass removes its IPv6 proxy rule and its DOCKER-USER rule. A ufw call can fail on its own
	// (ufw's capability probe of ip6tables was seen failing once in a few runs); the reconcile is
	// level-triggered, so the next pass finishes what one left: converge until nothing is left
	// to remove, as the host's loop would, and then hold the machine to exactly what changed.
	removedTotal := 0
	if err := testenv.Poll(t, 10*time.Second, func() error {
		r := nflab.MustConverge(t, d, want[:2])
		removedTotal += r.Removed
		if r.Added+r.Removed != 0 {
			t.Logf("unassign pass: added %d, removed %d", r.Added, r.Removed)
			return fmt.Errorf("the last pass still changed rules")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if removedTotal < 2 { // its IPv6 proxy rule and its DOCKER-USER rule
		t.Fatalf("removed %d rules, want at least its IPv6 proxy rule and its DOCKER-USER rule", removedTotal)
	}
	l.WantReach(l.Cli, pub, false)
	l.WantReach(l.Cli, l.HostAddr+":7000", true)
	tr, kr := ufwState(l)
	// its IPv6 proxy rule (the input path, for Docker's proxy) is in user6.rules alone; it has no
	// route rule
	if added, removed := nflab.DiffLines(tm, tr); len(added) != 0 || len(removed) != 1 ||
		!strings.HasPrefix(removed[0], "### tuple ### allow tcp 8080 ::/0 any ::/0 in ") {
		t.Fatalf("ufw rules changed: +%q -%q", added, removed)
	}
	if added, removed := nflab.DiffLines(km, kr); len(added) != 0 || len(removed) != 1 || !strings.Contains(removed[0], want[2].Mark()) {
		t.Fatalf("kernel rules changed: +%q -%q", added, removed)
	}

	// Retire then restore gives back the same ufw, Docker's rules intact. While ufw is retired
	// the machine keeps answering on a port ufw allowed: ufw's own stop deletes its chains
	// before it opens the closed INPUT policy, and a retirement that left that to ufw dropped
	// every incoming packet in between (the tunnel's datagrams at the lab hub's flip).
	files := l.Sh("cat /etc/ufw/user.rules /etc/ufw/user6.rules /etc/ufw/after.rules")
	_, kernel := ufwState(l)
	stop, probed := make(chan struct{}), make(chan [2]int)
	go func() {
		calls, failed := 0, 0
		for {
			select {
			case <-stop:
				probed <- [2]int{calls, failed}
				return
			default:
			}
			calls++
			if !nflab.Reach(l.Cli, l.HostAddr+":7000", 300*time.Millisecond) {
				failed++
			}
		}
	}()
	ret, err := firewall.Retire(context.Background(), l.Env, f)
	close(stop)
	during := <-probed
	if err != nil {
		t.Fatal(err)
	}
	if during[1] != 0 {
		t.Fatalf("while ufw was retired, %d of %d calls to the allowed port 7000 failed", during[1], during[0])
	}
	t.Logf("while ufw was retired: %d calls to the allowed port 7000, none failed", during[0])
	if l.Sh("cat /etc/ufw/user.rules /etc/ufw/user6.rules /etc/ufw/after.rules") != files {
		t.Fatal("retire changed ufw's rule files")
	}
	if !strings.Contains(l.Sh("iptables-save -t nat"), "--to-destination 192.0.2.2:80") {
		t.Fatal("retire removed Docker's DNAT")
	}
	if err := firewall.Restore(context.Background(), l.Env, ret); err != nil {
		t.Fatal(err)
	}
	if _, k := ufwState(l); k != kernel {
		added, removed := nflab.DiffLines(kernel, k)
		t.Fatalf("restore differs: +%q -%q", added, removed)
	}
	l.WantReach(l.Cli, l.HostAddr+":7000", true)
}

// TestUFWBatchWritesWhatUFWWrites holds the batch to ufw itself: the same openings applied
// one `ufw allow` at a time and in meshd's one batch leave ufw's rules files byte for byte the
// same and the same rules in ufw's chains; `ufw status` lists each with its meshd comment; a
// `ufw reload` changes nothing; and taking them away again gives back the files as they were.
func TestUFWBatchWritesWhatUFWWrites(t *testing.T) {
	l := nflab.NewUFW(t)
	ctx := context.Background()
	f, err := firewall.Detect(ctx, l.Env)
	if err != nil {
		t.Fatal(err)
	}
	want := []netfilter.Opening{
		{Module: "web", Proto: "tcp", Port: 7000, From: netfilter.FromAnywhere, Path: netfilter.PathIncoming},
		{Module: "store", Proto: "tcp", Port: 7001, From: netfilter.FromPrivate, Path: netfilter.PathIncoming},
		{Module: "app", Proto: "tcp", Port: 8080, From: netfilter.FromAnywhere, Path: netfilter.PathForwarded},
		{Module: "dns", Proto: "udp", Port: 53, From: netfilter.FromAnywhere, Path: netfilter.PathIncoming},
		{Module: "office", Proto: "tcp", Port: 9000, From: "198.51.100.0/24", Path: netfilter.PathIncoming},
		{Module: "office6", Proto: "tcp", Port: 9001, From: "2001:db8:7::/48", Path: netfilter.PathIncoming},
		{Module: "ssh", Proto: "tcp", Port: 22, From: netfilter.FromAnywhere, Path: netfilter.PathIncoming},
	}
	files := func() string { return l.Sh("cat /etc/ufw/user.rules /etc/ufw/user6.rules") }
	chains := func() string {
		return nflab.Counters.ReplaceAllString(l.Sh("{ iptables-save -t filter; ip6tables-save -t filter; } | grep -E '^-A ufw6?-user-(input|forward) '"), "")
	}
	base := files()

	byCommand := netfilter.Env{NetNS: l.Env.NetNS, Runner: l.Env.Runner} // no Root: one ufw command per rule
	if byCommand.SeesFiles() {
		t.Fatal("a runner entering another mount namespace must not be taken for one that sees the files")
	}
	dc, _ := firewall.NewDriver(byCommand, f, l.Private)
	nflab.MustConverge(t, dc, want)
	filesByUFW, chainsByUFW := files(), chains()
	if r := nflab.MustConverge(t, dc, nil); r.Removed == 0 {
		t.Fatal("taking the openings away by command removed nothing")
	}
	if got := files(); got != base {
		added, removed := nflab.DiffLines(base, got)
		t.Fatalf("ufw's files after removing by command: +%q -%q", added, removed)
	}

	db, _ := firewall.NewDriver(l.Env, f, l.Private)
	r := nflab.MustConverge(t, db, want)
	t.Logf("batch: added %d, removed %d", r.Added, r.Removed)
	if got := files(); got != filesByUFW {
		added, removed := nflab.DiffLines(filesByUFW, got)
		t.Fatalf("the batch wrote ufw's files differently from ufw: +%q -%q", added, removed)
	}
	if got := chains(); got != chainsByUFW {
		added, removed := nflab.DiffLines(chainsByUFW, got)
		t.Fatalf("the batch loaded other rules than ufw: +%q -%q", added, removed)
	}
	status := l.Sh("ufw status")
	for _, port := range []string{"7000/tcp", "8080/tcp", "53/udp", "9000/tcp", "9001/tcp"} {
		if !strings.Contains(status, port) {
			t.Errorf("ufw status does not list %s:\n%s", port, status)
		}
	}
	if !strings.Contains(status, "# meshd:web:incoming:tcp/7000:anywhere") {
		t.Errorf("ufw status does not show meshd's comment:\n%s", status)
	}
	// app's forwarded opening has its IPv6 proxy rule (Docker's proxy, the input path), IPv6 alone.
	if !regexp.MustCompile(`8080/tcp \(v6\) +ALLOW +Anywhere \(v6\) +# meshd:app:forwarded:tcp/8080:anywhere`).MatchString(status) {
		t.Errorf("ufw status does not list app's IPv6 proxy rule with its comment:\n%s", status)
	}
	if r := nflab.MustConverge(t, db, want); r.Added+r.Removed != 0 {
		t.Fatalf("a second pass changed %d/%d rules", r.Added, r.Removed)
	}
	l.Sh("ufw reload >/dev/null") // ufw reloads from its files: what the batch wrote is ufw's own
	if got := chains(); got != chainsByUFW {
		added, removed := nflab.DiffLines(chainsByUFW, got)
		t.Fatalf("ufw reload changed the rules the batch loaded: +%q -%q", added, removed)
	}
	nflab.MustConverge(t, db, nil)
	if got := files(); got != base {
		added, removed := nflab.DiffLines(base, got)
		t.Fatalf("ufw's files after removing in a batch: +%q -%q", added, removed)
	}
}

// A forwarded opening through ufw reached over IPv6 by Docker's proxy (a published port whose
// container has no IPv6: Docker listens on [::]:PORT itself, the input path): closed by ufw's
// default deny incoming before, opened by meshd's IPv6 `ufw allow` beside the DOCKER-USER rule
// (which opens the forward path alone); ufw keeps it across a reload
// (user6.rules), `ufw status` lists it with its meshd comment, IPv4 gains no input rule for it;
// unassigned, IPv6 closes again and ufw's files are as they were.
func TestUFWForwardedOpeningReachesDockersIPv6Proxy(t *testing.T) {
	l := nflab.NewUFW(t)
	l.AddIPv6()
	l.Sh("iptables -t nat -A DOCKER ! -i " + l.BrIf + " -p tcp -m tcp --dport 9090 -j DNAT --to-destination 192.0.2.2:80")
	l.Serve(l.Host, "[::]:9090") // Docker's proxy for 9090 over IPv6
	ctx := context.Background()
	f, err := firewall.Detect(ctx, l.Env)
	if err != nil {
		t.Fatal(err)
	}
	files := func() string { return l.Sh("cat /etc/ufw/user.rules /etc/ufw/user6.rules") }
	before := files()
	l.WantReach(l.Cli, l.HostAddr+":9090", false)
	l.WantReach(l.Cli, nflab.Host6+":9090", false)
	proxied := netfilter.Opening{Module: "proxied", Proto: "tcp", Port: 9090, From: netfilter.FromAnywhere, Path: netfilter.PathForwarded}
	for _, env := range []struct {
		name string
		env  netfilter.Env
	}{{"batch", l.Env}, {"ufw commands", netfilter.Env{NetNS: l.Env.NetNS, Runner: l.Env.Runner}}} {
		d, _ := firewall.NewDriver(env.env, f, l.Private)
		r := nflab.MustConverge(t, d, []netfilter.Opening{proxied})
		if len(r.Openings) != 1 || r.Openings[0].State != netfilter.InForce {
			t.Fatalf("%s: %+v", env.name, r.Openings)
		}
		l.WantReach(l.Cli, l.HostAddr+":9090", true)  // Docker's DNAT, the forward path
		l.WantReach(l.Cli, nflab.Host6+":9090", true) // Docker's proxy, the input path
		v4 := l.Sh("iptables-save -t filter | grep -e '-A ufw-user-input' || true")
		if strings.Contains(v4, "9090") {
			t.Fatalf("%s: an IPv4 input rule for the forwarded opening:\n%s", env.name, v4)
		}
		status := l.Sh("ufw status")
		if !regexp.MustCompile(`9090/tcp \(v6\) +ALLOW +Anywhere \(v6\) +# ` + regexp.QuoteMeta(proxied.Mark())).MatchString(status) {
			t.Fatalf("%s: ufw status does not list the IPv6 proxy rule with its comment:\n%s", env.name, status)
		}
		if r := nflab.MustConverge(t, d, []netfilter.Opening{proxied}); r.Added+r.Removed != 0 {
			t.Fatalf("%s: a second pass wrote %d/%d", env.name, r.Added, r.Removed)
		}
		l.Sh("ufw reload >/dev/null") // ufw's own files carry it
		l.WantReach(l.Cli, nflab.Host6+":9090", true)
		if r := nflab.MustConverge(t, d, nil); r.Removed == 0 {
			t.Fatalf("%s: unassigning removed nothing", env.name)
		}
		l.WantReach(l.Cli, nflab.Host6+":9090", false)
		l.WantReach(l.Cli, l.HostAddr+":9090", false)
		if got := files(); got != before {
			added, removed := nflab.DiffLines(before, got)
			t.Fatalf("%s: ufw's files after unassigning: +%q -%q", env.name, added, removed)
		}
	}
}
