package ctrspec

import (
	"fmt"
	"maps"
	"net/netip"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Runtime is what a container is beyond its image, command, env, ports, volumes, restart policy
// and labels: what Compose files and `docker run` commonly set on long-running services. A zero
// field means the engine's (or the image's) default. It is embedded in Spec and in the
// catalogue's Container, so a manifest and a found container's reconstruction say it in the
// same words.
type Runtime struct {
	// Entrypoint replaces the image's; nil keeps it, [""] (NoEntrypoint) runs none, as
	// `docker run --entrypoint ""` does: the command alone.
	Entrypoint []string `json:"entrypoint,omitempty" yaml:"entrypoint,omitempty"`
	// WorkingDir, User and StopSignal replace the image's; "" keeps it.
	WorkingDir string `json:"working_dir,omitempty" yaml:"working_dir,omitempty"`
	User       string `json:"user,omitempty" yaml:"user,omitempty"`
	// Hostname is the container's host name; "" lets the engine name it after the container id.
	Hostname string `json:"hostname,omitempty" yaml:"hostname,omitempty"`
	// NetworkMode is "" (the default bridge, or the Networks), "bridge", "host" or "none".
	NetworkMode string `json:"network_mode,omitempty" yaml:"network_mode,omitempty"`
	// Networks are user-defined networks the container joins, the first as its network mode;
	// each is created (a bridge) when the engine has none of that name.
	Networks []Network `json:"networks,omitempty" yaml:"networks,omitempty"`
	// PID is "" (its own process namespace) or "host".
	PID        string   `json:"pid,omitempty" yaml:"pid,omitempty"`
	Privileged bool     `json:"privileged,omitempty" yaml:"privileged,omitempty"`
	CapAdd     []string `json:"cap_add,omitempty" yaml:"cap_add,omitempty"`
	CapDrop    []string `json:"cap_drop,omitempty" yaml:"cap_drop,omitempty"`
	// Devices are "/dev/host[:/dev/container[:rwm]]".
	Devices []string `json:"devices,omitempty" yaml:"devices,omitempty"`
	// Memory is a limit such as "64m" (b, k, m, g); MemorySwap the memory and swap together
	// ("-1": unlimited swap).
	Memory     string `json:"memory,omitempty" yaml:"memory,omitempty"`
	MemorySwap string `json:"memory_swap,omitempty" yaml:"memory_swap,omitempty"`
	// CPUs is how many CPUs' worth of time it may use ("0.5").
	CPUs string `json:"cpus,omitempty" yaml:"cpus,omitempty"`
	// PidsLimit bounds its processes; 0 is no limit.
	PidsLimit int64 `json:"pids_limit,omitempty" yaml:"pids_limit,omitempty"`
	// Ulimits are "name=soft[:hard]" ("nofile=1024:2048").
	Ulimits     []string     `json:"ulimits,omitempty" yaml:"ulimits,omitempty"`
	Healthcheck *Healthcheck `json:"healthcheck,omitempty" yaml:"healthcheck,omitempty"`
	// Logging is the log driver and its options; nil is the engine's default driver.
	Logging *Logging `json:"logging,omitempty" yaml:"logging,omitempty"`
	// ExtraHosts are "name:address" lines added to its /etc/hosts.
	ExtraHosts []string `json:"extra_hosts,omitempty" yaml:"extra_hosts,omitempty"`
	DNS        []string `json:"dns,omitempty" yaml:"dns,omitempty"`
	DNSSearch  []string `json:"dns_search,omitempty" yaml:"dns_search,omitempty"`
	DNSOptions []string `json:"dns_opt,omitempty" yaml:"dns_opt,omitempty"`
	// StopTimeout is how many seconds a stop waits before it kills; nil is the engine's 10.
	StopSignal  string `json:"stop_signal,omitempty" yaml:"stop_signal,omitempty"`
	StopTimeout *int   `json:"stop_timeout,omitempty" yaml:"stop_timeout,omitempty"`
	// Tmpfs are "/path[:options]" ("/run:size=64m,mode=1777").
	Tmpfs       []string `json:"tmpfs,omitempty" yaml:"tmpfs,omitempty"`
	ReadOnly    bool     `json:"read_only,omitempty" yaml:"read_only,omitempty"`
	Init        bool     `json:"init,omitempty" yaml:"init,omitempty"`
	SecurityOpt []string `json:"security_opt,omitempty" yaml:"security_opt,omitempty"`
}

// Network is one user-defined network a container joins: the names other containers on it
// reach it by (Aliases) and its static addresses, "" for one the engine chooses.
type Network struct {
	Name    string   `json:"name" yaml:"name"`
	Aliases []string `json:"aliases,omitempty" yaml:"aliases,omitempty"`
	IPv4    string   `json:"ipv4_address,omitempty" yaml:"ipv4_address,omitempty"`
	IPv6    string   `json:"ipv6_address,omitempty" yaml:"ipv6_address,omitempty"`
}

// Healthcheck is how the engine checks the container is healthy. Test is ["CMD", args...],
// ["CMD-SHELL", "command"] or ["NONE"] (the image's check disabled); durations are Go's
// ("30s", "1m30s"), "" for the engine's default.
type Healthcheck struct {
	Test        []string `json:"test" yaml:"test"`
	Interval    string   `json:"interval,omitempty" yaml:"interval,omitempty"`
	Timeout     string   `json:"timeout,omitempty" yaml:"timeout,omitempty"`
	StartPeriod string   `json:"start_period,omitempty" yaml:"start_period,omitempty"`
	Retries     int      `json:"retries,omitempty" yaml:"retries,omitempty"`
}

// Logging is a log driver and its options.
type Logging struct {
	Driver  string            `json:"driver" yaml:"driver"`
	Options map[string]string `json:"options,omitempty" yaml:"options,omitempty"`
}

// RuntimeKeys are the manifest keys of Runtime, for a parser that refuses unknown keys.
var RuntimeKeys = []string{"entrypoint", "working_dir", "user", "hostname", "network_mode", "networks", "pid",
	"privileged", "cap_add", "cap_drop", "devices", "memory", "memory_swap", "cpus", "pids_limit", "ulimits",
	"healthcheck", "logging", "extra_hosts", "dns", "dns_search", "dns_opt", "stop_signal", "stop_timeout",
	"tmpfs", "read_only", "init", "security_opt"}

// NetworkKeys, HealthcheckKeys and LoggingKeys are the keys of a network, a health check and a
// logging mapping.
var (
	NetworkKeys     = []string{"name", "aliases", "ipv4_address", "ipv6_address"}
	HealthcheckKeys = []string{"test", "interval", "timeout", "start_period", "retries"}
	LoggingKeys     = []string{"driver", "options"}
)

// IsZero says nothing of Runtime is set: the container is as the engine and image make it.
func (r Runtime) IsZero() bool {
	return len(r.Used()) == 0
}

// Used lists the manifest keys r sets, in RuntimeKeys' order.
func (r Runtime) Used() []string {
	set := []bool{r.Entrypoint != nil, r.WorkingDir != "", r.User != "", r.Hostname != "", r.NetworkMode != "",
		len(r.Networks) > 0, r.PID != "", r.Privileged, len(r.CapAdd) > 0, len(r.CapDrop) > 0, len(r.Devices) > 0,
		r.Memory != "", r.MemorySwap != "", r.CPUs != "", r.PidsLimit != 0, len(r.Ulimits) > 0, r.Healthcheck != nil,
		r.Logging != nil, len(r.ExtraHosts) > 0, len(r.DNS) > 0, len(r.DNSSearch) > 0, len(r.DNSOptions) > 0,
		r.StopSignal != "", r.StopTimeout != nil, len(r.Tmpfs) > 0, r.ReadOnly, r.Init, len(r.SecurityOpt) > 0}
	var out []string
	for i, s := range set {
		if s {
			out = append(out, RuntimeKeys[i])
		}
	}
	return out
}

// Clone is a deep copy of r.
func (r Runtime) Clone() Runtime {
	c := r
	c.Entrypoint = slices.Clone(r.Entrypoint)
	c.Networks = nil
	for _, n := range r.Networks {
		n.Aliases = slices.Clone(n.Aliases)
		c.Networks = append(c.Networks, n)
	}
	c.CapAdd, c.CapDrop, c.Devices = slices.Clone(r.CapAdd), slices.Clone(r.CapDrop), slices.Clone(r.Devices)
	c.Ulimits, c.ExtraHosts = slices.Clone(r.Ulimits), slices.Clone(r.ExtraHosts)
	c.DNS, c.DNSSearch, c.DNSOptions = slices.Clone(r.DNS), slices.Clone(r.DNSSearch), slices.Clone(r.DNSOptions)
	c.Tmpfs, c.SecurityOpt = slices.Clone(r.Tmpfs), slices.Clone(r.SecurityOpt)
	if r.Healthcheck != nil {
		h := *r.Healthcheck
		h.Test = slices.Clone(h.Test)
		c.Healthcheck = &h
	}
	if r.Logging != nil {
		l := *r.Logging
		l.Options = maps.Clone(l.Options)
		c.Logging = &l
	}
	if r.StopTimeout != nil {
		t := *r.StopTimeout
		c.StopTimeout = &t
	}
	return c
}

var (
	userRE   = regexp.MustCompile(`^[a-zA-Z0-9_][a-zA-Z0-9_.-]*(:[a-zA-Z0-9_][a-zA-Z0-9_.-]*)?$`)
	hostRE   = regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9-]{0,62})(\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,62}))*$`)
	capRE    = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)
	signalRE = regexp.MustCompile(`^(SIG[A-Z0-9+-]+|[0-9]+)$`)
	ulimitRE = regexp.MustCompile(`^[a-z]+$`)
	sizeRE   = regexp.MustCompile(`^([0-9]+)([bkmg]?)$`)
)

// NoEntrypoint is the Entrypoint that runs none, overriding the image's: [""], what `docker run
// --entrypoint ""` sends and Compose's `entrypoint: ""` means. The engine stores it as none.
func NoEntrypoint() []string { return []string{""} }

