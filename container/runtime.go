package container

// The Runtime part of a Spec (ctrspec.Runtime) in the engine's terms, both ways: what a create
// sets, and how a found container's configuration reads back as a Spec.

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	dcontainer "github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/go-units"

	"meshd/ctrspec"
)

// applyRuntime sets what r declares on the engine's configuration, and returns the endpoint
// of the container's first network (the others are connected before it starts).
func applyRuntime(r ctrspec.Runtime, cfg *dcontainer.Config, hc *dcontainer.HostConfig) *network.NetworkingConfig {
	if r.Entrypoint != nil {
		cfg.Entrypoint = slices.Clone(r.Entrypoint)
	}
	cfg.WorkingDir, cfg.User, cfg.Hostname, cfg.StopSignal = r.WorkingDir, r.User, r.Hostname, r.StopSignal
	if r.StopTimeout != nil {
		t := *r.StopTimeout
		cfg.StopTimeout = &t
	}
	if h := r.Healthcheck; h != nil {
		hcfg := &dcontainer.HealthConfig{Test: slices.Clone(h.Test), Retries: h.Retries}
		hcfg.Interval, _ = ctrspec.ParseDuration(h.Interval)
		hcfg.Timeout, _ = ctrspec.ParseDuration(h.Timeout)
		hcfg.StartPeriod, _ = ctrspec.ParseDuration(h.StartPeriod)
		cfg.Healthcheck = hcfg
	}
	var nc *network.NetworkingConfig
	switch {
	case len(r.Networks) > 0:
		first := r.Networks[0]
		hc.NetworkMode = dcontainer.NetworkMode(first.Name)
		nc = &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{first.Name: endpoint(first)}}
	case r.NetworkMode != "":
		hc.NetworkMode = dcontainer.NetworkMode(r.NetworkMode)
	}
	hc.PidMode = dcontainer.PidMode(r.PID)
	hc.Privileged = r.Privileged
	hc.CapAdd, hc.CapDrop = capsOf(r.CapAdd), capsOf(r.CapDrop)
	for _, s := range r.Devices {
		d, _ := ctrspec.ParseDevice(s) // validated
		hc.Devices = append(hc.Devices, dcontainer.DeviceMapping{PathOnHost: d.Host, PathInContainer: d.Container, CgroupPermissions: d.Perms})
	}
	hc.Memory, _ = ctrspec.ParseSize(r.Memory)
	if r.MemorySwap == "-1" {
		hc.MemorySwap = -1
	} else {
		hc.MemorySwap, _ = ctrspec.ParseSize(r.MemorySwap)
	}
	hc.NanoCPUs, _ = ctrspec.ParseCPUs(r.CPUs)
	if r.PidsLimit != 0 {
		n := r.PidsLimit
		hc.PidsLimit = &n
	}
	for _, s := range r.Ulimits {
		u, _ := ctrspec.ParseUlimit(s) // validated
		hc.Ulimits = append(hc.Ulimits, &units.Ulimit{Name: u.Name, Soft: u.Soft, Hard: u.Hard})
	}
	if l := r.Logging; l != nil {
		hc.LogConfig = dcontainer.LogConfig{Type: l.Driver, Config: maps0(l.Options)}
	}
	hc.ExtraHosts = slices.Clone(r.ExtraHosts)
	hc.DNS, hc.DNSSearch, hc.DNSOptions = slices.Clone(r.DNS), slices.Clone(r.DNSSearch), slices.Clone(r.DNSOptions)
	if len(r.Tmpfs) > 0 {
		hc.Tmpfs = map[string]string{}
		for _, t := range r.Tmpfs {
			p, opts, _ := strings.Cut(t, ":")
			hc.Tmpfs[p] = opts
		}
	}
	hc.ReadonlyRootfs = r.ReadOnly
	if r.Init {
		yes := true
		hc.Init = &yes
	}
	hc.SecurityOpt = slices.Clone(r.SecurityOpt)
	return nc
}

func endpoint(n ctrspec.Network) *network.EndpointSettings {
	ep := &network.EndpointSettings{Aliases: slices.Clone(n.Aliases)}
	if n.IPv4 != "" || n.IPv6 != "" {
		ep.IPAMConfig = &network.EndpointIPAMConfig{IPv4Address: n.IPv4, IPv6Address: n.IPv6}
	}
	return ep
}

// capsOf is the engine's spelling of capabilities: CAP_ and upper case, as it reports them.
func capsOf(cs []string) []string {
	var out []string
	for _, c := range cs {
		if n := ctrspec.NormCap(c); n == "ALL" {
			out = append(out, n)
		} else {
			out = append(out, "CAP_"+n)
		}
	}
	return out
}

