package firewall_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"meshd/netfilter"
	"meshd/netfilter/firewall"
	"meshd/netfilter/internal/nflab"
)

// The side-by-side figures of docs/performance.md (issue 18), read by cmd/meshbench: each
// sub-benchmark's name is KIND/WAY/N, WAY one of
//   meshd    the driver puts N openings in force from none (one pass, one batch)
//   by-hand  the same N rules the way an operator would: `ufw allow` per port, `nft add rule`
//            per rule, `iptables -A` per rule
//   nft-f    (nftables) the N rules in one `nft -f` file: the floor meshd's batch is held to
//   recheck  a pass with the N openings in place and nothing to change
//   restore  the found firewall reloaded (nft -f with flush ruleset, iptables-restore of the
//            found rules, ufw reload) until the watch has every opening back in force
// MESHD_BENCH_N lists the sizes (default 10,100,1000); `ufw allow` per port stops at 100
// unless MESHD_BENCH_LONG=1 (1000 calls take about ten minutes).

func benchSizes() []int {
	v := os.Getenv("MESHD_BENCH_N")
	if v == "" {
		v = "10,100,1000"
	}
	var ns []int
	for _, f := range strings.Split(v, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && n > 0 {
			ns = append(ns, n)
		}
	}
	return ns
}

func bulkOpenings(n int, path string) []netfilter.Opening {
	want := make([]netfilter.Opening, n)
	for i := range want {
		want[i] = netfilter.Opening{Module: "bulk", Proto: "tcp", Port: uint16(20000 + i), From: netfilter.FromAnywhere, Path: path}
	}
	return want
}

// benchKind is one found firewall on a bench lab: how to raise it, how an operator adds N
// rules by hand, and how the found firewall is reloaded.
type benchKind struct {
	name   string
	setup  func(l *nflab.Lab)
	byHand func(l *nflab.Lab, ports []int)
	reset  func(l *nflab.Lab) // back to the found firewall alone
	reload string             // the found firewall's own reload
	path   string             // what the restore figure opens (ufw reload keeps incoming rules: they are ufw's)
}

func benchKinds() []benchKind {
	xtFound := "*filter\n:INPUT DROP [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:DOCKER-USER - [0:0]\n" +
		"-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n-A INPUT -i lo -j ACCEPT\n" +
		"-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT\n-A FORWARD -j DOCKER-USER\nCOMMIT\n"
	return []benchKind{
		{
			name: "nftables", path: netfilter.PathIncoming, reload: "nft -f /etc/nftables.conf",
			setup: func(l *nflab.Lab) {
				l.WriteHostFile("nftables.conf", nflab.FoundNftConf(l))
				l.Sh("nft -f /etc/nftables.conf")
			},
			byHand: func(l *nflab.Lab, ports []int) {
				l.Sh(perPort("nft add rule inet nffound input tcp dport %d accept\n", ports))
			},
			reset: func(l *nflab.Lab) { l.Sh("nft -f /etc/nftables.conf") },
		},
		{
			name: "iptables", path: netfilter.PathIncoming, reload: "iptables-restore < /etc/iptables/rules.v4",
			setup: func(l *nflab.Lab) {
				l.WriteHostFile("rules.v4", xtFound)
				l.Sh("mkdir -p /etc/iptables && cat > /etc/iptables/rules.v4 <<'EOF'\n" + xtFound + "EOF\niptables-restore < /etc/iptables/rules.v4")
			},
			byHand: func(l *nflab.Lab, ports []int) {
				l.Sh(perPort("iptables -A INPUT -p tcp --dport %d -j ACCEPT\n", ports))
			},
			reset: func(l *nflab.Lab) { l.Sh("iptables-restore < /etc/iptables/rules.v4") },
		},
		{
			name: "ufw", path: netfilter.PathForwarded, reload: "ufw reload",
			setup: func(l *nflab.Lab) {
				l.Sh("ufw allow 22/tcp >/dev/null && ufw --force enable >/dev/null && " +
					"cp /etc/ufw/user.rules /etc/ufw/user.rules.found && cp /etc/ufw/user6.rules /etc/ufw/user6.rules.found")
			},
			byHand: func(l *nflab.Lab, ports []int) { l.Sh(perPort("ufw allow %d/tcp >/dev/null\n", ports)) },
			reset: func(l *nflab.Lab) {
				l.Sh("cp /etc/ufw/user.rules.found /etc/ufw/user.rules && cp /etc/ufw/user6.rules.found /etc/ufw/user6.rules && ufw reload >/dev/null")
			},
		},
	}
}