// Check checks each Runtime field, calling bad for every problem with the field's manifest key
// ("cap_add[1]", "networks[0].aliases[2]").
func (r Runtime) Check(bad func(field, value, reason string)) {
	for i, a := range r.Entrypoint {
		if strings.Contains(a, "\x00") {
			bad(fmt.Sprintf("entrypoint[%d]", i), a, "contains NUL")
		}
	}
	if r.WorkingDir != "" && !strings.HasPrefix(r.WorkingDir, "/") {
		bad("working_dir", r.WorkingDir, "is not an absolute path")
	}
	if r.User != "" && !userRE.MatchString(r.User) {
		bad("user", r.User, "want a user name or number, optionally :group")
	}
	if r.Hostname != "" && !hostRE.MatchString(r.Hostname) {
		bad("hostname", r.Hostname, "is not a host name")
	}
	switch r.NetworkMode {
	case "", "bridge", "host", "none":
	default:
		bad("network_mode", r.NetworkMode, "want bridge, host or none (user-defined networks go under networks)")
	}
	if r.NetworkMode != "" && len(r.Networks) > 0 {
		bad("network_mode", r.NetworkMode, "a container with networks joins them: give one or the other")
	}
	if r.NetworkMode == "host" && r.Hostname != "" {
		bad("hostname", r.Hostname, "a container on the host's network has the host's name")
	}
	seen := map[string]int{}
	for i, n := range r.Networks {
		f := fmt.Sprintf("networks[%d]", i)
		switch {
		case n.Name == "":
			bad(f+".name", "", "is empty")
		case !nameRE.MatchString(n.Name):
			bad(f+".name", n.Name, "is not a network name")
		case n.Name == "host" || n.Name == "none":
			bad(f+".name", n.Name, "is a network mode: say network_mode: "+n.Name)
		}
		if j, dup := seen[n.Name]; dup {
			bad(f+".name", n.Name, fmt.Sprintf("duplicates networks[%d]", j))
		}
		seen[n.Name] = i
		for j, a := range n.Aliases {
			if !hostRE.MatchString(a) {
				bad(fmt.Sprintf("%s.aliases[%d]", f, j), a, "is not a host name")
			}
		}
		if n.IPv4 != "" {
			if a, err := netip.ParseAddr(n.IPv4); err != nil || !a.Is4() {
				bad(f+".ipv4_address", n.IPv4, "is not an IPv4 address")
			}
		}
		if n.IPv6 != "" {
			if a, err := netip.ParseAddr(n.IPv6); err != nil || !a.Is6() || a.Is4In6() {
				bad(f+".ipv6_address", n.IPv6, "is not an IPv6 address")
			}
		}
		if (n.IPv4 != "" || n.IPv6 != "") && n.Name == "bridge" {
			bad(f+".name", n.Name, "the default bridge takes no static address")
		}
	}
	switch r.PID {
	case "", "host":
	default:
		bad("pid", r.PID, `want "host" or nothing`)
	}
	for i, c := range r.CapAdd {
		if !capRE.MatchString(NormCap(c)) {
			bad(fmt.Sprintf("cap_add[%d]", i), c, "is not a capability name (NET_ADMIN, ALL)")
		}
	}
	for i, c := range r.CapDrop {
		if !capRE.MatchString(NormCap(c)) {
			bad(fmt.Sprintf("cap_drop[%d]", i), c, "is not a capability name (NET_RAW, ALL)")
		}
	}
	for i, d := range r.Devices {
		if _, err := ParseDevice(d); err != nil {
			bad(fmt.Sprintf("devices[%d]", i), d, err.Error())
		}
	}
	if _, err := ParseSize(r.Memory); err != nil {
		bad("memory", r.Memory, err.Error())
	}
	if r.MemorySwap != "-1" {
		if _, err := ParseSize(r.MemorySwap); err != nil {
			bad("memory_swap", r.MemorySwap, err.Error())
		}
	}
	if r.MemorySwap != "" && r.Memory == "" {
		bad("memory_swap", r.MemorySwap, "needs memory")
	}
	if _, err := ParseCPUs(r.CPUs); err != nil {
		bad("cpus", r.CPUs, err.Error())
	}
	if r.PidsLimit < 0 {
		bad("pids_limit", strconv.FormatInt(r.PidsLimit, 10), "must be >= 0")
	}
	for i, u := range r.Ulimits {
		if _, err := ParseUlimit(u); err != nil {
			bad(fmt.Sprintf("ulimits[%d]", i), u, err.Error())
		}
	}
	if h := r.Healthcheck; h != nil {
		switch {
		case len(h.Test) == 0:
			bad("healthcheck.test", "", "is empty: want [CMD, args...], [CMD-SHELL, command] or [NONE]")
		case h.Test[0] == "NONE" && len(h.Test) != 1, h.Test[0] == "CMD-SHELL" && len(h.Test) != 2,
			h.Test[0] == "CMD" && len(h.Test) < 2:
			bad("healthcheck.test", strings.Join(h.Test, " "), "want [CMD, args...], [CMD-SHELL, command] or [NONE]")
		case h.Test[0] != "NONE" && h.Test[0] != "CMD" && h.Test[0] != "CMD-SHELL":
			bad("healthcheck.test", h.Test[0], "begins with CMD, CMD-SHELL or NONE")
		}
		for _, d := range []struct{ f, v string }{{"interval", h.Interval}, {"timeout", h.Timeout}, {"start_period", h.StartPeriod}} {
			if _, err := ParseDuration(d.v); err != nil {
				bad("healthcheck."+d.f, d.v, err.Error())
			}
		}
		if h.Retries < 0 {
			bad("healthcheck.retries", strconv.Itoa(h.Retries), "must be >= 0")
		}
	}
	if l := r.Logging; l != nil {
		if l.Driver == "" || !nameRE.MatchString(l.Driver) {
			bad("logging.driver", l.Driver, "is not a log driver's name")
		}
		for _, k := range slices.Sorted(maps.Keys(l.Options)) {
			if k == "" {
				bad("logging.options", k, "an option's name is empty")
			}
		}
	}
	for i, h := range r.ExtraHosts {
		if _, _, err := ParseExtraHost(h); err != nil {
			bad(fmt.Sprintf("extra_hosts[%d]", i), h, err.Error())
		}
	}
	for i, d := range r.DNS {
		if _, err := netip.ParseAddr(d); err != nil {
			bad(fmt.Sprintf("dns[%d]", i), d, "is not an IP address")
		}
	}
	for i, d := range r.DNSSearch {
		if !hostRE.MatchString(d) {
			bad(fmt.Sprintf("dns_search[%d]", i), d, "is not a domain name")
		}
	}
	for i, d := range r.DNSOptions {
		if d == "" || strings.ContainsAny(d, " \t\n") {
			bad(fmt.Sprintf("dns_opt[%d]", i), d, "is empty or contains whitespace")
		}
	}
	if r.StopSignal != "" && !signalRE.MatchString(r.StopSignal) {
		bad("stop_signal", r.StopSignal, "want a signal name (SIGTERM) or number")
	}
	if r.StopTimeout != nil && *r.StopTimeout < 0 {
		bad("stop_timeout", strconv.Itoa(*r.StopTimeout), "must be >= 0 seconds")
	}
	for i, t := range r.Tmpfs {
		p, _, _ := strings.Cut(t, ":")
		if !strings.HasPrefix(p, "/") {
			bad(fmt.Sprintf("tmpfs[%d]", i), t, "want /path[:options]")
		}
	}
	for i, s := range r.SecurityOpt {
		if k, _, _ := strings.Cut(s, "="); k == "" || strings.ContainsAny(s, " \t\n") {
			bad(fmt.Sprintf("security_opt[%d]", i), s, "want key=value (no-new-privileges, seccomp=..., apparmor=...)")
		}
	}
}

