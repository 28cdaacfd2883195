package lab

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// The predecessor's own apps on the hub (issue 11): an app container calling its own redis and
// broker containers at their bridge addresses on the standard ports, which the guard guards.
const (
	// PredApp is the predecessor's app container; it calls pred-redis and pred-broker.
	PredApp = "pred-app"
	// BrokerPort and BrokerManagementPort are the broker's standard ports (the broker module's
	// container ports): the predecessor's broker serves on them inside its container.
	BrokerPort           = 5672
	BrokerManagementPort = 15672
)

// PredecessorWithApps is Predecessor(fw) with the predecessor's app talking to its own store and
// broker on the hub's bridge: containers pred-redis (6379) and pred-broker (5672, 15672), nothing
// published, and pred-app, a container whose probes call them at their bridge addresses on those
// container ports (app-redis, app-broker, app-broker-mgmt) and the machine's own published
// registry port from the bridge (app-registry). Outside probes the store over IPv6 and the
// broker's ports (5672, 15672) over IPv4 and IPv6; each must stay unreachable. Over IPv6 that proves something only
// with nftables, whose hub here accepts ICMPv6: the lab's ufw runs with IPV6=no, dropping all IPv6.
func PredecessorWithApps(fw FirewallKind) Scenario {
	sc := Predecessor(fw)
	sc.Name = "predecessor-apps-" + string(fw)
	if fw == FirewallNftables {
		// This hub's firewall lets IPv6's neighbour discovery in, so outside reaches it over IPv6
		// the way its rules allow. (ufw here runs with IPV6=no, which drops all IPv6.)
		configure := sc.Configure
		sc.Configure = func(ctx context.Context, l *Lab) error {
			if err := configure(ctx, l); err != nil {
				return err
			}
			_, err := l.Machine("hub").Run(ctx, `sed -i 's/meta l4proto icmp accept/meta l4proto { icmp, ipv6-icmp } accept/' /etc/nftables.conf`)
			return err
		}
	}
	base := sc.Populate
	sc.Populate = func(ctx context.Context, l *Lab) error {
		if err := base(ctx, l); err != nil {
			return err
		}
		hub := l.Machine("hub")
		for _, r := range [][]string{
			{"run", "-d", "--name", "pred-redis", "--restart", "unless-stopped",
				ImageName, "serve", "--listen", fmt.Sprintf(":%d", StorePort), "--name", "pred-redis"},
			{"run", "-d", "--name", "pred-broker", "--restart", "unless-stopped", ImageName, "serve",
				"--listen", fmt.Sprintf(":%d", BrokerPort), "--listen", fmt.Sprintf(":%d", BrokerManagementPort), "--name", "pred-broker"},
		} {
			if _, err := hub.Docker(ctx, r...); err != nil {
				return err
			}
		}
		return nil
	}
	hub6 := Addr6(mustAddr(HubAddr))
	sc.Probes = append(sc.Probes,
		ProbeSpec{Name: "app-redis", From: "hub", Container: PredApp, Target: fmt.Sprintf("http://{container:pred-redis}:%d/", StorePort), Expect: ExpectReach},
		ProbeSpec{Name: "app-broker", From: "hub", Container: PredApp, Target: fmt.Sprintf("http://{container:pred-broker}:%d/", BrokerPort), Expect: ExpectReach},
		ProbeSpec{Name: "app-broker-mgmt", From: "hub", Container: PredApp, Target: fmt.Sprintf("http://{container:pred-broker}:%d/", BrokerManagementPort), Expect: ExpectReach},
		ProbeSpec{Name: "app-registry", From: "hub", Container: PredApp, Target: fmt.Sprintf("http://%s:%d/", HubAddr, RegistryPort), Expect: ExpectReach},
		ProbeSpec{Name: "outside-store6", From: "outside", Target: fmt.Sprintf("tcp://[%s]:%d", hub6, StorePort), Expect: ExpectUnreachable},
		ProbeSpec{Name: "outside-broker", From: "outside", Target: fmt.Sprintf("tcp://%s:%d", HubAddr, BrokerPort), Expect: ExpectUnreachable},
		ProbeSpec{Name: "outside-broker6", From: "outside", Target: fmt.Sprintf("tcp://[%s]:%d", hub6, BrokerPort), Expect: ExpectUnreachable},
		ProbeSpec{Name: "outside-mgmt", From: "outside", Target: fmt.Sprintf("tcp://%s:%d", HubAddr, BrokerManagementPort), Expect: ExpectUnreachable},
		ProbeSpec{Name: "outside-mgmt6", From: "outside", Target: fmt.Sprintf("tcp://[%s]:%d", hub6, BrokerManagementPort), Expect: ExpectUnreachable},
	)
	return sc
}

