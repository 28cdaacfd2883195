package lab

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// Scenario is a lab's shape: its machines, what is put on them before and after their first
// boot, and the probes that watch them.
type Scenario struct {
	Name     string
	Machines []MachineSpec
	// Hosts are the addresses beyond the machines' own that the machines talk to (a fleet
	// simulator's machine holds one for each simulated node): the neighbour table is raised for
	// them too.
	Hosts  int
	Probes []ProbeSpec
	// Configure writes the machines' configuration while they are still powered off (what their
	// disks hold): firewall files, wg-quick files, enabled units.
	Configure func(ctx context.Context, l *Lab) error
	// Populate acts on the booted machines: containers created through their engines.
	Populate func(ctx context.Context, l *Lab) error
	// Ready waits until the scenario serves (probes answering), after the probes started.
	Ready func(ctx context.Context, l *Lab) error
}

// FirewallKind is the found firewall a predecessor hub runs.
type FirewallKind string

const (
	// FirewallUFW: ufw over iptables, incoming `allow` and forwarded `route allow` rules, the
	// forwarded ones reached from Docker's DOCKER-USER chain the way ufw-docker's after.rules
	// sends it there (ufwDockerRules).
	FirewallUFW FirewallKind = "ufw"
	// FirewallNftables: a plain ruleset in /etc/nftables.conf (beginning with `flush ruleset`),
	// loaded by nftables.service.
	FirewallNftables FirewallKind = "nftables"
	// FirewallIptables: plain iptables rules in /etc/iptables/rules.v4 and rules.v6
	// (iptables-persistent's files), loaded at boot by netfilter-persistent.service: INPUT
	// dropping by default, the served ports allowed, Docker's published ports filtered in
	// DOCKER-USER (over IPv6, Docker's proxy is on INPUT).
	FirewallIptables FirewallKind = "iptables"
)

// The predecessor's numbers: addresses, ports, names a test asserts on.
const (
	HubAddr     = "198.51.100.10"
	Peer1Addr   = "198.51.100.11"
	Peer2Addr   = "198.51.100.12"
	NewnodeAddr = "198.51.100.13"
	OutsideAddr = "198.51.100.20"

	TunnelIface   = "wg0"
	TunnelRange   = "10.44.0.0/24"
	HubTunnelAddr = "10.44.0.1"
	TunnelPort    = 51820

	// WebappPort is the served port of the container named like the catalogue's webapp module.
	WebappPort = 8080
	// WebappFile is the file the webapp module declares, rewritten by the predecessor's control.
	WebappFile = "/etc/webapp/app.conf"
	// RegistryPort is the registry's foundation port default, held by predecessor-registry.
	RegistryPort = 5000
	// StorePort is the store's foundation port default: nothing serves it in the predecessor.
	StorePort = 6379
	// DeniedPort is published by the metrics container and allowed by no firewall rule;
	// DashboardPort is the dashboard container's, allowed by none either. Both containers listen
	// inside on DeniedInsidePort, each published on its own port: what a forwarded opening of
	// DeniedInsidePort opens is the port the client addresses, never theirs (issue 34).
	DeniedPort    = 9090
	DashboardPort = 9091
	// DeniedInsidePort is where meshd's registry is published in the walks (genesis --port
	// registry=5001, the predecessor's registry holding 5000), so a forwarded opening of it is in
	// force from genesis on; no found rule names it.
	DeniedInsidePort = 5001

	// PredecessorControl is the unit standing in for the predecessor's control daemon.
	PredecessorControl = "predecessor-control"
)

// CatalogueImages are the image names the catalogue's default modules use; each machine's
// engine has them all, each the labsvc image serving on the ports its module's container declares.
var CatalogueImages = []string{"lab/echo:1", "meshd-lab/store:1", "meshd-lab/broker:1", "meshd-lab/registry:1"}

// imageCmd is what each catalogue image runs: labsvc on the container ports the catalogue's
// manifests publish (store 6379, broker 5672 and 15672, registry 5000, services 8080).
var imageCmd = map[string]string{
	"lab/echo:1":           `CMD ["serve"]`,
	"meshd-lab/store:1":    `CMD ["serve", "--listen", ":6379", "--name", "store"]`,
	"meshd-lab/broker:1":   `CMD ["serve", "--listen", ":5672", "--listen", ":15672", "--name", "broker"]`,
	"meshd-lab/registry:1": `CMD ["serve", "--listen", ":5000", "--name", "registry"]`,
}

// ScenarioNames lists what ScenarioByName knows.
var ScenarioNames = []string{"predecessor-ufw", "predecessor-nftables", "predecessor-iptables", "predecessor-apps-ufw", "predecessor-apps-nftables", "measured", "measured-incoming", "realhub-ufw", "realhub-nftables", "realhub-iptables", "bare"}

