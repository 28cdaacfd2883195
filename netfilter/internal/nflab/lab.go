package nflab

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
	"testing"

	"meshd/internal/testenv"
	"meshd/netfilter"
)

// The lab: network namespaces the netfilter packages' tests create, all named with the prefix nf.
//
//	cli  (198.51.100.2) ──veth── host (198.51.100.1)      an outside machine
//	peer (203.0.113.2)  ──veth── host (203.0.113.1)       stands in for the WireGuard interface
//	ctr  (192.0.2.2)    ──veth── host (192.0.2.1)         stands in for a container on docker0
//
// host runs the found firewall; its ufw, nftables and iptables configuration live in a private
// mount namespace (a holder process with /etc/ufw, /etc/default/ufw, /etc/nftables.conf and
// /etc/iptables bind mounted from a temp dir), so the machine's own files are never touched.

func require(t testing.TB) {
	t.Helper()
	testenv.RequireRoot(t, "netfilter lab", "ip", "nft", "iptables-nft", "iptables-nft-restore", "ufw", "nsenter", "unshare")
}

// Lab is one lab: its namespaces, links and addresses, and the Env that reaches its host.
type Lab struct {
	T        testing.TB
	ID       string
	Host     string // netns names
	Cli      string
	Peer     string
	Ctr      string
	Dir      string // the temp dir holding the host's firewall configuration
	Env      netfilter.Env
	WgIf     string // host side of the private link
	UpIf     string // host side of the underlay link
	BrIf     string // host side of the container link
	HostAddr string
	PeerHost string // the host's address on the private link
	Private  netfilter.Private
}

// New raises a lab with no firewall on its host; it is torn down when the test ends.
func New(t testing.TB) *Lab {
	require(t)
	b := make([]byte, 3)
	rand.Read(b)
	id := hex.EncodeToString(b)
	l := &Lab{T: t, ID: id,
		Host: "nf-host-" + id, Cli: "nf-cli-" + id, Peer: "nf-peer-" + id, Ctr: "nf-ctr-" + id,
		WgIf: "nfw" + id, UpIf: "nfu" + id, BrIf: "nfb" + id,
		HostAddr: "198.51.100.1", PeerHost: "203.0.113.1"}
	l.Private = netfilter.Private{Interface: l.WgIf, Range: netip.MustParsePrefix("203.0.113.0/24")}
	for _, ns := range []string{l.Host, l.Cli, l.Peer, l.Ctr} {
		testenv.NewNetns(t, ns)
	}
	link := func(hostIf, other, otherIf, hostIP, otherIP string) {
		testenv.Run(t, "ip", "link", "add", hostIf, "netns", l.Host, "type", "veth", "peer", "name", otherIf, "netns", other)
		testenv.Run(t, "ip", "-n", l.Host, "addr", "add", hostIP+"/24", "dev", hostIf)
		testenv.Run(t, "ip", "-n", other, "addr", "add", otherIP+"/24", "dev", otherIf)
		testenv.Run(t, "ip", "-n", l.Host, "link", "set", hostIf, "up")
		testenv.Run(t, "ip", "-n", other, "link", "set", otherIf, "up")
	}
	link(l.UpIf, l.Cli, l.UpIf+"c", "198.51.100.1", "198.51.100.2")
	link(l.WgIf, l.Peer, l.WgIf+"p", "203.0.113.1", "203.0.113.2")
	link(l.BrIf, l.Ctr, l.BrIf+"c", "192.0.2.1", "192.0.2.2")
	testenv.Run(t, "ip", "-n", l.Ctr, "route", "add", "default", "via", "192.0.2.1")
	testenv.Run(t, "nsenter", "--net=/run/netns/"+l.Host, "sysctl", "-qw", "net.ipv4.ip_forward=1")

	// The private mount namespace holding the host's firewall configuration.
	l.Dir = t.TempDir()
	testenv.Run(t, "cp", "-a", "/etc/ufw", filepath.Join(l.Dir, "etc-ufw"))
	def, err := os.ReadFile("/etc/default/ufw")
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(l.Dir, "sysctl"), nil, 0o644)
	var dl []string
	for _, line := range strings.Split(string(def), "\n") {
		if strings.HasPrefix(line, "IPT_SYSCTL=") {
			line = "IPT_SYSCTL=" + filepath.Join(l.Dir, "sysctl") // never touch the machine's sysctls
		}
		dl = append(dl, line)
	}
	os.WriteFile(filepath.Join(l.Dir, "default-ufw"), []byte(strings.Join(dl, "\n")), 0o644)
	os.Mkdir(filepath.Join(l.Dir, "etc-iptables"), 0o755) // a found iptables' rules.v4 and rules.v6
	os.WriteFile(filepath.Join(l.Dir, "nftables.conf"), []byte("#!/usr/sbin/nft -f\nflush ruleset\n"), 0o644)
	script := fmt.Sprintf("mount --bind %[1]s/etc-ufw /etc/ufw && mount --bind %[1]s/default-ufw /etc/default/ufw && "+
		"touch /etc/nftables.conf && mount --bind %[1]s/nftables.conf /etc/nftables.conf && "+
		"mkdir -p /etc/iptables && mount --bind %[1]s/etc-iptables /etc/iptables && echo ready && exec sleep infinity", l.Dir)
	mntns := testenv.HoldMountNS(t, script)
	netns := "/run/netns/" + l.Host
	l.Env = netfilter.Env{NetNS: netns, Runner: netfilter.NSEnter(netns, mntns), Root: strings.TrimSuffix(mntns, "/ns/mnt") + "/root"}
	return l
}

