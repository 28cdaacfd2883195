package ctrspec

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Labels a container created by meshd carries. The host reconciler adds them through Spec.Labels
// (the engine driver never invents them), so a container without them was created by someone
// else.
const (
	// LabelManaged is "true" on every container meshd created.
	LabelManaged = "meshd.managed"
	// LabelModule names the catalogue module that declared the container.
	LabelModule = "meshd.module"
)

// ManagedLabels returns the labels the host puts on a container it creates for module.
func ManagedLabels(module string) map[string]string {
	return map[string]string{LabelManaged: "true", LabelModule: module}
}

// Restart policies a Spec may name; on-failure may carry a retry limit ("on-failure:5").
const (
	RestartNo            = "no"
	RestartAlways        = "always"
	RestartUnlessStopped = "unless-stopped"
	RestartOnFailure     = "on-failure"
)

// Spec is what a module declares about one container.
//
// Ports are in the catalogue's form "[hostip:]hostport:containerport[/proto]" (host port 0 lets
// the engine choose), Volumes "/host:/ctr[:ro]" (a named volume "name:/ctr" is accepted too, so a
// spec reconstructed from a found container validates). An empty Restart means "no"; a nil Cmd
// means the image's default command.
type Spec struct {
	Name    string            `json:"name" yaml:"name"`
	Image   string            `json:"image" yaml:"image"`
	Env     map[string]string `json:"env,omitempty" yaml:"env,omitempty"`
	Ports   []string          `json:"ports,omitempty" yaml:"ports,omitempty"`
	Volumes []string          `json:"volumes,omitempty" yaml:"volumes,omitempty"`
	Restart string            `json:"restart,omitempty" yaml:"restart,omitempty"`
	Labels  map[string]string `json:"labels,omitempty" yaml:"labels,omitempty"`
	Cmd     []string          `json:"cmd,omitempty" yaml:"cmd,omitempty"`
	Runtime `yaml:",inline"`

	// Unexpressed names what a found container carries that no Spec can say (a setting of the
	// engine's away from its default: "HostConfig.IpcMode host"); only a container's
	// reconstruction has it, and a container created from a Spec would lose each.
	Unexpressed []string `json:"unexpressed,omitempty" yaml:"-"`
}

// FieldError says which field of which container's Spec is wrong and why.
type FieldError struct {
	Container string // the spec's name, "" if the name itself is missing
	Field     string // "name", "image", "env", "ports[1]", "volumes[0]", "restart", "labels", "cmd", a Runtime key
	Value     string // the offending value
	Reason    string
}

func (e *FieldError) Error() string {
	c := e.Container
	if c == "" {
		c = "(unnamed)"
	}
	if e.Value == "" {
		return fmt.Sprintf("container %s: %s: %s", c, e.Field, e.Reason)
	}
	return fmt.Sprintf("container %s: %s %q: %s", c, e.Field, e.Value, e.Reason)
}