// ScenarioByName returns a scenario by its name.
func ScenarioByName(name string) (Scenario, error) {
	switch name {
	case "predecessor-ufw", "predecessor", "":
		return Predecessor(FirewallUFW), nil
	case "predecessor-nftables", "predecessor-nft":
		return Predecessor(FirewallNftables), nil
	case "predecessor-iptables":
		return Predecessor(FirewallIptables), nil
	case "predecessor-apps-ufw", "predecessor-apps":
		return PredecessorWithApps(FirewallUFW), nil
	case "predecessor-apps-nftables":
		return PredecessorWithApps(FirewallNftables), nil
	case "measured":
		return Measured(MeasuredContainers, MeasuredFull)
	case "measured-incoming":
		return Measured(MeasuredContainers, MeasuredIncomingOnly)
	case "realhub-ufw":
		return RealHub(FirewallUFW), nil
	case "realhub-nftables", "realhub-nft":
		return RealHub(FirewallNftables), nil
	case "realhub-iptables":
		return RealHub(FirewallIptables), nil
	case "bare":
		return Bare(), nil
	}
	return Scenario{}, fmt.Errorf("no scenario %q (known: %s)", name, strings.Join(ScenarioNames, ", "))
}

// Bare is two bare machines with engines and an outside machine, nothing found on them.
func Bare() Scenario {
	return Scenario{
		Name: "bare",
		Machines: []MachineSpec{
			{Name: "hub", Addr: HubAddr, Docker: true},
			{Name: "newnode", Addr: NewnodeAddr, Docker: true},
			{Name: "outside", Addr: OutsideAddr},
		},
	}
}

// Predecessor is the lab bed of ADR 0100 and ADR 0105: a hub the predecessor left with a found
// firewall of kind fw, service containers, a file its control keeps rewriting, a container on
// the registry's port and a wg-quick tunnel to two peers; a bare newnode; an outside machine.
func Predecessor(fw FirewallKind) Scenario {
	return Scenario{
		Name: "predecessor-" + string(fw),
		Machines: []MachineSpec{
			{Name: "hub", Addr: HubAddr, Docker: true, TunnelAddr: HubTunnelAddr},
			{Name: "peer1", Addr: Peer1Addr, Docker: true, TunnelAddr: "10.44.0.2"},
			{Name: "peer2", Addr: Peer2Addr, Docker: true, TunnelAddr: "10.44.0.3"},
			{Name: "newnode", Addr: NewnodeAddr, Docker: true},
			{Name: "outside", Addr: OutsideAddr},
		},
		Probes: []ProbeSpec{
			{Name: "peer1-tunnel", From: "peer1", Target: fmt.Sprintf("http://%s:%d/", HubTunnelAddr, WebappPort), Expect: ExpectReach},
			{Name: "peer2-tunnel", From: "peer2", Target: fmt.Sprintf("http://%s:%d/", HubTunnelAddr, WebappPort), Expect: ExpectReach},
			{Name: "served", From: "newnode", Target: fmt.Sprintf("http://%s:%d/", HubAddr, WebappPort), Expect: ExpectReach},
			{Name: "outside-store", From: "outside", Target: fmt.Sprintf("tcp://%s:%d", HubAddr, StorePort), Expect: ExpectUnreachable},
			{Name: "outside-metrics", From: "outside", Target: fmt.Sprintf("tcp://%s:%d", HubAddr, DeniedPort), Expect: ExpectUnreachable},
			{Name: "outside-dashboard", From: "outside", Target: fmt.Sprintf("tcp://%s:%d", HubAddr, DashboardPort), Expect: ExpectUnreachable},
		},
		Configure: func(ctx context.Context, l *Lab) error { return configurePredecessor(ctx, l, fw) },
		Populate:  populatePredecessor,
		Ready:     waitProbesAnswer,
	}
}