// MeasuredFirewall is the found firewall of the measured machine.
type MeasuredFirewall string

const (
	// MeasuredFull filters incoming and forwarded traffic: an allow rule for each served port on
	// both paths (54 incoming and 52 forwarding rules for 60 containers), the rest dropped.
	MeasuredFull MeasuredFirewall = "full"
	// MeasuredIncomingOnly filters only incoming traffic: the same incoming rules, no forwarding
	// filter, so published container ports bypass it (Docker forwards them).
	MeasuredIncomingOnly MeasuredFirewall = "incoming"
)

// The measured machine's numbers (research 012).
const (
	// MeasuredContainers is how many containers the measured machine runs.
	MeasuredContainers = 60
	// MeasuredStorePort and MeasuredBrokerPort are where the predecessor publishes its own store
	// and broker: not the standard ports, which the foundation binds. Its broker holds the
	// management port (15672) on loopback.
	MeasuredStorePort  = 16379
	MeasuredBrokerPort = 5673
	// MeasuredSharedInsidePort is where svc01 and svc02 listen inside their containers, each
	// published on its own port (8101, 8102), as services built from one image are: the found
	// firewall's forwarding rule for either (on the port after Docker's DNAT) names both.
	MeasuredSharedInsidePort = 8100
	// OperatorHome is the operator's home on the measured hub (under /var/lib, which a lab
	// machine overlays: /root would be the host's).
	OperatorHome = "/var/lib/operator"
)

// MeasuredControl are the predecessor's control daemons on the measured hub, user-level daemons of
// the operator (not system services): predecessor-sync rewrites the synced files every 3 s,
// predecessor-watch keeps its own state. The operator stops both before adopting.
var MeasuredControl = []string{"predecessor-sync", "predecessor-watch"}

// MeasuredSystemFiles are the synced files that are system files: an ssh server drop-in, the
// package manager's configuration and one service's configuration (webapp's, which the catalogue's
// webapp module declares).
var MeasuredSystemFiles = []string{"/etc/ssh/sshd_config.d/50-predecessor.conf", "/etc/apt/apt.conf.d/90predecessor", WebappFile}

// measuredOperatorFiles are the rest of the 12 synced files: the operator's shell and agent files.
var measuredOperatorFiles = []string{".bashrc", ".profile", ".bash_aliases", ".gitconfig", ".tmux.conf", ".ssh/config",
	".config/predecessor/agent.yaml", ".config/predecessor/hosts.yaml", ".config/predecessor/token"}

// MeasuredSyncedFiles are the 12 files the predecessor's configuration sync writes.
func MeasuredSyncedFiles() []string {
	out := append([]string(nil), MeasuredSystemFiles...)
	for _, f := range measuredOperatorFiles {
		out = append(out, OperatorHome+"/"+f)
	}
	return out
}