// ensureNetworks creates each user-defined network spec joins that the engine does not have: a
// bridge, given the /24 (/64) of a static address declared on it, since the engine takes static
// addresses only on networks with a subnet of their own.
func (e *Engine) ensureNetworks(ctx context.Context, spec ctrspec.Spec) error {
	for _, n := range spec.Networks {
		if n.Name == "bridge" {
			continue
		}
		_, err := e.cli.NetworkInspect(ctx, n.Name, network.InspectOptions{})
		if err == nil {
			continue
		}
		if !cerrdefs.IsNotFound(err) {
			return e.wrap(fmt.Sprintf("container %s: inspect network %s", spec.Name, n.Name), err)
		}
		opts := network.CreateOptions{Driver: "bridge"}
		var cfgs []network.IPAMConfig
		if a, err := netip.ParseAddr(n.IPv4); err == nil {
			p, _ := a.Prefix(24)
			cfgs = append(cfgs, network.IPAMConfig{Subnet: p.String()})
		}
		if a, err := netip.ParseAddr(n.IPv6); err == nil {
			p, _ := a.Prefix(64)
			cfgs = append(cfgs, network.IPAMConfig{Subnet: p.String()})
			yes := true
			opts.EnableIPv6 = &yes
		}
		if len(cfgs) > 0 {
			opts.IPAM = &network.IPAM{Config: cfgs}
		}
		if _, err := e.cli.NetworkCreate(ctx, n.Name, opts); err != nil && !cerrdefs.IsConflict(err) {
			return e.wrap(fmt.Sprintf("container %s: create network %s", spec.Name, n.Name), err)
		}
		e.log.Info("container: created network", "network", n.Name, "for", spec.Name)
	}
	return nil
}

// connectNetworks joins the created container id to the networks after spec's first.
func (e *Engine) connectNetworks(ctx context.Context, id string, spec ctrspec.Spec) error {
	for _, n := range spec.Networks[min(1, len(spec.Networks)):] {
		if err := e.cli.NetworkConnect(ctx, n.Name, id, endpoint(n)); err != nil {
			return e.wrap(fmt.Sprintf("container %s: connect to network %s", spec.Name, n.Name), err)
		}
	}
	return nil
}

// imageRuntime is what the container's image sets of what a Runtime says.
type imageRuntime struct {
	Entrypoint  []string
	WorkingDir  string
	User        string
	StopSignal  string
	Healthcheck *dcontainer.HealthConfig
}