func configurePredecessor(ctx context.Context, l *Lab, fw FirewallKind) error {
	hub := l.Machine("hub")
	keys := map[string]wgtypes.Key{}
	for _, n := range []string{"hub", "peer1", "peer2"} {
		k, err := wgtypes.GeneratePrivateKey()
		if err != nil {
			return err
		}
		keys[n] = k
	}
	hubConf := fmt.Sprintf("# the predecessor's tunnel\n[Interface]\nAddress = %s/24\nListenPort = %d\nPrivateKey = %s\n",
		HubTunnelAddr, TunnelPort, keys["hub"])
	for _, n := range []string{"peer1", "peer2"} {
		p := l.Machine(n)
		hubConf += fmt.Sprintf("\n# %s\n[Peer]\nPublicKey = %s\nAllowedIPs = %s/32\n", n, keys[n].PublicKey(), p.TunnelAddr)
		conf := fmt.Sprintf("[Interface]\nAddress = %s/24\nListenPort = %d\nPrivateKey = %s\n\n# hub\n[Peer]\nPublicKey = %s\nEndpoint = %s:%d\nAllowedIPs = %s\nPersistentKeepalive = 5\n",
			p.TunnelAddr, TunnelPort, keys[n], keys["hub"].PublicKey(), HubAddr, TunnelPort, TunnelRange)
		if err := enableTunnel(ctx, p, conf); err != nil {
			return err
		}
	}
	if err := enableTunnel(ctx, hub, hubConf); err != nil {
		return err
	}
	if err := hub.WriteFile(ctx, WebappFile, []byte(fmt.Sprintf("# written by the predecessor\nlisten %d\n", WebappPort)), 0o644); err != nil {
		return err
	}
	// The predecessor's control: keeps rewriting the webapp's file, with a generation that changes.
	control := fmt.Sprintf(`/bin/sh -c 'while :; do printf "# written by the predecessor control\nlisten %d\ngeneration %%s\n" "$(date +%%s%%N)" > %[2]s.tmp && mv %[2]s.tmp %[2]s; sleep 3; done'`,
		WebappPort, WebappFile)
	if err := hub.EnableService(ctx, PredecessorControl, control); err != nil {
		return err
	}
	switch fw {
	case FirewallUFW:
		return configureUFW(ctx, hub)
	case FirewallNftables:
		return configureNftables(ctx, hub)
	case FirewallIptables:
		return configureIptables(ctx, hub)
	}
	return fmt.Errorf("unknown firewall kind %q", fw)
}

func enableTunnel(ctx context.Context, m *Machine, conf string) error {
	if err := m.WriteFile(ctx, "/etc/wireguard/"+TunnelIface+".conf", []byte(conf), 0o600); err != nil {
		return err
	}
	_, err := m.Run(ctx, `ln -sf /lib/systemd/system/wg-quick@.service "/etc/systemd/system/multi-user.target.wants/wg-quick@$1.service"`, TunnelIface)
	return err
}

// ufwDockerRules hook Docker's published ports into ufw in the shape ufw-docker's after.rules
// gives them (said here in the lab's own words): DOCKER-USER, which Docker puts first in FORWARD,
// hands every packet to ufw's route rules first (ufw-user-forward), so a `ufw route allow` there
// matches the container's port after Docker's DNAT; then lets the private networks through (the
// tunnel's range, the containers' own traffic) and DNS answers; then drops what starts a
// connection toward a private network (the containers' bridges) from anywhere else. The drop goes
// through ufw-after-forward, one of ufw's primary chains, which `ufw disable` flushes and keeps,
// so a disabled ufw (retired at the flip) lets Docker's forwarding through again; ufw-docker's own
// deny chain would outlive `ufw disable`. ufw loads after.rules before its user chains exist, so
// this declares the one it jumps to (user.rules fills it right after).
const ufwDockerRules = `# meshlab: Docker's published ports go through ufw's route rules (ufw-docker's shape)
*filter
:DOCKER-USER - [0:0]
:ufw-user-forward - [0:0]
-A DOCKER-USER -j ufw-user-forward
-A DOCKER-USER -s 10.0.0.0/8 -j RETURN
-A DOCKER-USER -s 172.16.0.0/12 -j RETURN
-A DOCKER-USER -s 192.168.0.0/16 -j RETURN
-A DOCKER-USER -p udp -m udp --sport 53 --dport 1024:65535 -j RETURN
-A DOCKER-USER -d 10.0.0.0/8 -p tcp -m tcp --tcp-flags FIN,SYN,RST,ACK SYN -j ufw-after-forward
-A DOCKER-USER -d 172.16.0.0/12 -p tcp -m tcp --tcp-flags FIN,SYN,RST,ACK SYN -j ufw-after-forward
-A DOCKER-USER -d 192.168.0.0/16 -p tcp -m tcp --tcp-flags FIN,SYN,RST,ACK SYN -j ufw-after-forward
-A DOCKER-USER -d 10.0.0.0/8 -p udp -m udp --dport 0:32767 -j ufw-after-forward
-A DOCKER-USER -d 172.16.0.0/12 -p udp -m udp --dport 0:32767 -j ufw-after-forward
-A DOCKER-USER -d 192.168.0.0/16 -p udp -m udp --dport 0:32767 -j ufw-after-forward
-A DOCKER-USER -j RETURN
-A ufw-after-forward -o docker0 -m conntrack --ctstate NEW -j DROP
COMMIT
`

