package setup

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"meshd/api"
	"meshd/catalogue"
	"meshd/container"
	"meshd/fsm"
	"meshd/host"
	"meshd/netfilter"
	"meshd/netfilter/firewall"
	"meshd/report"
)

// PreflightError is a refused genesis or join: every error found, not only the first.
type PreflightError struct {
	Findings []api.Finding
	// Act is the act refused, ActGenesis or ActJoin; empty is genesis.
	Act string
}

func (e *PreflightError) Error() string {
	var b strings.Builder
	n := 0
	for _, f := range e.Findings {
		if f.Level == api.LevelError {
			n++
		}
	}
	if e.Act == ActJoin {
		fmt.Fprintf(&b, "join refused, nothing was sent and nothing was changed: %d problem(s) found", n)
	} else {
		fmt.Fprintf(&b, "genesis refused, nothing was changed: %d problem(s) found", n)
	}
	for _, f := range e.Findings {
		if f.Level == api.LevelError {
			fmt.Fprintf(&b, "\n  %s: %s", f.Check, f.Message)
		}
	}
	return b.String()
}

// BindPlan lists every port the foundation binds on this node, with the address it binds.
func BindPlan(cat catalogue.Catalogue, settings map[string]string, advertise string) ([]api.PortBind, error) {
	any4 := netip.IPv4Unspecified()
	adv, err := netip.ParseAddr(advertise)
	if err != nil {
		return nil, fmt.Errorf("advertise address %q is not an IP address", advertise)
	}
	var plan []api.PortBind
	for _, name := range cat.Names() {
		m := cat[name]
		if !m.Foundation {
			continue
		}
		vals := map[string]string{}
		for k, v := range settings {
			if s, ok := cutModule(k, name); ok {
				vals[s] = v
			}
		}
		res, err := m.Resolve(vals)
		if err != nil {
			return nil, err
		}
		keyOf := func(port uint16) string {
			for _, s := range m.PortSettings() {
				if res.Settings[s] == strconv.Itoa(int(port)) {
					return name + "." + s
				}
			}
			return name
		}
		if name == catalogue.MeshModule {
			// meshd binds its own ports: raft on the advertise address, the others on every one.
			for _, o := range res.Openings {
				key := keyOf(o.Port)
				addr := any4
				if key == catalogue.MeshModule+".raft" {
					addr = adv
				}
				plan = append(plan, api.PortBind{Key: key, Proto: o.Proto, Addr: addr, Port: o.Port, By: "meshd (" + strings.TrimPrefix(key, "mesh.") + ")"})
			}
			continue
		}
		for _, c := range res.Containers {
			for _, p := range c.Ports {
				pm, err := catalogue.ParsePortMapping(p)
				if err != nil {
					return nil, err
				}
				addr := any4
				if pm.HostIP != "" {
					addr = netip.MustParseAddr(pm.HostIP)
				}
				plan = append(plan, api.PortBind{Key: keyOf(pm.HostPort), Proto: pm.Proto, Addr: addr, Port: pm.HostPort, By: "container " + c.Name})
			}
		}
	}
	sort.SliceStable(plan, func(i, j int) bool { return plan[i].Key < plan[j].Key })
	return plan, nil
}

// The acts a preflight checks a machine for. Genesis binds every foundation port; a join binds the
// ports a client node binds (clientBindPlan). The findings' words name the act and its remedy.
const (
	ActGenesis = "genesis"
	ActJoin    = "join"
)

// actWords are the words a finding uses for its act: its name, and how to raise a machine in use
// without closing it.
type actWords struct{ name, inUse string }

// tunnelHint is the other remedy for a held tunnel port: it is most often the predecessor's own
// WireGuard tunnel, which the mesh takes over (genesis) or presents (join) rather than moves from.
func (w actWords) tunnelHint(key string) string {
	if key != catalogue.MeshModule+".tunnel" {
		return ""
	}
	if w.name == "join" {
		return ", or, if it is the predecessor's WireGuard tunnel (say wg0), present it: --tunnel wg0"
	}
	return ", or, if it is the predecessor's WireGuard tunnel (say wg0), take it over: --adopted --take-tunnel wg0"
}