// observeRuntime reads the container's Runtime back as a module would declare it: what the image
// or the engine sets by default is left out (img nil: the image is gone, everything is shown;
// defs nil: the engine's defaults are not known, its default log driver is shown).
func observeRuntime(c dcontainer.InspectResponse, img *imageRuntime, defs *engineDefaults) ctrspec.Runtime {
	var r ctrspec.Runtime
	id := ""
	if c.ContainerJSONBase != nil {
		id = c.ID
	}
	hostname := ""
	if cfg := c.Config; cfg != nil {
		hostname = cfg.Hostname
		switch {
		case len(cfg.Entrypoint) > 0 && (img == nil || !slices.Equal(cfg.Entrypoint, img.Entrypoint)):
			r.Entrypoint = slices.Clone([]string(cfg.Entrypoint))
		case len(cfg.Entrypoint) == 0 && img != nil && len(img.Entrypoint) > 0:
			// The engine stores the image's entrypoint in the container's configuration unless
			// the create said another: none here is `--entrypoint ""`, the image's overridden.
			r.Entrypoint = ctrspec.NoEntrypoint()
		}
		if img == nil || cfg.WorkingDir != img.WorkingDir {
			r.WorkingDir = cfg.WorkingDir
		}
		if img == nil || cfg.User != img.User {
			r.User = cfg.User
		}
		if img == nil || cfg.StopSignal != img.StopSignal {
			r.StopSignal = cfg.StopSignal
		}
		if cfg.StopTimeout != nil {
			t := *cfg.StopTimeout
			r.StopTimeout = &t
		}
		if h := cfg.Healthcheck; h != nil && len(h.Test) > 0 && (img == nil || !sameHealth(h, img.Healthcheck)) {
			r.Healthcheck = &ctrspec.Healthcheck{Test: slices.Clone(h.Test), Retries: h.Retries,
				Interval: durText(h.Interval), Timeout: durText(h.Timeout), StartPeriod: durText(h.StartPeriod)}
		}
		if cfg.Hostname != "" && !strings.HasPrefix(id, cfg.Hostname) {
			r.Hostname = cfg.Hostname
		}
	}
	hc := c.HostConfig
	if hc == nil {
		return r
	}
	mode := string(hc.NetworkMode)
	if mode == "host" {
		r.Hostname = "" // the machine's, not the container's to say
	}
	var nets map[string]*network.EndpointSettings
	if c.NetworkSettings != nil {
		nets = c.NetworkSettings.Networks
	}
	switch mode {
	case "", "default", "bridge":
		if ep := nets["bridge"]; len(nets) > 1 || ep != nil && (len(userAliases(ep.Aliases, id, hostname)) > 0 || ep.IPAMConfig != nil) {
			r.Networks = networksOf(nets, "bridge", id, hostname)
		}
	case "host", "none":
		r.NetworkMode = mode
	default:
		if strings.HasPrefix(mode, "container:") {
			r.NetworkMode = mode // not a mode a Spec may say: a difference from any declaration
		} else {
			r.Networks = networksOf(nets, mode, id, hostname)
		}
	}
	r.PID = string(hc.PidMode)
	r.Privileged = hc.Privileged
	r.CapAdd, r.CapDrop = normCaps(hc.CapAdd), normCaps(hc.CapDrop)
	for _, d := range hc.Devices {
		r.Devices = append(r.Devices, ctrspec.Device{Host: d.PathOnHost, Container: d.PathInContainer, Perms: d.CgroupPermissions}.String())
	}
	sort.Strings(r.Devices)
	if hc.Memory > 0 {
		r.Memory = ctrspec.FormatSize(hc.Memory)
	}
	switch {
	case hc.MemorySwap == -1:
		r.MemorySwap = "-1"
	case hc.MemorySwap > 0 && hc.MemorySwap != 2*hc.Memory: // twice the memory is the engine's default
		r.MemorySwap = ctrspec.FormatSize(hc.MemorySwap)
	}
	if hc.NanoCPUs > 0 {
		r.CPUs = ctrspec.FormatCPUs(hc.NanoCPUs)
	}
	if hc.PidsLimit != nil && *hc.PidsLimit > 0 {
		r.PidsLimit = *hc.PidsLimit
	}
	for _, u := range hc.Ulimits {
		r.Ulimits = append(r.Ulimits, ctrspec.Ulimit{Name: u.Name, Soft: u.Soft, Hard: u.Hard}.String())
	}
	sort.Strings(r.Ulimits)
	if lc := hc.LogConfig; lc.Type != "" && (defs == nil || !defs.sameLog(lc)) {
		r.Logging = defs.ownLog(&ctrspec.Logging{Driver: lc.Type, Options: maps0(lc.Config)})
	}
	r.ExtraHosts = slices.Clone(hc.ExtraHosts)
	r.DNS, r.DNSSearch, r.DNSOptions = nonEmpty(hc.DNS), nonEmpty(hc.DNSSearch), nonEmpty(hc.DNSOptions)
	for _, p := range sortedKeys(hc.Tmpfs) {
		t := p
		if hc.Tmpfs[p] != "" {
			t += ":" + hc.Tmpfs[p]
		}
		r.Tmpfs = append(r.Tmpfs, t)
	}
	r.ReadOnly = hc.ReadonlyRootfs
	r.Init = hc.Init != nil && *hc.Init
	r.SecurityOpt = nonEmpty(hc.SecurityOpt)
	if hc.Privileged || hc.PidMode.IsHost() || hc.IpcMode.IsHost() {
		// The engine disables SELinux labels itself for a container that shares the host's.
		r.SecurityOpt = nonEmpty(slices.DeleteFunc(r.SecurityOpt, func(s string) bool { return s == "label=disable" }))
	}
	return r
}

// networksOf lists the container's networks, first its network mode's, without the alias the
// engine adds itself (the container's short id).
func networksOf(nets map[string]*network.EndpointSettings, first, id, hostname string) []ctrspec.Network {
	names := sortedKeys(nets)
	if i := slices.Index(names, first); i > 0 {
		names = append([]string{first}, slices.Delete(names, i, i+1)...)
	}
	var out []ctrspec.Network
	for _, name := range names {
		ep := nets[name]
		n := ctrspec.Network{Name: name}
		if ep != nil {
			n.Aliases = userAliases(ep.Aliases, id, hostname)
			if ep.IPAMConfig != nil {
				n.IPv4, n.IPv6 = ep.IPAMConfig.IPv4Address, ep.IPAMConfig.IPv6Address
			}
		}
		out = append(out, n)
	}
	return out
}

// userAliases drops the alias the engine gives every container on a user-defined network (its
// host name: its short id unless hostname says otherwise), sorted.
func userAliases(as []string, id, hostname string) []string {
	var out []string
	for _, a := range as {
		if len(a) >= 12 && strings.HasPrefix(id, a) || a == hostname {
			continue
		}
		out = append(out, a)
	}
	sort.Strings(out)
	return slices.Compact(out)
}

func normCaps(cs []string) []string {
	var out []string
	for _, c := range cs {
		out = append(out, ctrspec.NormCap(c))
	}
	sort.Strings(out)
	return out
}

func nonEmpty(xs []string) []string {
	if len(xs) == 0 {
		return nil
	}
	return slices.Clone(xs)
}

func durText(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return d.String()
}

func sameHealth(a, b *dcontainer.HealthConfig) bool {
	if b == nil {
		return false
	}
	return slices.Equal(a.Test, b.Test) && a.Interval == b.Interval && a.Timeout == b.Timeout &&
		a.StartPeriod == b.StartPeriod && a.Retries == b.Retries
}