func configureUFW(ctx context.Context, hub *Machine) error {
	// With ufw inactive each command only rewrites /etc/ufw/user.rules, as it did on the
	// predecessor's machine long before; the boot loads them.
	script := `set -e
ufw default deny incoming >/dev/null
ufw default allow outgoing >/dev/null
ufw default deny routed >/dev/null
ufw allow 22/tcp comment ssh >/dev/null
ufw allow 51820/udp comment 'predecessor tunnel' >/dev/null
ufw allow 8080/tcp comment webapp >/dev/null
ufw allow 5000/tcp comment registry >/dev/null
ufw route allow proto tcp from any to any port 8080 comment webapp >/dev/null
ufw route allow proto tcp from any to any port 5000 comment registry >/dev/null
cat "$1" >> /etc/ufw/after.rules
sed -i 's/^ENABLED=.*/ENABLED=yes/' /etc/ufw/ufw.conf
`
	if err := hub.WriteFile(ctx, "/etc/ufw/meshlab-docker.rules", []byte(ufwDockerRules), 0o640); err != nil {
		return err
	}
	_, err := hub.Run(ctx, script, "/etc/ufw/meshlab-docker.rules")
	if err == nil {
		_, err = hub.Run(ctx, "rm -f /etc/ufw/meshlab-docker.rules")
	}
	return err
}

const nftablesConf = `#!/usr/sbin/nft -f
# the predecessor's firewall: each served port allowed, the rest denied

flush ruleset

table inet filter {
	chain input {
		type filter hook input priority filter; policy drop;
		ct state established,related accept
		ct state invalid drop
		iif "lo" accept
		meta l4proto icmp accept
		tcp dport 22 accept comment "ssh"
		udp dport 51820 accept comment "predecessor tunnel"
		tcp dport 8080 accept comment "webapp"
		tcp dport 5000 accept comment "registry"
	}
	chain forward {
		type filter hook forward priority filter; policy drop;
		ct state established,related accept
		iifname "docker0" accept
		oifname "docker0" tcp dport 8080 accept comment "webapp"
		oifname "docker0" tcp dport 5000 accept comment "registry"
	}
	chain output {
		type filter hook output priority filter; policy accept;
	}
}
`

func configureNftables(ctx context.Context, hub *Machine) error {
	if err := hub.WriteFile(ctx, "/etc/nftables.conf", []byte(nftablesConf), 0o755); err != nil {
		return err
	}
	_, err := hub.Run(ctx, "ln -sf /lib/systemd/system/nftables.service /etc/systemd/system/sysinit.target.wants/nftables.service")
	return err
}

// iptablesRules is a hand-written /etc/iptables/rules.v4 (iptables-save's form, the filter table
// only): each served port allowed on INPUT, the rest dropped; Docker's published ports filtered
// in DOCKER-USER (which Docker puts first in FORWARD and keeps), matched on the port the client
// addressed before Docker's DNAT, the rest of what is new toward the containers dropped.
const iptablesRules = `# the predecessor's firewall: each served port allowed, the rest denied
*filter
:INPUT DROP [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
:DOCKER-USER - [0:0]
-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A INPUT -i lo -j ACCEPT
-A INPUT -p icmp -j ACCEPT
-A INPUT -p tcp -m tcp --dport 22 -m comment --comment ssh -j ACCEPT
-A INPUT -p udp -m udp --dport 51820 -m comment --comment "predecessor tunnel" -j ACCEPT
-A INPUT -p tcp -m tcp --dport 8080 -m comment --comment webapp -j ACCEPT
-A INPUT -p tcp -m tcp --dport 5000 -m comment --comment registry -j ACCEPT
-A DOCKER-USER -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN
-A DOCKER-USER -i docker0 -j RETURN
-A DOCKER-USER -p tcp -m conntrack --ctorigdstport 8080 -m comment --comment webapp -j RETURN
-A DOCKER-USER -p tcp -m conntrack --ctorigdstport 5000 -m comment --comment registry -j RETURN
-A DOCKER-USER -o docker0 -m conntrack --ctstate NEW -j DROP
COMMIT
`