// NormCap is a capability's name as the engine's default set spells it: upper case, no CAP_.
func NormCap(c string) string {
	return strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(c)), "CAP_")
}

// Device is one device made visible in a container.
type Device struct{ Host, Container, Perms string }

// String renders d in the manifest's form, leaving out the defaults.
func (d Device) String() string {
	switch {
	case d.Perms != "rwm":
		return d.Host + ":" + d.Container + ":" + d.Perms
	case d.Container != d.Host:
		return d.Host + ":" + d.Container
	}
	return d.Host
}

// ParseDevice parses "/dev/host[:/dev/container[:perms]]"; perms are some of r, w and m.
func ParseDevice(s string) (Device, error) {
	parts := strings.Split(s, ":")
	d := Device{Host: parts[0], Container: parts[0], Perms: "rwm"}
	if len(parts) > 3 || !strings.HasPrefix(d.Host, "/") {
		return d, fmt.Errorf("want /dev/host[:/dev/container[:rwm]]")
	}
	if len(parts) > 1 {
		d.Container = parts[1]
		if !strings.HasPrefix(d.Container, "/") {
			return d, fmt.Errorf("container path %q is not absolute", d.Container)
		}
	}
	if len(parts) == 3 {
		d.Perms = parts[2]
		if d.Perms == "" || strings.Trim(d.Perms, "rwm") != "" {
			return d, fmt.Errorf("permissions %q are not some of r, w, m", d.Perms)
		}
	}
	d.Host, d.Container = path.Clean(d.Host), path.Clean(d.Container)
	return d, nil
}