// measuredCtr is one of the measured hub's containers.
type measuredCtr struct {
	name    string
	image   string
	publish []string // docker -p values
	listen  []int
	extra   []string // more docker run arguments
	// served is the published port a caller outside the machine uses, 0 for none.
	served int
	// forwardPort is the container port forwarded to (what a forwarding rule matches).
	forwardPort int
	// imageCmd runs the image's own command (it serves on 8080) instead of serve --listen.
	imageCmd bool
	// project is the Compose project a container was started by, "" for none: it runs on the
	// project's network (NetworkOf) as Compose leaves it (composeArgs).
	project string
}

// measuredHub is the measured hub's containers for n containers in all: the predecessor's
// store, broker (published on 5673, 5672 inside; management port on loopback), registry and
// webapp; services svcNN each published on its own port (svc01 and svc02 listening inside on one
// port, MeasuredSharedInsidePort); and pairs svcNN-redis (6379 on the bridge, unpublished) and
// svcNN-worker (a container calling its redis and the broker at their bridge addresses on the
// standard ports). n = 60 gives 52 published containers and 4 pairs; n = 12 gives 10 and 1.
// Services svc03 to svc14 (as many as there are) are Compose services, three to a project
// (MeasuredProjects): each on its project's network, listening on MeasuredComposePort inside.
type measuredHub struct {
	ctrs     []measuredCtr
	workers  []string
	redises  []string
	projects []string
}

// MeasuredProjects are the Compose projects of the measured hub, three services each.
var MeasuredProjects = []string{"shop", "blog", "crm", "wiki"}

// MeasuredComposePort is where a Compose service of the measured hub listens inside its
// container: its published port is another (81NN).
const MeasuredComposePort = 8080

// MeasuredNetwork is the network Compose creates for a project: PROJECT_default.
func MeasuredNetwork(project string) string { return project + "_default" }

// composeArgs are the docker run arguments Compose gives service svc of project: its labels, its
// project's network with the service's name as an alias, and what the services' file sets (a
// non-root user, an added capability, a memory limit, a health check).
func composeArgs(project, svc string) []string {
	return []string{
		"--label", "com.docker.compose.project=" + project, "--label", "com.docker.compose.service=" + svc,
		"--label", "com.docker.compose.container-number=1", "--label", "com.docker.compose.oneoff=False",
		"--network", MeasuredNetwork(project), "--network-alias", svc,
		"--user", "65534", "--cap-add", "NET_ADMIN", "--memory", "64m",
		"--health-cmd", "/labsvc probe", "--health-interval", "30s",
	}
}

func measuredLayout(n int) (measuredHub, error) {
	pairs := max(1, n/15)
	services := n - 4 - 2*pairs
	if services < 1 {
		return measuredHub{}, fmt.Errorf("measured scenario: %d containers is too few (at least 7)", n)
	}
	var lay measuredHub
	lay.ctrs = []measuredCtr{
		{name: "pred-store", image: ImageName, publish: []string{fmt.Sprintf("%d:%d", MeasuredStorePort, MeasuredStorePort)},
			listen: []int{MeasuredStorePort}, served: MeasuredStorePort, forwardPort: MeasuredStorePort},
		{name: "pred-broker", image: ImageName,
			publish: []string{fmt.Sprintf("%d:%d", MeasuredBrokerPort, BrokerPort), fmt.Sprintf("127.0.0.1:%d:%d", BrokerManagementPort, BrokerManagementPort)},
			listen:  []int{BrokerPort, BrokerManagementPort}, served: MeasuredBrokerPort, forwardPort: BrokerPort},
		{name: "predecessor-registry", image: ImageName, publish: []string{fmt.Sprintf("%d:%d", RegistryPort, RegistryPort)},
			listen: []int{RegistryPort}, served: RegistryPort, forwardPort: RegistryPort},
		// webapp as the catalogue's module declares it (its image's own command, serving 8080), so
		// its take adopts it in place.
		{name: "webapp", image: "lab/echo:1", publish: []string{fmt.Sprintf("%d:%d", WebappPort, WebappPort)},
			served: WebappPort, forwardPort: WebappPort, imageCmd: true,
			extra: []string{"-e", "GREETING=hello", "-v", "/srv/webapp:/data"}},
	}
	for i := 1; i <= services; i++ {
		p, inside := 8100+i, 8100+i
		if i <= 2 {
			inside = MeasuredSharedInsidePort // svc01 and svc02: one port inside, each its own published
		}
		c := measuredCtr{name: fmt.Sprintf("svc%02d", i), image: ImageName}
		if k := (i - 3) / 3; i >= 3 && k < len(MeasuredProjects) {
			inside, c.project = MeasuredComposePort, MeasuredProjects[k]
			c.extra = composeArgs(c.project, c.name)
			if !slices.Contains(lay.projects, c.project) {
				lay.projects = append(lay.projects, c.project)
			}
		}
		c.publish, c.listen, c.served, c.forwardPort = []string{fmt.Sprintf("%d:%d", p, inside)}, []int{inside}, p, inside
		lay.ctrs = append(lay.ctrs, c)
	}
	for i := 1; i <= pairs; i++ {
		name := fmt.Sprintf("svc%02d-redis", i)
		lay.ctrs = append(lay.ctrs, measuredCtr{name: name, image: ImageName, listen: []int{StorePort}})
		lay.redises = append(lay.redises, name)
		lay.workers = append(lay.workers, fmt.Sprintf("svc%02d-worker", i))
	}
	return lay, nil
}