// nameRE is the engine's own rule for container names.
var nameRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`)

// Validate checks every field and returns all problems found, each a *FieldError naming its
// field (joined with errors.Join).
func (s Spec) Validate() error {
	var errs []error
	bad := func(field, value, reason string) {
		errs = append(errs, &FieldError{Container: s.Name, Field: field, Value: value, Reason: reason})
	}
	if s.Name == "" {
		bad("name", "", "is empty")
	} else if !nameRE.MatchString(s.Name) {
		bad("name", s.Name, "must match [a-zA-Z0-9][a-zA-Z0-9_.-]*")
	}
	if s.Image == "" {
		bad("image", "", "is empty")
	} else if strings.ContainsAny(s.Image, " \t\n") {
		bad("image", s.Image, "contains whitespace")
	}
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			bad("env", k, "variable name is empty or contains '=' or NUL")
		}
	}
	seen := map[PortBinding]int{}
	for i, p := range s.Ports {
		b, err := ParsePort(p)
		if err != nil {
			bad(fmt.Sprintf("ports[%d]", i), p, err.Error())
			continue
		}
		if j, dup := seen[b]; dup {
			bad(fmt.Sprintf("ports[%d]", i), p, fmt.Sprintf("duplicates ports[%d]", j))
		}
		seen[b] = i
	}
	for i, v := range s.Volumes {
		if _, err := ParseVolume(v); err != nil {
			bad(fmt.Sprintf("volumes[%d]", i), v, err.Error())
		}
	}
	if _, _, err := ParseRestart(s.Restart); err != nil {
		bad("restart", s.Restart, err.Error())
	}
	for _, k := range slices.Sorted(maps.Keys(s.Labels)) {
		if k == "" {
			bad("labels", k, "label key is empty")
		}
	}
	for i, a := range s.Cmd {
		if strings.Contains(a, "\x00") {
			bad(fmt.Sprintf("cmd[%d]", i), a, "contains NUL")
		}
	}
	s.Runtime.Check(bad)
	for _, u := range s.Unexpressed {
		bad("unexpressed", u, "a container cannot be created with what a Spec cannot say")
	}
	return errors.Join(errs...)
}

// PortBinding is one published port, normalised: HostIP is "" for every address (the engine's
// "0.0.0.0"), Proto is lower case and never empty.
type PortBinding struct {
	HostIP        string
	HostPort      uint16 // 0: the engine chooses
	ContainerPort uint16
	Proto         string // tcp, udp or sctp
}

// String renders the binding in the catalogue's form, leaving out defaults.
func (b PortBinding) String() string {
	var sb strings.Builder
	if b.HostIP != "" {
		if strings.Contains(b.HostIP, ":") {
			sb.WriteString("[" + b.HostIP + "]:")
		} else {
			sb.WriteString(b.HostIP + ":")
		}
	}
	fmt.Fprintf(&sb, "%d:%d", b.HostPort, b.ContainerPort)
	if b.Proto != "tcp" {
		sb.WriteString("/" + b.Proto)
	}
	return sb.String()
}

// ParsePort parses "[hostip:]hostport:containerport[/proto]". An IPv6 host address is written in
// brackets: "[::1]:8080:80".
func ParsePort(s string) (PortBinding, error) {
	var b PortBinding
	rest, proto, hasProto := strings.Cut(s, "/")
	b.Proto = "tcp"
	if hasProto {
		switch p := strings.ToLower(proto); p {
		case "tcp", "udp", "sctp":
			b.Proto = p
		default:
			return b, fmt.Errorf("protocol %q is not tcp, udp or sctp", proto)
		}
	}
	var hostIP, hostPort, ctrPort string
	if strings.HasPrefix(rest, "[") {
		end := strings.Index(rest, "]:")
		if end < 0 {
			return b, errors.New("unterminated [ipv6] host address")
		}
		hostIP = rest[1:end]
		var ok bool
		hostPort, ctrPort, ok = strings.Cut(rest[end+2:], ":")
		if !ok {
			return b, errors.New("want [hostip:]hostport:containerport[/proto]")
		}
	} else {
		parts := strings.Split(rest, ":")
		switch len(parts) {
		case 2:
			hostPort, ctrPort = parts[0], parts[1]
		case 3:
			hostIP, hostPort, ctrPort = parts[0], parts[1], parts[2]
		default:
			return b, errors.New("want [hostip:]hostport:containerport[/proto]")
		}
	}
	if hostIP != "" {
		a, err := netip.ParseAddr(hostIP)
		if err != nil {
			return b, fmt.Errorf("host address %q is not an IP address", hostIP)
		}
		if !a.IsUnspecified() || a.Is6() {
			b.HostIP = a.String()
		}
	}
	hp, err := parsePortNumber(hostPort, true)
	if err != nil {
		return b, fmt.Errorf("host port: %w", err)
	}
	cp, err := parsePortNumber(ctrPort, false)
	if err != nil {
		return b, fmt.Errorf("container port: %w", err)
	}
	b.HostPort, b.ContainerPort = hp, cp
	return b, nil
}

func parsePortNumber(s string, zeroOK bool) (uint16, error) {
	if s == "" {
		return 0, errors.New("is empty")
	}
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		return 0, fmt.Errorf("%q is not a port number 0-65535 (ranges are not supported)", s)
	}
	if n == 0 && !zeroOK {
		return 0, errors.New("must not be 0")
	}
	return uint16(n), nil
}

// Volume is one bind mount (or named volume), normalised: read-write is the default and not
// listed in Options; Options are sorted.
type Volume struct {
	Source   string // absolute host path, or a volume name
	Target   string // absolute path in the container
	ReadOnly bool
	Options  []string // other engine options (z, Z, propagation), sorted
}

// String renders the volume in the catalogue's form.
func (v Volume) String() string {
	opts := slices.Clone(v.Options)
	if v.ReadOnly {
		opts = append([]string{"ro"}, opts...)
	}
	if len(opts) == 0 {
		return v.Source + ":" + v.Target
	}
	return v.Source + ":" + v.Target + ":" + strings.Join(opts, ",")
}

// ParseVolume parses "/host:/ctr[:ro]" (also "name:/ctr" and engine options such as "ro,z").
func ParseVolume(s string) (Volume, error) {
	var v Volume
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return v, errors.New("want /host:/container[:ro]")
	}
	v.Source, v.Target = parts[0], parts[1]
	switch {
	case v.Source == "":
		return v, errors.New("host path is empty")
	case strings.HasPrefix(v.Source, "/"):
		v.Source = path.Clean(v.Source)
	case !nameRE.MatchString(v.Source):
		return v, fmt.Errorf("host path %q is neither absolute nor a volume name", v.Source)
	}
	if !strings.HasPrefix(v.Target, "/") {
		return v, fmt.Errorf("container path %q is not absolute", v.Target)
	}
	v.Target = path.Clean(v.Target)
	if len(parts) == 3 {
		for _, o := range strings.Split(parts[2], ",") {
			switch o {
			case "ro":
				v.ReadOnly = true
			case "rw":
			case "z", "Z", "shared", "rshared", "slave", "rslave", "private", "rprivate", "nocopy":
				v.Options = append(v.Options, o)
			default:
				return v, fmt.Errorf("mode %q is not ro, rw or an engine option", o)
			}
		}
		sort.Strings(v.Options)
	}
	return v, nil
}

// ParseRestart parses a restart policy: "" or no, always, unless-stopped, on-failure[:N].
// It returns the engine's policy name and retry limit.
func ParseRestart(s string) (name string, maxRetries int, err error) {
	name, n, hasN := strings.Cut(s, ":")
	switch name {
	case "", RestartNo:
		name = RestartNo
	case RestartAlways, RestartUnlessStopped:
	case RestartOnFailure:
		if hasN {
			maxRetries, err = strconv.Atoi(n)
			if err != nil || maxRetries < 0 {
				return "", 0, fmt.Errorf("retry limit %q is not a number >= 0", n)
			}
		}
		return name, maxRetries, nil
	default:
		return "", 0, errors.New("want no, always, unless-stopped or on-failure[:N]")
	}
	if hasN {
		return "", 0, fmt.Errorf("only on-failure takes a retry limit")
	}
	return name, 0, nil
}
