package nflab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"meshd/netfilter"
)

// FoundNftConf is a found nftables firewall the way Debian's nftables.service loads it:
// default deny, a few ports allowed, beginning with flush ruleset.
func FoundNftConf(l *Lab) string {
	return fmt.Sprintf(`#!/usr/sbin/nft -f
flush ruleset

table inet nffound {
	chain input {
		type filter hook input priority filter; policy drop;
		ct state established,related accept
		iif "lo" accept
		tcp dport 22 accept
	}

	chain forward {
		type filter hook forward priority filter; policy drop;
		ct state established,related accept
		iifname "%s" accept
	}
}
`, l.BrIf)
}

// NewNftables raises a lab whose host runs FoundNftConf, then Docker, serving 7000 and 7001
// on the host and 80 in the container.
func NewNftables(t *testing.T) *Lab {
	l := New(t)
	l.WriteHostFile("nftables.conf", FoundNftConf(l))
	l.Sh("nft -f /etc/nftables.conf")
	l.Docker() // Docker starts after nftables.service
	l.Serve(l.Host, "0.0.0.0:7000")
	l.Serve(l.Host, "0.0.0.0:7001")
	l.Serve(l.Ctr, "0.0.0.0:80")
	return l
}

// NewUFW raises a found ufw the way a predecessor that filters Docker's published ports
// leaves one (the ufw-docker recipe): ufw active, deny incoming and routed, 22/tcp allowed,
// and after.rules sending DOCKER-USER through ufw-user-forward, dropping the rest from the
// outside to the container bridge. Docker starts after ufw.
func NewUFW(t testing.TB) *Lab {
	l := New(t)
	p := filepath.Join(l.Dir, "etc-ufw", "after.rules")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.LastIndex(s, "COMMIT")
	s = s[:i] + ":ufw-user-forward - [0:0]\n:DOCKER-USER - [0:0]\n" +
		"-A DOCKER-USER -j ufw-user-forward\n" +
		"-A DOCKER-USER -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN\n" +
		"-A DOCKER-USER -i " + l.UpIf + " -o " + l.BrIf + " -j DROP\n" +
		"-A DOCKER-USER -j RETURN\n" + s[i:]
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	l.Sh("ufw allow 22/tcp >/dev/null && ufw --force enable >/dev/null")
	l.Docker()
	l.Serve(l.Host, "0.0.0.0:7000")
	l.Serve(l.Host, "0.0.0.0:7001")
	l.Serve(l.Ctr, "0.0.0.0:80")
	return l
}

// DiffLines is what after adds to before and what it lacks of it, line by line.
func DiffLines(before, after string) (added, removed []string) {
	count := func(s string) map[string]int {
		m := map[string]int{}
		for _, l := range strings.Split(s, "\n") {
			m[strings.TrimSpace(l)]++
		}
		return m
	}
	b, a := count(before), count(after)
	for l, n := range a {
		for i := b[l]; i < n; i++ {
			added = append(added, l)
		}
	}
	for l, n := range b {
		for i := a[l]; i < n; i++ {
			removed = append(removed, l)
		}
	}
	return
}

// AssertOnlyMarked fails the test when after lacks a line of before or adds one without a mark.
func AssertOnlyMarked(t *testing.T, what, before, after string) {
	t.Helper()
	added, removed := DiffLines(before, after)
	if len(removed) > 0 {
		t.Fatalf("%s: meshd removed rules it did not mark: %q", what, removed)
	}
	for _, l := range added {
		if !strings.Contains(l, "meshd:") {
			t.Fatalf("%s: an unmarked line appeared: %q", what, l)
		}
	}
}

// MustConverge converges d to want and fails the test when an opening failed.
func MustConverge(t testing.TB, d netfilter.Driver, want []netfilter.Opening) netfilter.Report {
	t.Helper()
	r, err := d.Converge(context.Background(), want)
	if err != nil {
		t.Fatalf("converge: %v", err)
	}
	for _, o := range r.Openings {
		if o.State == netfilter.Failed {
			t.Fatalf("opening %s failed: %s", o.Opening, o.Reason)
		}
	}
	return r
}

// Counters matches iptables-save's packet counters, which a comparison of two saves leaves out.
var Counters = regexp.MustCompile(`\[\d+:\d+\]`)