// ParseSize parses a byte size such as "64m" (b, k, m, g, powers of 1024); "" is 0.
func ParseSize(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	m := sizeRE.FindStringSubmatch(strings.ToLower(s))
	if m == nil {
		return 0, fmt.Errorf("want a size such as 64m (b, k, m, g)")
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("is too large")
	}
	shift := map[string]uint{"": 0, "b": 0, "k": 10, "m": 20, "g": 30}[m[2]]
	if n > (1<<62)>>shift {
		return 0, fmt.Errorf("is too large")
	}
	return n << shift, nil
}

// FormatSize renders n bytes in the largest unit that divides it exactly ("64m").
func FormatSize(n int64) string {
	for _, u := range []struct {
		s     string
		shift uint
	}{{"g", 30}, {"m", 20}, {"k", 10}} {
		if n != 0 && n%(1<<u.shift) == 0 {
			return strconv.FormatInt(n>>u.shift, 10) + u.s
		}
	}
	return strconv.FormatInt(n, 10)
}

// ParseCPUs parses a CPU count ("0.5", "2") as the engine's billionths of a CPU; "" is 0.
func ParseCPUs(s string) (int64, error) {
	if s == "" {
		return 0, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f <= 0 || f > 1<<20 {
		return 0, fmt.Errorf("want a CPU count above 0 such as 0.5 or 2")
	}
	return int64(f*1e9 + 0.5), nil
}

// FormatCPUs renders the engine's billionths of a CPU as a CPU count.
func FormatCPUs(nano int64) string {
	return strconv.FormatFloat(float64(nano)/1e9, 'f', -1, 64)
}

// Ulimit is one resource limit.
type Ulimit struct {
	Name       string
	Soft, Hard int64
}

// String renders u as "name=soft[:hard]", hard left out when it equals soft.
func (u Ulimit) String() string {
	if u.Soft == u.Hard {
		return fmt.Sprintf("%s=%d", u.Name, u.Soft)
	}
	return fmt.Sprintf("%s=%d:%d", u.Name, u.Soft, u.Hard)
}

// ParseUlimit parses "name=soft[:hard]" ("-1" is unlimited).
func ParseUlimit(s string) (Ulimit, error) {
	name, v, ok := strings.Cut(s, "=")
	if !ok || !ulimitRE.MatchString(name) {
		return Ulimit{}, fmt.Errorf("want name=soft[:hard] (nofile=1024:2048)")
	}
	soft, hard, hasHard := strings.Cut(v, ":")
	u := Ulimit{Name: name}
	var err error
	if u.Soft, err = strconv.ParseInt(soft, 10, 64); err != nil {
		return u, fmt.Errorf("soft limit %q is not a number", soft)
	}
	u.Hard = u.Soft
	if hasHard {
		if u.Hard, err = strconv.ParseInt(hard, 10, 64); err != nil {
			return u, fmt.Errorf("hard limit %q is not a number", hard)
		}
	}
	if u.Soft > u.Hard && u.Hard >= 0 {
		return u, fmt.Errorf("soft limit %d is above the hard limit %d", u.Soft, u.Hard)
	}
	return u, nil
}

// ParseExtraHost parses "name:address" (an IPv6 address may follow the first colon whole).
func ParseExtraHost(s string) (string, netip.Addr, error) {
	name, addr, ok := strings.Cut(s, ":")
	if !ok || !hostRE.MatchString(name) {
		return "", netip.Addr{}, fmt.Errorf("want name:address")
	}
	a, err := netip.ParseAddr(strings.Trim(addr, "[]"))
	if err != nil {
		return "", netip.Addr{}, fmt.Errorf("address %q is not an IP address", addr)
	}
	return name, a, nil
}

// ParseDuration parses a Go duration ("30s"); "" is 0, the engine's default.
func ParseDuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("want a duration such as 30s or 1m30s")
	}
	return d, nil
}