// served are the containers published to callers outside the machine, with their ports.
func (lay measuredHub) served() []measuredCtr {
	var out []measuredCtr
	for _, c := range lay.ctrs {
		if c.served != 0 {
			out = append(out, c)
		}
	}
	return out
}

// Measured is the machine research 012 measured, in the lab: a hub running n containers (60 on
// the real one) with a found nftables firewall allowing each served port (fw: on the incoming
// and forwarding paths, or incoming only), 12 files a configuration sync keeps rewriting (3 of
// them system files), the predecessor's control as the operator's user-level daemons, a broker
// holding the management port on loopback and the registry's port held; a peer calling every
// served port; an outside machine that must never reach the store or the broker's port, over IPv4
// or IPv6.
func Measured(n int, fw MeasuredFirewall) (Scenario, error) {
	lay, err := measuredLayout(n)
	if err != nil {
		return Scenario{}, err
	}
	if fw != MeasuredFull && fw != MeasuredIncomingOnly {
		return Scenario{}, fmt.Errorf("measured scenario: unknown firewall %q", fw)
	}
	name := "measured"
	if fw == MeasuredIncomingOnly {
		name += "-incoming"
	}
	if n != MeasuredContainers {
		name += fmt.Sprintf("-%d", n)
	}
	hub6 := Addr6(mustAddr(HubAddr))
	var probes []ProbeSpec
	for _, c := range lay.served() {
		probes = append(probes, ProbeSpec{Name: "peer-" + c.name, From: "peer1", Target: fmt.Sprintf("http://%s:%d/", HubAddr, c.served), Every: 500 * time.Millisecond, Expect: ExpectReach})
	}
	probes = append(probes,
		ProbeSpec{Name: "outside-webapp", From: "outside", Target: fmt.Sprintf("http://%s:%d/", HubAddr, WebappPort), Expect: ExpectReach},
		ProbeSpec{Name: "outside-webapp6", From: "outside", Target: fmt.Sprintf("http://[%s]:%d/", hub6, WebappPort), Expect: ExpectReach},
		ProbeSpec{Name: "outside-svc01", From: "outside", Target: fmt.Sprintf("http://%s:%d/", HubAddr, 8101), Expect: ExpectReach},
		ProbeSpec{Name: "outside-store", From: "outside", Target: fmt.Sprintf("tcp://%s:%d", HubAddr, StorePort), Expect: ExpectUnreachable},
		ProbeSpec{Name: "outside-store6", From: "outside", Target: fmt.Sprintf("tcp://[%s]:%d", hub6, StorePort), Expect: ExpectUnreachable},
		ProbeSpec{Name: "outside-broker", From: "outside", Target: fmt.Sprintf("tcp://%s:%d", HubAddr, BrokerPort), Expect: ExpectUnreachable},
		ProbeSpec{Name: "outside-broker6", From: "outside", Target: fmt.Sprintf("tcp://[%s]:%d", hub6, BrokerPort), Expect: ExpectUnreachable},
	)
	for i, w := range lay.workers {
		probes = append(probes,
			ProbeSpec{Name: w + "-redis", From: "hub", Container: w, Target: fmt.Sprintf("http://{container:%s}:%d/", lay.redises[i], StorePort)},
			ProbeSpec{Name: w + "-broker", From: "hub", Container: w, Target: fmt.Sprintf("http://{container:pred-broker}:%d/", BrokerPort)})
		if i == 0 {
			probes = append(probes, ProbeSpec{Name: w + "-broker-mgmt", From: "hub", Container: w, Target: fmt.Sprintf("http://{container:pred-broker}:%d/", BrokerManagementPort)})
		}
	}
	return Scenario{
		Name: name,
		Machines: []MachineSpec{
			{Name: "hub", Addr: HubAddr, Docker: true},
			{Name: "peer1", Addr: Peer1Addr},
			{Name: "outside", Addr: OutsideAddr},
		},
		Probes:    probes,
		Configure: func(ctx context.Context, l *Lab) error { return configureMeasured(ctx, l.Machine("hub"), lay, fw) },
		Populate:  func(ctx context.Context, l *Lab) error { return populateMeasured(ctx, l.Machine("hub"), lay) },
		Ready:     waitProbesAnswer,
	}, nil
}