// Sh runs a shell command on the host (its netns and mount namespace).
func (l *Lab) Sh(cmd string) string {
	l.T.Helper()
	out, err := l.Env.Run(context.Background(), "sh", "-c", cmd)
	if err != nil {
		l.T.Fatalf("host: %s: %v", cmd, err)
	}
	return string(out)
}

// WriteHostFile writes a file of the host's firewall configuration (rel in Dir).
func (l *Lab) WriteHostFile(rel, content string) {
	l.T.Helper()
	if err := os.WriteFile(filepath.Join(l.Dir, rel), []byte(content), 0o644); err != nil {
		l.T.Fatal(err)
	}
}

// Serve listens on addr inside ns and answers every connection with "ok".
func (l *Lab) Serve(ns, addr string) {
	l.T.Helper()
	var ln net.Listener
	if err := testenv.InNetns(ns, func() (err error) { ln, err = net.Listen("tcp", addr); return }); err != nil {
		l.T.Fatalf("listen %s in %s: %v", addr, ns, err)
	}
	l.T.Cleanup(func() { ln.Close() })
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

// Docker builds Docker's topology on the host the way Docker does it with the iptables
// backend: nat PREROUTING jumps (for local destinations) to DOCKER, which DNATs the published
// port 8080 to the container 192.0.2.2:80; filter FORWARD jumps to DOCKER-USER first, then
// accepts established traffic to the bridge and, through the DOCKER chain, new traffic to the
// container's port; FORWARD's policy is DROP. Existing chains are kept, as Docker keeps
// DOCKER-USER.
func (l *Lab) Docker() {
	br := l.BrIf
	l.Sh(strings.Join([]string{
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

// Publish adds a published port the way Docker adds one to a running container: hostPort DNATed
// to the container's ctrPort (in nat DOCKER), and new traffic to that container port accepted
// (in filter DOCKER). What answers there is the caller's: Serve on l.Ctr. Several published
// ports may lead to one container port, as several containers listening on one port inside
// each have their own published one.
func (l *Lab) Publish(hostPort, ctrPort int) {
	l.T.Helper()
	br := l.BrIf
	l.Sh(fmt.Sprintf("iptables -t nat -A DOCKER ! -i %[1]s -p tcp -m tcp --dport %[2]d -j DNAT --to-destination 192.0.2.2:%[3]d && "+
		"{ iptables -C DOCKER -d 192.0.2.2/32 ! -i %[1]s -o %[1]s -p tcp -m tcp --dport %[3]d -j ACCEPT 2>/dev/null || "+
		"iptables -A DOCKER -d 192.0.2.2/32 ! -i %[1]s -o %[1]s -p tcp -m tcp --dport %[3]d -j ACCEPT; }", br, hostPort, ctrPort))
}

// The lab's IPv6, beside its IPv4 (documentation addresses, 2001:db8::/32):
//
//	cli  2001:db8:100::2 ──── host 2001:db8:100::1    the outside machine
//	ctr  2001:db8:2::2   ──── host 2001:db8:2::1      the container, on the bridge
//
// Host6 is the host's address there (to dial, with a port), Ctr6 the container's.
const (
	Host6 = "[2001:db8:100::1]"
	Ctr6  = "2001:db8:2::2"
)

// AddIPv6 gives the host, the outside machine and the container their IPv6 addresses (nodad:
// usable at once), the container its route, and the host IPv6 forwarding.
func (l *Lab) AddIPv6() {
	l.T.Helper()
	add := func(ns, addr, dev string) {
		testenv.Run(l.T, "ip", "-n", ns, "addr", "add", addr, "dev", dev, "nodad")
	}
	add(l.Host, "2001:db8:100::1/64", l.UpIf)
	add(l.Cli, "2001:db8:100::2/64", l.UpIf+"c")
	add(l.Host, "2001:db8:2::1/64", l.BrIf)
	add(l.Ctr, Ctr6+"/64", l.BrIf+"c")
	testenv.Run(l.T, "ip", "-n", l.Ctr, "-6", "route", "add", "default", "via", "2001:db8:2::1")
	testenv.Run(l.T, "nsenter", "--net=/run/netns/"+l.Host, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
}