// perPort is one shell line of format per port: the rules as an operator types them.
func perPort(format string, ports []int) string {
	var b strings.Builder
	for _, p := range ports {
		fmt.Fprintf(&b, format, p)
	}
	return b.String()
}

func BenchmarkOpenings(b *testing.B) {
	long := os.Getenv("MESHD_BENCH_LONG") == "1"
	for _, k := range benchKinds() {
		b.Run(k.name, func(b *testing.B) {
			l := nflab.New(b)
			if k.name == "ufw" {
				l = nflab.NewUFW(b)
			}
			k.setup(l)
			f, err := firewall.Detect(context.Background(), l.Env)
			if err != nil {
				b.Fatal(err)
			}
			d, _ := firewall.NewDriver(l.Env, f, l.Private)
			for _, n := range benchSizes() {
				want := bulkOpenings(n, netfilter.PathIncoming)
				ports := make([]int, n)
				for i := range ports {
					ports[i] = 20000 + i
				}
				b.Run("meshd/"+strconv.Itoa(n), func(b *testing.B) {
					for i := 0; i < b.N; i++ {
						if r := nflab.MustConverge(b, d, want); r.Added < n {
							b.Fatalf("added %d of %d", r.Added, n)
						}
						b.StopTimer()
						nflab.MustConverge(b, d, nil)
						b.StartTimer()
					}
				})
				b.Run("recheck/"+strconv.Itoa(n), func(b *testing.B) {
					nflab.MustConverge(b, d, want)
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						if r := nflab.MustConverge(b, d, want); r.Added+r.Removed != 0 {
							b.Fatalf("a pass with nothing to do wrote %d/%d", r.Added, r.Removed)
						}
					}
					b.StopTimer()
					nflab.MustConverge(b, d, nil)
				})
				if k.name == "nftables" {
					b.Run("nft-f/"+strconv.Itoa(n), func(b *testing.B) {
						var file strings.Builder
						for _, p := range ports {
							fmt.Fprintf(&file, "add rule inet nffound input tcp dport %d accept\n", p)
						}
						bulk := filepath.Join(l.Dir, "bulk.nft")
						if err := os.WriteFile(bulk, []byte(file.String()), 0o644); err != nil {
							b.Fatal(err)
						}
						b.ResetTimer()
						for i := 0; i < b.N; i++ {
							l.Sh("nft -f " + bulk)
							b.StopTimer()
							k.reset(l)
							b.StartTimer()
						}
					})
				}
				if k.name != "ufw" || n <= 100 || long {
					b.Run("by-hand/"+strconv.Itoa(n), func(b *testing.B) {
						for i := 0; i < b.N; i++ {
							k.byHand(l, ports)
							b.StopTimer()
							k.reset(l)
							b.StartTimer()
						}
					})
				}
				b.Run("restore/"+strconv.Itoa(n), func(b *testing.B) { benchRestore(b, l, d, k, bulkOpenings(n, k.path)) })
			}
		})
	}
}

// benchRestore times the end of the found firewall's reload to the watch's pass that has every opening
// back in force.
func benchRestore(b *testing.B, l *nflab.Lab, d netfilter.Driver, k benchKind, want []netfilter.Opening) {
	nflab.MustConverge(b, d, want)
	ctx, cancel := context.WithCancel(context.Background())
	restored := make(chan struct{}, 1)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		netfilter.Watch(ctx, l.Env, 500*time.Millisecond, func(ctx context.Context) {
			if r, err := d.Converge(ctx, want); err == nil && r.Added > 0 && allInForce(r) {
				select {
				case restored <- struct{}{}:
				default:
				}
			}
		})
	}()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		select {
		case <-restored:
		default:
		}
		l.Sh(k.reload + " >/dev/null") // from the reload's end: meshd cannot act before it is done
		b.StartTimer()
		select {
		case <-restored:
		case <-time.After(30 * time.Second):
			b.Fatalf("%s: openings not back in force 30 s after %q", k.name, k.reload)
		}
	}
	b.StopTimer()
	cancel()
	<-watched
	nflab.MustConverge(b, d, nil)
}

func allInForce(r netfilter.Report) bool {
	for _, o := range r.Openings {
		if o.State != netfilter.InForce && o.State != netfilter.Restored {
			return false
		}
	}
	return true
}