func wordsFor(act string) actWords {
	if act == ActJoin {
		return actWords{name: "join", inUse: "join it with a token made by `meshd token create --adopted`"}
	}
	return actWords{name: "genesis", inUse: "raise it with --adopted"}
}

// clientBindPlan lists the ports a joining node binds: the mesh module's (its bus, gossip and
// tunnel; its Raft port only when it joins as a server), on every address, with the node's mesh
// settings over the catalogue's defaults. settings are keyed MODULE.SETTING.
func clientBindPlan(cat catalogue.Catalogue, settings map[string]string, server bool) ([]api.PortBind, error) {
	m := cat[catalogue.MeshModule]
	if m == nil {
		return nil, fmt.Errorf("the catalogue has no %s module", catalogue.MeshModule)
	}
	vals := map[string]string{}
	for k, v := range settings {
		if s, ok := cutModule(k, catalogue.MeshModule); ok {
			vals[s] = v
		}
	}
	res, err := m.Resolve(vals)
	if err != nil {
		return nil, err
	}
	var plan []api.PortBind
	seen := map[string]bool{}
	for _, o := range res.Openings {
		for _, s := range m.PortSettings() {
			if (s == "raft" && !server) || res.Settings[s] != strconv.Itoa(int(o.Port)) || seen[s+"/"+o.Proto] {
				continue
			}
			seen[s+"/"+o.Proto] = true
			key := catalogue.MeshModule + "." + s
			plan = append(plan, api.PortBind{Key: key, Proto: o.Proto, Addr: netip.IPv4Unspecified(), Port: o.Port, By: "meshd (" + s + ")"})
			break
		}
	}
	sort.SliceStable(plan, func(i, j int) bool { return plan[i].Key < plan[j].Key })
	return plan, nil
}

// preflightInput is what genesis or join checks.
type preflightInput struct {
	// Act is ActGenesis (or empty) or ActJoin.
	Act        string
	Mode       fsm.Mode
	Catalogue  catalogue.Catalogue
	Settings   map[string]string
	Advertise  string
	DockerHost string
	Range      netip.Prefix
	// TakeTunnel is the found interface genesis takes over (or a join presents with --tunnel):
	// its port is the tunnel port and its range the range, so neither is a conflict.
	TakeTunnel string
	// Server is a join as a server: it binds the Raft port too.
	Server bool
}

