// The real hubs of issue 27: a WireGuard hub and its spokes written the way the common installers
// and tutorials leave them (PiVPN, wg-easy, Algo, the wg-quick man page), on each firewall kind.

package lab

import (
	"context"
	"fmt"
	"strings"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// The real hub's numbers, beside the predecessor's (TunnelRange, HubTunnelAddr, TunnelPort).
const (
	SiteAddr = "198.51.100.14"

	// TunnelRange6 is the tunnel's IPv6 range (a ULA, as PiVPN and wg-easy pick one).
	TunnelRange6   = "fd44::/64"
	HubTunnelAddr6 = "fd44::1"
	// TunnelMTU is the hub's MTU = line (the spokes' files have none: wg-quick computes theirs).
	TunnelMTU = 1380

	// SiteRange is the network behind the site peer (its hub-side AllowedIPs include it);
	// SiteServiceAddr holds the site's service, on its LAN link.
	SiteRange       = "10.88.1.0/24"
	SiteServiceAddr = "10.88.1.1"

	// BoundPort is the hub's service bound to the interface by name (labsvc serve
	// --bind-interface wg0), like a resolver with `interface=wg0`.
	BoundPort = 8053
	// RealHubWeb and RealHubBound are the hub's units serving WebappPort and BoundPort.
	RealHubWeb   = "tunnel-web"
	RealHubBound = "tunnel-resolver"
)

// RealHub is issue 27's lab: hub, peer1, peer2 and site on one WireGuard tunnel as installers
// write it, the hub's firewall of kind fw admitting the tunnel's services by interface name.
//
//   - hub: `Address = 10.44.0.1/24, fd44::1/64`, `MTU = 1380`, ListenPort 51820, a PresharedKey
//     per peer, PiVPN's PostUp/PostDown forwarding rules (`iptables -A FORWARD -i %i -j ACCEPT`,
//     nft on the nftables hub), forwarding on (/etc/sysctl.d, applied at boot), a Docker engine
//     (its FORWARD policy drop), the unit tunnel-web serving WebappPort on every address and
//     tunnel-resolver serving BoundPort only to what arrives on wg0;
//   - peer1: a PiVPN/wg-easy client file: no ListenPort, dual stack, `AllowedIPs = 10.44.0.0/24,
//     fd44::/64`, PresharedKey, PersistentKeepalive;
//   - peer2: a full-tunnel client (`AllowedIPs = 0.0.0.0/0, ::/0`): wg-quick installs its fwmark,
//     its rules to table 51820 and the nft table wg-quick-wg0; its default route leads to the hub,
//     which has no route out, so nothing leaves the lab;
//   - site: a peer with a network behind it (its hub-side `AllowedIPs = 10.44.0.4/32, fd44::4/128,
//     10.88.1.0/24`), serving WebappPort on 10.88.1.1, on its LAN link (a veth: the lab's kernel may have no dummy links).
//
// The firewall, policy drop, admits the services by interface: nftables `iifname "wg0" tcp dport
// 8080 accept`, ufw `allow in on wg0 to any port 8080`, iptables `-A INPUT -i wg0 -j ACCEPT`.
func RealHub(fw FirewallKind) Scenario {
	web := fmt.Sprintf("http://%s:%d/", HubTunnelAddr, WebappPort)
	web6 := fmt.Sprintf("http://[%s]:%d/", HubTunnelAddr6, WebappPort)
	site := fmt.Sprintf("http://%s:%d/", SiteServiceAddr, WebappPort)
	bound := fmt.Sprintf("http://%s:%d/", HubTunnelAddr, BoundPort)
	sc := Scenario{
		Name: "realhub-" + string(fw),
		Machines: []MachineSpec{
			{Name: "hub", Addr: HubAddr, Docker: true, TunnelAddr: HubTunnelAddr},
			{Name: "peer1", Addr: Peer1Addr, Docker: true, TunnelAddr: "10.44.0.2"},
			{Name: "peer2", Addr: Peer2Addr, Docker: true, TunnelAddr: "10.44.0.3"},
			{Name: "site", Addr: SiteAddr, TunnelAddr: "10.44.0.4"},
		},
		Probes: []ProbeSpec{
			{Name: "peer1-v4", From: "peer1", Target: web, Expect: ExpectReach},
			{Name: "peer1-v6", From: "peer1", Target: web6, Expect: ExpectReach},
			{Name: "peer1-bound", From: "peer1", Target: bound, Expect: ExpectReach},
			{Name: "peer2-v4", From: "peer2", Target: web, Expect: ExpectReach},
			{Name: "peer2-v6", From: "peer2", Target: web6, Expect: ExpectReach},
			{Name: "peer2-bound", From: "peer2", Target: bound, Expect: ExpectReach},
			{Name: "peer2-site", From: "peer2", Target: site, Expect: ExpectReach},
			{Name: "hub-site", From: "hub", Target: site, Expect: ExpectReach},
			{Name: "site-v4", From: "site", Target: web, Expect: ExpectReach},
		},
		Configure: func(ctx context.Context, l *Lab) error { return configureRealHub(ctx, l, fw) },
		Ready:     waitProbesAnswer,
	}
	for i := range sc.Probes {
		sc.Probes[i].Every, sc.Probes[i].Timeout = RealHubProbeEvery, RealHubProbeTimeout
	}
	return sc
}

// RealHubProbeEvery and RealHubProbeTimeout are the real hub's probes' cadence: fine enough
// that a takeover's gap reads within about a timeout of what it was (a call whose packets were
// lost fails after the timeout, and the next starts at once), so a test can bound the gap at
// half a second from the record; the headline figure is the benchmark's (20 ms, 100 ms).
const (
	RealHubProbeEvery   = 50 * time.Millisecond
	RealHubProbeTimeout = 150 * time.Millisecond
)

// RealHubProbes are the names of RealHub's probes, each reaching.
var RealHubProbes = []string{"peer1-v4", "peer1-v6", "peer1-bound", "peer2-v4", "peer2-v6", "peer2-bound", "peer2-site", "hub-site", "site-v4"}

// realHubPostUp is the hub's PostUp and PostDown for each firewall kind, as PiVPN and the
// tutorials write them: forwarding admitted by interface, with `%i` for the interface. On the
// nftables hub the lines are nft's, into the ruleset's own forward chain (iptables lines there
// would be a second firewall, which meshd refuses to adopt); the ufw and iptables hubs
// masquerade toward eth0 as the tutorials' lines do (nothing routes out of the lab: it changes
// nothing there).
func realHubPostUp(fw FirewallKind) (up, down string) {
	if fw == FirewallNftables {
		return `nft add rule inet filter forward iifname "%i" accept; nft add rule inet filter forward oifname "%i" accept`,
			`nft flush chain inet filter forward; nft add rule inet filter forward ct state established,related accept`
	}
	return `iptables -A FORWARD -i %i -j ACCEPT; iptables -A FORWARD -o %i -j ACCEPT; iptables -t nat -A POSTROUTING -o eth0 -j MASQUERADE; ip6tables -A FORWARD -i %i -j ACCEPT; ip6tables -A FORWARD -o %i -j ACCEPT`,
		`iptables -D FORWARD -i %i -j ACCEPT; iptables -D FORWARD -o %i -j ACCEPT; iptables -t nat -D POSTROUTING -o eth0 -j MASQUERADE; ip6tables -D FORWARD -i %i -j ACCEPT; ip6tables -D FORWARD -o %i -j ACCEPT`
}

// tunnelAddr6 is the IPv6 tunnel address of the machine whose IPv4 one is a (10.44.0.N: fd44::N).
func tunnelAddr6(m *Machine) string {
	return fmt.Sprintf("fd44::%d", m.TunnelAddr.As4()[3])
}

func configureRealHub(ctx context.Context, l *Lab, fw FirewallKind) error {
	hub := l.Machine("hub")
	names := []string{"peer1", "peer2", "site"}
	keys := map[string]wgtypes.Key{}
	psk := map[string]wgtypes.Key{}
	for _, n := range append([]string{"hub"}, names...) {
		k, err := wgtypes.GeneratePrivateKey()
		if err != nil {
			return err
		}
		keys[n] = k
		if psk[n], err = wgtypes.GenerateKey(); err != nil {
			return err
		}
	}
	up, down := realHubPostUp(fw)
	hubConf := fmt.Sprintf("[Interface]\nPrivateKey = %s\nAddress = %s/24, %s/64\nMTU = %d\nListenPort = %d\nPostUp = %s\nPostDown = %s\n",
		keys["hub"], HubTunnelAddr, HubTunnelAddr6, TunnelMTU, TunnelPort, up, down)
	for _, n := range names {
		p := l.Machine(n)
		allowed := fmt.Sprintf("%s/32, %s/128", p.TunnelAddr, tunnelAddr6(p))
		peerAllowed := fmt.Sprintf("%s, %s", TunnelRange, TunnelRange6)
		switch n {
		case "site":
			allowed += ", " + SiteRange
		case "peer2":
			peerAllowed = "0.0.0.0/0, ::/0"
		}
		// PiVPN's markers around each client.
		hubConf += fmt.Sprintf("### begin %s ###\n[Peer]\nPublicKey = %s\nPresharedKey = %s\nAllowedIPs = %s\n### end %s ###\n",
			n, keys[n].PublicKey(), psk[n], allowed, n)
		// A PiVPN or wg-easy client file: no ListenPort (the device picks a random one).
		conf := fmt.Sprintf("[Interface]\nPrivateKey = %s\nAddress = %s/24, %s/64\n\n[Peer]\nPublicKey = %s\nPresharedKey = %s\nEndpoint = %s:%d\nAllowedIPs = %s\nPersistentKeepalive = 25\n",
			keys[n], p.TunnelAddr, tunnelAddr6(p), keys["hub"].PublicKey(), psk[n], HubAddr, TunnelPort, peerAllowed)
		if err := enableTunnel(ctx, p, conf); err != nil {
			return err
		}
	}
	if err := enableTunnel(ctx, hub, hubConf); err != nil {
		return err
	}
	// PiVPN's /etc/sysctl.d file, applied at boot as systemd-sysctl does (the lab's boot runs no
	// systemd-sysctl of its own).
	if err := hub.WriteFile(ctx, "/etc/sysctl.d/99-pivpn.conf", []byte("net.ipv4.ip_forward=1\nnet.ipv6.conf.all.forwarding=1\n"), 0o644); err != nil {
		return err
	}
	if err := enableOneshot(ctx, hub, "meshlab-sysctl", "applies /etc/sysctl.d/99-pivpn.conf at boot, as systemd-sysctl does",
		"/sbin/sysctl -q -p /etc/sysctl.d/99-pivpn.conf"); err != nil {
		return err
	}
	svc := l.Labsvc()
	if err := hub.EnableService(ctx, RealHubWeb, fmt.Sprintf("%s serve --listen :%d --name hub-web", svc, WebappPort)); err != nil {
		return err
	}
	if err := hub.EnableService(ctx, RealHubBound, fmt.Sprintf("%s serve --listen :%d --bind-interface %s --name hub-resolver", svc, BoundPort, TunnelIface)); err != nil {
		return err
	}
	// The site's network: its LAN link (a veth pair, its other end unused) holding 10.88.1.1, raised before its tunnel, and its
	// service there.
	s := l.Machine("site")
	if err := enableOneshot(ctx, s, "site-lan", "the site's network behind its tunnel",
		"/bin/sh -c 'ip link add lan0 type veth peer name lan0-host && ip addr add "+SiteServiceAddr+"/24 dev lan0 && ip link set lan0-host up && ip link set lan0 up'"); err != nil {
		return err
	}
	if err := s.EnableService(ctx, "site-web", fmt.Sprintf("%s serve --listen %s:%d --name site-web", svc, SiteServiceAddr, WebappPort)); err != nil {
		return err
	}
	switch fw {
	case FirewallUFW:
		return configureRealUFW(ctx, hub)
	case FirewallNftables:
		if err := hub.WriteFile(ctx, "/etc/nftables.conf", []byte(realHubNftables), 0o755); err != nil {
			return err
		}
		_, err := hub.Run(ctx, "ln -sf /lib/systemd/system/nftables.service /etc/systemd/system/sysinit.target.wants/nftables.service")
		return err
	case FirewallIptables:
		return configureRealIptables(ctx, hub)
	}
	return fmt.Errorf("unknown firewall kind %q", fw)
}

// enableOneshot installs a Type=oneshot unit NAME.service wanted by sysinit.target (the boot
// runs it before the firewall's users and the tunnels).
func enableOneshot(ctx context.Context, m *Machine, name, desc, execStart string) error {
	text := "[Unit]\nDescription=" + desc + "\n\n[Service]\nType=oneshot\nExecStart=" + execStart + "\n\n[Install]\nWantedBy=sysinit.target\n"
	if err := m.WriteFile(ctx, "/etc/systemd/system/"+name+".service", []byte(text), 0o644); err != nil {
		return err
	}
	_, err := m.Run(ctx, `ln -sf "/etc/systemd/system/$1.service" "/etc/systemd/system/sysinit.target.wants/$1.service"`, name)
	return err
}

// configureRealUFW: ufw with IPv6 on (its default; the lab's machines have it off), incoming
// denied, the tunnel's port open, the services allowed only in on wg0.
func configureRealUFW(ctx context.Context, hub *Machine) error {
	script := `set -e
sed -i 's/^IPV6=.*/IPV6=yes/' /etc/default/ufw
ufw default deny incoming >/dev/null
ufw default allow outgoing >/dev/null
ufw default deny routed >/dev/null
ufw allow 22/tcp comment ssh >/dev/null
ufw allow 51820/udp comment wireguard >/dev/null
ufw allow in on wg0 to any port 8080 proto tcp comment 'web, tunnel only' >/dev/null
ufw allow in on wg0 to any port 8053 proto tcp comment 'resolver, tunnel only' >/dev/null
sed -i 's/^ENABLED=.*/ENABLED=yes/' /etc/ufw/ufw.conf
`
	_, err := hub.Run(ctx, script)
	return err
}

// realHubNftables admits the tunnel's services by interface name, policy drop.
var realHubNftables = strings.NewReplacer("{web}", fmt.Sprint(WebappPort), "{bound}", fmt.Sprint(BoundPort)).Replace(`#!/usr/sbin/nft -f
# the hub's firewall: the tunnel's port open, its services to the tunnel only

flush ruleset

table inet filter {
	chain input {
		type filter hook input priority filter; policy drop;
		ct state established,related accept
		ct state invalid drop
		iif "lo" accept
		meta l4proto { icmp, ipv6-icmp } accept
		tcp dport 22 accept comment "ssh"
		udp dport 51820 accept comment "wireguard"
		iifname "wg0" tcp dport {web} accept comment "web, tunnel only"
		iifname "wg0" tcp dport {bound} accept comment "resolver, tunnel only"
	}
	chain forward {
		type filter hook forward priority filter; policy drop;
		ct state established,related accept
	}
	chain output {
		type filter hook output priority filter; policy accept;
	}
}
`)

// realHubRules is rules.v4 or rules.v6 (iptables-save's form): the tunnel trusted by interface.
func realHubRules(icmp string) string {
	return `*filter
:INPUT DROP [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A INPUT -i lo -j ACCEPT
-A INPUT -p ` + icmp + ` -j ACCEPT
-A INPUT -p tcp -m tcp --dport 22 -m comment --comment ssh -j ACCEPT
-A INPUT -p udp -m udp --dport 51820 -m comment --comment wireguard -j ACCEPT
-A INPUT -i wg0 -m comment --comment "the tunnel is trusted" -j ACCEPT
COMMIT
`
}

func configureRealIptables(ctx context.Context, hub *Machine) error {
	if err := hub.WriteFile(ctx, "/etc/iptables/rules.v4", []byte(realHubRules("icmp")), 0o640); err != nil {
		return err
	}
	if err := hub.WriteFile(ctx, "/etc/iptables/rules.v6", []byte(realHubRules("ipv6-icmp")), 0o640); err != nil {
		return err
	}
	if err := hub.WriteFile(ctx, "/etc/systemd/system/netfilter-persistent.service", []byte(iptablesUnit), 0o644); err != nil {
		return err
	}
	_, err := hub.Run(ctx, "ln -sf /etc/systemd/system/netfilter-persistent.service /etc/systemd/system/sysinit.target.wants/netfilter-persistent.service")
	return err
}
