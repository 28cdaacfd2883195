package netfilter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"meshd/internal/testenv"
)

// The lab: network namespaces this package's tests create, all named with the prefix nf.
//
//	cli  (198.51.100.2) ──veth── host (198.51.100.1)      an outside machine
//	peer (203.0.113.2)  ──veth── host (203.0.113.1)       stands in for the WireGuard interface
//	ctr  (192.0.2.2)    ──veth── host (192.0.2.1)         stands in for a container on docker0
//
// host runs the found firewall; its ufw, nftables and iptables configuration live in a private
// mount namespace (a holder process with /etc/ufw, /etc/default/ufw, /etc/nftables.conf and
// /etc/iptables bind mounted from a temp dir), so the machine's own files are never touched.

func requireLab(t testing.TB) {
	t.Helper()
	testenv.RequireRoot(t, "netfilter lab", "ip", "nft", "iptables-nft", "iptables-nft-restore", "ufw", "nsenter", "unshare")
}

type lab struct {
	t        testing.TB
	id       string
	host     string // netns names
	cli      string
	peer     string
	ctr      string
	dir      string
	env      Env
	wgIf     string // host side of the private link
	upIf     string // host side of the underlay link
	brIf     string // host side of the container link
	hostAddr string
	peerHost string // the host's address on the private link
	private  Private
}

func newLab(t testing.TB) *lab {
	requireLab(t)
	b := make([]byte, 3)
	rand.Read(b)
	id := hex.EncodeToString(b)
	l := &lab{t: t, id: id,
		host: "nf-host-" + id, cli: "nf-cli-" + id, peer: "nf-peer-" + id, ctr: "nf-ctr-" + id,
		wgIf: "nfw" + id, upIf: "nfu" + id, brIf: "nfb" + id,
		hostAddr: "198.51.100.1", peerHost: "203.0.113.1"}
	l.private = Private{Interface: l.wgIf, Range: netip.MustParsePrefix("203.0.113.0/24")}
	for _, ns := range []string{l.host, l.cli, l.peer, l.ctr} {
		testenv.NewNetns(t, ns)
	}
	link := func(hostIf, other, otherIf, hostIP, otherIP string) {
		testenv.Run(t, "ip", "link", "add", hostIf, "netns", l.host, "type", "veth", "peer", "name", otherIf, "netns", other)
		testenv.Run(t, "ip", "-n", l.host, "addr", "add", hostIP+"/24", "dev", hostIf)
		testenv.Run(t, "ip", "-n", other, "addr", "add", otherIP+"/24", "dev", otherIf)
		testenv.Run(t, "ip", "-n", l.host, "link", "set", hostIf, "up")
		testenv.Run(t, "ip", "-n", other, "link", "set", otherIf, "up")
	}
	link(l.upIf, l.cli, l.upIf+"c", "198.51.100.1", "198.51.100.2")
	link(l.wgIf, l.peer, l.wgIf+"p", "203.0.113.1", "203.0.113.2")
	link(l.brIf, l.ctr, l.brIf+"c", "192.0.2.1", "192.0.2.2")
	testenv.Run(t, "ip", "-n", l.ctr, "route", "add", "default", "via", "192.0.2.1")
	testenv.Run(t, "nsenter", "--net=/run/netns/"+l.host, "sysctl", "-qw", "net.ipv4.ip_forward=1")

	// The private mount namespace holding the host's firewall configuration.
	l.dir = t.TempDir()
	testenv.Run(t, "cp", "-a", "/etc/ufw", filepath.Join(l.dir, "etc-ufw"))
	def, err := os.ReadFile("/etc/default/ufw")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(l.dir, "sysctl"), nil, 0o644)
	var dl []string
	for _, line := range strings.Split(string(def), "\n") {
		if strings.HasPrefix(line, "IPT_SYSCTL=") {
			line = "IPT_SYSCTL=" + filepath.Join(l.dir, "sysctl") // never touch the machine's sysctls
		}
		dl = append(dl, line)
	}
	os.WriteFile(filepath.Join(l.dir, "default-ufw"), []byte(strings.Join(dl, "\n")), 0o644)
	os.Mkdir(filepath.Join(l.dir, "etc-iptables"), 0o755) // a found iptables' rules.v4 and rules.v6
	os.WriteFile(filepath.Join(l.dir, "nftables.conf"), []byte("#!/usr/sbin/nft -f\nflush ruleset\n"), 0o644)
	script := fmt.Sprintf("mount --bind %[1]s/etc-ufw /etc/ufw && mount --bind %[1]s/default-ufw /etc/default/ufw && "+
		"touch /etc/nftables.conf && mount --bind %[1]s/nftables.conf /etc/nftables.conf && "+
		"mkdir -p /etc/iptables && mount --bind %[1]s/etc-iptables /etc/iptables && echo ready && exec sleep infinity", l.dir)
	mntns := testenv.HoldMountNS(t, script)
	netns := "/run/netns/" + l.host
	l.env = Env{NetNS: netns, Runner: NSEnter(netns, mntns), Root: strings.TrimSuffix(mntns, "/ns/mnt") + "/root"}
	return l
}

