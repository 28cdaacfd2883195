package firewall_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"meshd/netfilter"
	"meshd/netfilter/firewall"
	"meshd/netfilter/internal/nflab"
)

func TestDetectRefuses(t *testing.T) {
	l := nflab.New(t)
	ctx := context.Background()
	if f, err := firewall.Detect(ctx, l.Env); err != nil || f.Kind != netfilter.KindNone {
		t.Fatalf("empty namespace: %+v %v", f, err)
	}
	l.Sh("nft add table inet firewalld && nft add chain inet firewalld filter_INPUT '{ type filter hook input priority 10; policy accept; }'")
	_, err := firewall.Detect(ctx, l.Env)
	if !errors.Is(err, netfilter.ErrUnsupported) || !strings.Contains(err.Error(), "firewalld") {
		t.Fatalf("firewalld not refused by name: %v", err)
	}
	t.Logf("firewalld: %v", err)
	l.Sh("nft delete table inet firewalld")
	// A table iptables cannot read: nft put a base chain iptables-nft does not know in it.
	l.Sh("iptables -A INPUT -p tcp --dport 22 -j ACCEPT && nft add chain ip filter nfodd '{ type filter hook input priority 5; }'")
	_, err = firewall.Detect(ctx, l.Env)
	if !errors.Is(err, netfilter.ErrUnsupported) || !strings.Contains(err.Error(), "filter") {
		t.Fatalf("unreadable ruleset not refused by name: %v", err)
	}
	t.Logf("unreadable: %v", err)
	l.Sh("nft delete chain ip filter nfodd")
	f, err := firewall.Detect(ctx, l.Env)
	if err != nil || f.Kind != netfilter.KindIptables || f.Incoming != 1 {
		t.Fatalf("plain iptables: %+v %v", f, err)
	}
}

// Stamp stands for what Detect reads: equal while nothing changes, moved by a change of the
// ruleset (whoever commits it) and by a rewrite of a found firewall's configuration file.
func TestStampMovesWithTheFirewall(t *testing.T) {
	l := nflab.New(t)
	l.WriteHostFile("nftables.conf", nflab.FoundNftConf(l))
	l.Sh("nft -f /etc/nftables.conf")
	ctx := context.Background()
	s1, s2 := firewall.Stamp(ctx, l.Env), firewall.Stamp(ctx, l.Env)
	if s1 == "" || s1 != s2 {
		t.Fatalf("two stamps of an unchanged firewall: %q and %q, want equal and not empty", s1, s2)
	}
	l.Sh("nft add rule inet nffound input tcp dport 9999 accept")
	s3 := firewall.Stamp(ctx, l.Env)
	if s3 == "" || s3 == s2 {
		t.Fatalf("a rule added by nft left the stamp at %q", s3)
	}
	l.WriteHostFile("nftables.conf", nflab.FoundNftConf(l)+"\n# edited by hand\n")
	if s4 := firewall.Stamp(ctx, l.Env); s4 == "" || s4 == s3 {
		t.Fatalf("/etc/nftables.conf rewritten left the stamp at %q", s4)
	}
}