// MeasuredRules counts the measured firewall's allow rules for n containers: incoming (ssh, the
// predecessor's tunnel and each served port) and forwarding (each served container port).
func MeasuredRules(n int) (incoming, forwarding int, err error) {
	lay, err := measuredLayout(n)
	if err != nil {
		return 0, 0, err
	}
	s := len(lay.served())
	return s + 2, s, nil
}

// measuredNftables writes the found firewall: each served port allowed incoming and (fw full)
// forwarded to the bridge, everything else dropped; IPv6's neighbour discovery allowed, as any
// machine with an IPv6 address needs.
func measuredNftables(lay measuredHub, fw MeasuredFirewall) string {
	var b strings.Builder
	b.WriteString("#!/usr/sbin/nft -f\n# the predecessor's firewall: each served port allowed, the rest denied\n\nflush ruleset\n\ntable inet filter {\n")
	b.WriteString("\tchain input {\n\t\ttype filter hook input priority filter; policy drop;\n")
	b.WriteString("\t\tct state established,related accept\n\t\tct state invalid drop\n\t\tiif \"lo\" accept\n")
	b.WriteString("\t\tmeta l4proto { icmp, ipv6-icmp } accept\n")
	b.WriteString("\t\ttcp dport 22 accept comment \"ssh\"\n\t\tudp dport 51820 accept comment \"predecessor tunnel\"\n")
	for _, c := range lay.served() {
		fmt.Fprintf(&b, "\t\ttcp dport %d accept comment %q\n", c.served, c.name)
	}
	b.WriteString("\t}\n")
	if fw == MeasuredFull {
		b.WriteString("\tchain forward {\n\t\ttype filter hook forward priority filter; policy drop;\n")
		b.WriteString("\t\tct state established,related accept\n\t\tiifname \"docker0\" accept\n")
		if len(lay.projects) > 0 {
			// Compose's networks: a bridge each, named by the engine (br-ID).
			b.WriteString("\t\tiifname \"br-*\" accept\n")
		}
		for _, c := range lay.served() {
			bridge := "docker0"
			if c.project != "" {
				bridge = "br-*"
			}
			fmt.Fprintf(&b, "\t\toifname %q tcp dport %d accept comment %q\n", bridge, c.forwardPort, c.name)
		}
		b.WriteString("\t}\n")
	}
	b.WriteString("\tchain output {\n\t\ttype filter hook output priority filter; policy accept;\n\t}\n}\n")
	return b.String()
}