// sh runs a shell command on the host (its netns and mount namespace).
func (l *lab) sh(cmd string) string {
	l.t.Helper()
	out, err := l.env.Run(context.Background(), "sh", "-c", cmd)
	if err != nil {
		l.t.Fatalf("host: %s: %v", cmd, err)
	}
	return string(out)
}

func (l *lab) writeHostFile(rel, content string) {
	l.t.Helper()
	if err := os.WriteFile(filepath.Join(l.dir, rel), []byte(content), 0o644); err != nil {
		l.t.Fatal(err)
	}
}

// serve listens on addr inside ns and answers every connection with "ok".
func (l *lab) serve(ns, addr string) {
	l.t.Helper()
	var ln net.Listener
	if err := testenv.InNetns(ns, func() (err error) { ln, err = net.Listen("tcp", addr); return }); err != nil {
		l.t.Fatalf("listen %s in %s: %v", addr, ns, err)
	}
	l.t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, "ok")
			c.Close()
		}
	}()
}

// reach is a real TCP connect from ns to addr that reads the server's "ok".
func reach(ns, addr string, timeout time.Duration) bool { return reachFrom(ns, "", addr, timeout) }

func (l *lab) wantReach(ns, addr string, want bool) {
	l.t.Helper()
	// poll with a deadline for reachable; for unreachable a timed-out connect is the answer
	deadline := time.Now().Add(3 * time.Second)
	for {
		got := reach(ns, addr, 400*time.Millisecond)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("from %s to %s: reachable=%v, want %v", ns, addr, got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// docker builds Docker's topology on the host the way Docker does it with the iptables
// backend: nat PREROUTING jumps (for local destinations) to DOCKER, which DNATs the published
// port 8080 to the container 192.0.2.2:80; filter FORWARD jumps to DOCKER-USER first, then
// accepts established traffic to the bridge and, through the DOCKER chain, new traffic to the
// container's port; FORWARD's policy is DROP. Existing chains are kept, as Docker keeps
// DOCKER-USER.
func (l *lab) docker() {
	br := l.brIf
	l.sh(strings.Join([]string{
		"iptables -t nat -N DOCKER 2>/dev/null; true",
		"iptables -t nat -A PREROUTING -m addrtype --dst-type LOCAL -j DOCKER",
		"iptables -t nat -A DOCKER -i " + br + " -j RETURN",
		"iptables -t nat -A DOCKER ! -i " + br + " -p tcp -m tcp --dport 8080 -j DNAT --to-destination 192.0.2.2:80",
		"iptables -t filter -N DOCKER 2>/dev/null; true",
		"iptables -t filter -N DOCKER-USER 2>/dev/null; true",
		"iptables -P FORWARD DROP",
		"iptables -I FORWARD 1 -j DOCKER-USER",
		"iptables -A FORWARD -o " + br + " -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
		"iptables -A FORWARD -o " + br + " -j DOCKER",
		"iptables -A FORWARD -i " + br + " ! -o " + br + " -j ACCEPT",
		"iptables -A DOCKER -d 192.0.2.2/32 ! -i " + br + " -o " + br + " -p tcp -m tcp --dport 80 -j ACCEPT",
		"iptables -C DOCKER-USER -j RETURN 2>/dev/null || iptables -A DOCKER-USER -j RETURN",
	}, " && "))
}

// probe polls addr from ns every 50ms and records the longest run of failures.
type probe struct {
	mu      sync.Mutex
	worst   time.Duration
	downAt  time.Time
	fails   int
	stop    chan struct{}
	stopped chan struct{}
}

func startProbe(ns, addr string) *probe {
	p := &probe{stop: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(p.stopped)
		for {
			select {
			case <-p.stop:
				return
			default:
			}
			ok := reach(ns, addr, 250*time.Millisecond)
			now := time.Now()
			p.mu.Lock()
			if !ok {
				p.fails++
				if p.downAt.IsZero() {
					p.downAt = now
				}
			} else if !p.downAt.IsZero() {
				if d := now.Sub(p.downAt); d > p.worst {
					p.worst = d
				}
				p.downAt = time.Time{}
			}
			p.mu.Unlock()
			time.Sleep(50 * time.Millisecond)
		}
	}()
	return p
}

// settle waits until the probe has seen the port reachable again (or the deadline), then
// returns the longest outage.
func (p *probe) settle(t testing.TB, within time.Duration) (time.Duration, int) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		p.mu.Lock()
		down := !p.downAt.IsZero()
		since := p.downAt
		p.mu.Unlock()
		if !down || time.Now().After(deadline) {
			if down {
				p.mu.Lock()
				if d := time.Since(since); d > p.worst {
					p.worst = d
				}
				p.mu.Unlock()
			}
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	w, f := p.worst, p.fails
	p.worst, p.fails = 0, 0
	return w, f
}

// restartWindow starts an outage under way afresh from now: in a reboot, the time before the found
// firewall and Docker are back is the machine's, not meshd's, and meshd answers only for what
// follows.
func (p *probe) restartWindow() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.downAt.IsZero() {
		p.downAt = time.Now()
	}
	p.worst, p.fails = 0, 0
}

func (p *probe) close() { close(p.stop); <-p.stopped }