// preflight checks the machine before genesis raises anything, and reports every finding.
//
// It is a flat list of independent checks, each a few lines over what it read once at the top
// (listening sockets, published ports, the bind plan); it stays one body so the findings come out
// in the order the operator reads them.
func preflight(ctx context.Context, in preflightInput) []api.Finding {
	w := wordsFor(in.Act)
	out := []api.Finding{}
	add := func(check, level, holder, format string, args ...any) {
		out = append(out, api.Finding{Check: check, Level: level, Holder: holder, Message: fmt.Sprintf(format, args...)})
	}
	listeners, err := host.Listeners()
	if err != nil {
		add("machine.listeners", api.LevelWarning, "", "cannot read the machine's listening sockets: %v", err)
	}
	var published []container.Published
	if eng, err := container.New(in.DockerHost); err != nil {
		add("docker.engine", api.LevelWarning, "", "Docker engine at %s: %v", OrDefault(in.DockerHost), err)
	} else {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		published, err = eng.Published(pctx)
		cancel()
		eng.Close()
		if err != nil {
			if in.Act == ActJoin {
				add("docker.engine", api.LevelWarning, "", "the Docker engine is not reachable (%v): published ports cannot be checked, and modules with containers cannot run here until it is", err)
			} else {
				add("docker.engine", api.LevelWarning, "", "the Docker engine is not reachable (%v): published ports cannot be checked and the foundation's containers cannot be raised until it is", err)
			}
		}
	}

	// Every port the node will bind (genesis: the foundation's; join: a client's), free on the
	// address it will bind.
	plan, err := BindPlan(in.Catalogue, in.Settings, in.Advertise)
	if in.Act == ActJoin {
		plan, err = clientBindPlan(in.Catalogue, in.Settings, in.Server)
	}
	if err != nil {
		add("settings", api.LevelError, "", "%v", err)
	}
	for _, b := range plan {
		if in.TakeTunnel != "" && b.Key == catalogue.MeshModule+".tunnel" {
			continue // held by the found tunnel it takes over
		}
		check := "port." + b.Key
		what := fmt.Sprintf("port %d/%s (%s, for %s)", b.Port, b.Proto, b.Key, b.By)
		if holder := PublishedHolder(published, b); holder != "" {
			add(check, api.LevelError, holder, "%s is held by %s; give %s another: --port %s=N", what, holder, w.name, portFlag(b.Key))
			continue
		}
		if l, ok := ListenerHolder(listeners, b); ok {
			holder := "a process"
			if l.Process != "" {
				holder = fmt.Sprintf("%s (pid %d)", l.Process, l.PID)
			}
			add(check, api.LevelError, holder, "%s is in use by %s on %s; give %s another: --port %s=N%s", what, holder, netip.AddrPortFrom(l.Addr, l.Port), w.name, portFlag(b.Key), w.tunnelHint(b.Key))
			continue
		}
		if err := TryBind(b); err != nil {
			switch {
			case errors.Is(err, syscall.EACCES):
				add(check, api.LevelError, "", "%s: permission denied binding %s (not in use: run %s as root)", what, netip.AddrPortFrom(b.Addr, b.Port), w.name)
			case errors.Is(err, syscall.EADDRINUSE):
				add(check, api.LevelError, "", "%s is in use on %s by something this machine does not name; give %s another: --port %s=N%s", what, netip.AddrPortFrom(b.Addr, b.Port), w.name, portFlag(b.Key), w.tunnelHint(b.Key))
			case errors.Is(err, syscall.EADDRNOTAVAIL):
				add(check, api.LevelError, "", "%s: %s is not an address of this machine (check --advertise)", what, b.Addr)
			default:
				add(check, api.LevelError, "", "%s: cannot bind %s: %v", what, netip.AddrPortFrom(b.Addr, b.Port), err)
			}
		}
	}

	// The private network's range must not overlap a tunnel the predecessor runs beside it.
	if in.Range.IsValid() {
		ifaces, _ := net.Interfaces()
		for _, ifc := range ifaces {
			addrs, _ := ifc.Addrs()
			for _, a := range addrs {
				ipn, ok := a.(*net.IPNet)
				if !ok {
					continue
				}
				p, err := netip.ParsePrefix(ipn.String())
				if err != nil || p.Addr().IsLoopback() {
					continue
				}
				if !p.Overlaps(in.Range) || ifc.Name == in.TakeTunnel {
					continue // the tunnel taken over (or presented) is the range's own
				}
				if in.Act == ActJoin {
					// The range is the mesh's, not this machine's to choose; and a machine of a
					// tunnel the hub took in place (ADR 0105) overlaps it by design.
					add("tunnel.range", api.LevelWarning, ifc.Name, "the private network's range %s overlaps %s on interface %s: unless the mesh carries that tunnel (its hub took it in place), this node's private address will clash with it", in.Range, p, ifc.Name)
				} else {
					add("tunnel.range", api.LevelError, ifc.Name, "the private network's range %s overlaps %s on interface %s (a tunnel still running beside the mesh); give another range: --set mesh.range=CIDR", in.Range, p, ifc.Name)
				}
			}
		}
	}

	// What else manages the found tunnel taken over or presented (networkd, NetworkManager, a
	// container): refused like a firewall meshd does not speak.
	if in.TakeTunnel != "" {
		out = append(out, tunnelManagerFindings(ctx, in.TakeTunnel, in.Settings, in.DockerHost)...)
		out = append(out, previewFindings(in.TakeTunnel)...)
	}

	// The firewall found on the machine.
	dctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	found, ferr := firewall.Detect(dctx, netfilter.Env{})
	cancel()
	switch {
	case ferr != nil && os.Geteuid() != 0:
		add("firewall.kind", api.LevelError, "", "reading the machine's firewall needs root: run %s as root (%v)", w.name, ferr)
	case ferr != nil && errors.Is(ferr, netfilter.ErrUnsupported):
		add("firewall.kind", api.LevelError, "", "%v: meshd will not adopt a machine whose firewall it cannot speak, since nothing would protect the mesh's ports", ferr)
	case ferr != nil:
		add("firewall.kind", api.LevelError, "", "cannot read the machine's firewall: %v", ferr)
	}

	// A converged node loads a drop-by-default ruleset: genesis and join refuse a machine in use.
	if in.Mode == fsm.Converged {
		if ferr == nil && found.Active && found.Kind != netfilter.KindNone {
			add("machine.firewall", api.LevelError, string(found.Kind), "the machine has an active firewall (%s); a converged %s would replace it and close what it allows. This machine is in use: %s", found, w.name, w.inUse)
		}
		for _, l := range listeners {
			if l.Addr.IsLoopback() {
				continue
			}
			add("machine.listeners", api.LevelError, l.String(), "something already listens: %s; a converged %s would close it. This machine is in use: %s", describeListener(l, published), w.name, w.inUse)
		}
		for _, p := range published {
			if !hasListener(listeners, p) {
				add("machine.listeners", api.LevelError, p.Container, "container %s publishes %s:%d/%s; a converged %s would close it. This machine is in use: %s", p.Container, orAny(p.HostIP), p.HostPort, p.Proto, w.name, w.inUse)
			}
		}
	}
	return out
}

