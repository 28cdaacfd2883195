package netfilter_test

import (
	"context"
	"testing"
	"time"

	"meshd/netfilter"
	"meshd/netfilter/internal/nflab"
)

// A watch's monitor counts every change committed, whoever commits it: its mark moves with a
// rule added by nft and with a flush ruleset, and stays while nothing changes; the interval's
// calls say they are the timer's, the start's and the events' say they are not.
func TestWatchChangesMarkMovesWithEveryCommit(t *testing.T) {
	l := nflab.New(t)
	l.WriteHostFile("nftables.conf", nflab.FoundNftConf(l))
	l.Sh("nft -f /etc/nftables.conf")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var changes netfilter.Changes
	ticks := make(chan netfilter.Tick, 64)
	done := make(chan error, 1)
	go func() {
		done <- netfilter.WatchChanges(ctx, l.Env, 200*time.Millisecond, &changes, func(_ context.Context, tk netfilter.Tick) {
			select {
			case ticks <- tk:
			default:
			}
		})
	}()
	if tk := <-ticks; tk.Timer {
		t.Fatal("the watch's first call reads as the timer's")
	}
	mark, live := changes.Mark()
	if !live {
		t.Fatal("the monitor is not live once the watch started")
	}
	for range 2 {
		if tk := <-ticks; !tk.Timer {
			t.Fatal("a call with nothing changed is not the timer's")
		}
	}
	if m, live := changes.Mark(); m != mark || !live {
		t.Fatalf("nothing changed, the mark moved from %d to %d (live %v)", mark, m, live)
	}
	for _, cmd := range []string{"nft add rule inet nffound input tcp dport 9999 accept", "nft -f /etc/nftables.conf"} {
		l.Sh(cmd)
		for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if m, _ := changes.Mark(); m != mark {
				mark = m
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the mark did not move within 2 s", cmd)
			}
		}
	}
	cancel()
	<-done
	if _, live := changes.Mark(); live {
		t.Fatal("the monitor still reads live after the watch ended")
	}
}