// ip6tablesRules is its /etc/iptables/rules.v6, the same rules for IPv6 (Docker publishes every
// port on [::] too, and without its ip6tables option reaches the container through its proxy, on
// INPUT), with ICMPv6 allowed, as IPv6's neighbour discovery needs.
const ip6tablesRules = `# the predecessor's firewall over IPv6: each served port allowed, the rest denied
*filter
:INPUT DROP [0:0]
:FORWARD DROP [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
-A INPUT -i lo -j ACCEPT
-A INPUT -p ipv6-icmp -j ACCEPT
-A INPUT -p tcp -m tcp --dport 22 -m comment --comment ssh -j ACCEPT
-A INPUT -p udp -m udp --dport 51820 -m comment --comment "predecessor tunnel" -j ACCEPT
-A INPUT -p tcp -m tcp --dport 8080 -m comment --comment webapp -j ACCEPT
-A INPUT -p tcp -m tcp --dport 5000 -m comment --comment registry -j ACCEPT
COMMIT
`

// iptablesUnit is what Debian's iptables-persistent does at boot, as the lab's boot runs it.
const iptablesUnit = `[Unit]
Description=the predecessor's iptables rules (as netfilter-persistent loads them)
[Service]
Type=oneshot
ExecStart=/usr/sbin/iptables-restore /etc/iptables/rules.v4
ExecStart=/usr/sbin/ip6tables-restore /etc/iptables/rules.v6
[Install]
WantedBy=sysinit.target
`

func configureIptables(ctx context.Context, hub *Machine) error {
	if err := hub.WriteFile(ctx, "/etc/iptables/rules.v4", []byte(iptablesRules), 0o640); err != nil {
		return err
	}
	if err := hub.WriteFile(ctx, "/etc/iptables/rules.v6", []byte(ip6tablesRules), 0o640); err != nil {
		return err
	}
	if err := hub.WriteFile(ctx, "/etc/systemd/system/netfilter-persistent.service", []byte(iptablesUnit), 0o644); err != nil {
		return err
	}
	_, err := hub.Run(ctx, "ln -sf /etc/systemd/system/netfilter-persistent.service /etc/systemd/system/sysinit.target.wants/netfilter-persistent.service")
	return err
}

func populatePredecessor(ctx context.Context, l *Lab) error {
	hub := l.Machine("hub")
	runs := [][]string{
		{"run", "-d", "--name", "webapp", "--restart", "unless-stopped", "-e", "GREETING=hello",
			"-p", fmt.Sprintf("%d:%d", WebappPort, WebappPort), "-v", "/etc/webapp:/etc/webapp:ro",
			"lab/echo:1", "serve", "--listen", fmt.Sprintf(":%d", WebappPort), "--name", "webapp"},
		{"run", "-d", "--name", "predecessor-registry", "--restart", "always",
			"-p", fmt.Sprintf("%d:%d", RegistryPort, RegistryPort),
			ImageName, "serve", "--listen", fmt.Sprintf(":%d", RegistryPort), "--name", "predecessor-registry"},
		{"run", "-d", "--name", "metrics", "--restart", "unless-stopped",
			"-p", fmt.Sprintf("%d:%d", DeniedPort, DeniedInsidePort),
			ImageName, "serve", "--listen", fmt.Sprintf(":%d", DeniedInsidePort), "--name", "metrics"},
		{"run", "-d", "--name", "dashboard", "--restart", "unless-stopped",
			"-p", fmt.Sprintf("%d:%d", DashboardPort, DeniedInsidePort),
			ImageName, "serve", "--listen", fmt.Sprintf(":%d", DeniedInsidePort), "--name", "dashboard"},
	}
	for _, r := range runs {
		if _, err := hub.Docker(ctx, r...); err != nil {
			return err
		}
	}
	return nil
}

// waitProbesAnswer waits until every reaching probe's latest call succeeded.
func waitProbesAnswer(ctx context.Context, l *Lab) error {
	deadline := time.Now().Add(45 * time.Second)
	for {
		sums, err := l.Probes()
		if err != nil {
			return err
		}
		var waiting []string
		for _, s := range sums {
			if s.Expect != ExpectReach {
				continue
			}
			if s.Calls == 0 || s.Successes == 0 || (s.Failures > 0 && s.LastSuccess == "") {
				waiting = append(waiting, s.Name+": "+s.LastError)
				continue
			}
			if last, err := l.lastCall(s.Name); err != nil || !last {
				waiting = append(waiting, s.Name+": "+s.LastError)
			}
		}
		if len(waiting) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			sort.Strings(waiting)
			return fmt.Errorf("probes not answering after 45s: %s", strings.Join(waiting, "; "))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// lastCall reports whether a probe's latest recorded call succeeded.
func (l *Lab) lastCall(name string) (bool, error) {
	s, err := l.Probe(name, time.Now().Add(-600*time.Millisecond))
	if err != nil {
		return false, err
	}
	return s.Calls > 0 && s.Failures == 0, nil
}