func portFlag(key string) string {
	mod, setting, _ := strings.Cut(key, ".")
	if mod == catalogue.MeshModule {
		return setting
	}
	if setting == "port" {
		return mod
	}
	return key
}

func PublishedHolder(published []container.Published, b api.PortBind) string {
	for _, p := range published {
		addr := netip.IPv4Unspecified()
		if a, err := netip.ParseAddr(p.HostIP); err == nil {
			addr = a
		}
		l := report.Listener{Proto: p.Proto, Addr: addr, Port: p.HostPort}
		if l.Covers(b.Proto, b.Addr, b.Port) {
			return fmt.Sprintf("container %s (its published port %s:%d/%s)", p.Container, orAny(p.HostIP), p.HostPort, p.Proto)
		}
	}
	return ""
}

func ListenerHolder(ls []report.Listener, b api.PortBind) (report.Listener, bool) {
	for _, l := range ls {
		if l.Covers(b.Proto, b.Addr, b.Port) {
			return l, true
		}
	}
	return report.Listener{}, false
}

func hasListener(ls []report.Listener, p container.Published) bool {
	for _, l := range ls {
		if l.Proto == p.Proto && l.Port == p.HostPort {
			return true
		}
	}
	return false
}

func describeListener(l report.Listener, published []container.Published) string {
	for _, p := range published {
		if p.Proto == l.Proto && p.HostPort == l.Port {
			return fmt.Sprintf("%s, the published port of container %s", l, p.Container)
		}
	}
	return l.String()
}

func TryBind(b api.PortBind) error {
	addr := netip.AddrPortFrom(b.Addr, b.Port).String()
	if b.Proto == "udp" {
		c, err := net.ListenPacket("udp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return l.Close()
}

func orAny(ip string) string {
	if ip == "" {
		return "0.0.0.0"
	}
	return ip
}

func OrDefault(h string) string {
	if h == "" {
		return container.DefaultHost
	}
	return h
}