// syncScript is the predecessor's configuration sync: every 3 s it rewrites each synced file
// (atomically, by rename) with a generation that changes.
func syncScript() string {
	var b strings.Builder
	b.WriteString(`/bin/sh -c 'while :; do g=$(date +%s%N); for f in`)
	for _, f := range MeasuredSyncedFiles() {
		b.WriteString(" " + f)
	}
	b.WriteString(`; do mkdir -p "$(dirname "$f")"; printf "# synced by the predecessor from its configuration repository\ngeneration %s\n" "$g" > "$f.sync" && mv "$f.sync" "$f"; done; sleep 3; done'`)
	return b.String()
}

func configureMeasured(ctx context.Context, hub *Machine, lay measuredHub, fw MeasuredFirewall) error {
	contents := map[string]string{
		"/etc/ssh/sshd_config.d/50-predecessor.conf": "# synced by the predecessor\nPasswordAuthentication no\nPermitRootLogin prohibit-password\n",
		"/etc/apt/apt.conf.d/90predecessor":          "// synced by the predecessor\nAPT::Install-Recommends \"false\";\n",
		WebappFile:                                   fmt.Sprintf("# written by the predecessor\nlisten %d\n", WebappPort),
	}
	for _, f := range measuredOperatorFiles {
		contents[OperatorHome+"/"+f] = "# the operator's " + f + ", synced by the predecessor\n"
	}
	for p, c := range contents {
		mode := 0o644
		if strings.HasSuffix(p, "/token") || strings.Contains(p, "/.ssh/") {
			mode = 0o600
		}
		if err := hub.WriteFile(ctx, p, []byte(c), os.FileMode(mode)); err != nil {
			return err
		}
	}
	// The operator's daemons: the sync, and a watcher keeping its own state (not a synced file).
	env := []string{"HOME=" + OperatorHome, "USER=operator"}
	if err := hub.EnableService(ctx, MeasuredControl[0], syncScript(), env...); err != nil {
		return err
	}
	watch := `/bin/sh -c 'mkdir -p "$HOME/.local/state/predecessor"; while :; do date +%s > "$HOME/.local/state/predecessor/heartbeat"; sleep 5; done'`
	if err := hub.EnableService(ctx, MeasuredControl[1], watch, env...); err != nil {
		return err
	}
	if err := hub.WriteFile(ctx, "/etc/nftables.conf", []byte(measuredNftables(lay, fw)), 0o755); err != nil {
		return err
	}
	_, err := hub.Run(ctx, "ln -sf /lib/systemd/system/nftables.service /etc/systemd/system/sysinit.target.wants/nftables.service")
	return err
}

// populateMeasured creates the hub's containers, several at a time (each `docker run` on a vfs
// engine copies the image; one after the other, 60 would take minutes).
func populateMeasured(ctx context.Context, hub *Machine, lay measuredHub) error {
	for _, p := range lay.projects {
		if _, err := hub.Docker(ctx, "network", "create", "--label", "com.docker.compose.project="+p,
			"--label", "com.docker.compose.network=default", MeasuredNetwork(p)); err != nil {
			return err
		}
	}
	const parallel = 8
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	errs := make([]error, len(lay.ctrs))
	for i, c := range lay.ctrs {
		args := []string{"run", "-d", "--name", c.name, "--restart", "unless-stopped"}
		for _, p := range c.publish {
			args = append(args, "-p", p)
		}
		args = append(args, c.extra...)
		args = append(args, c.image)
		if !c.imageCmd {
			args = append(args, "serve", "--name", c.name)
			for _, p := range c.listen {
				args = append(args, "--listen", fmt.Sprintf(":%d", p))
			}
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			_, errs[i] = hub.Docker(ctx, args...)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
