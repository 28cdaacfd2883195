package netfilter

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Kind is the kind of a found firewall.
type Kind string

// Kinds meshd speaks. Anything else is refused by Detect.
const (
	KindNone     Kind = "none"
	KindUFW      Kind = "ufw"
	KindNftables Kind = "nftables"
	KindIptables Kind = "iptables"
)

// Sources an Opening may name besides a CIDR.
const (
	FromPrivate  = "private"
	FromAnywhere = "anywhere"
)

// Paths an Opening may take: traffic for the machine itself, or traffic the machine forwards
// (a published container port is forwarded: Docker DNATs it in nat PREROUTING).
const (
	PathIncoming  = "incoming"
	PathForwarded = "forwarded"
	// PathRouted is traffic the machine forwards between two addresses of the private network,
	// in on its interface and out on it again: on a hub, a node of the mesh reaching a spoke
	// that still rides its found tunnel (or a carried peer) turns there (ADR 0105). Its opening
	// is every protocol, no port, from the private network only (RoutedOpening).
	PathRouted = "routed"
)

// RoutedOpening is the one opening of PathRouted: every protocol between the private network's
// addresses, in and out of its interface, and nothing else forwarded.
func RoutedOpening(module string) Opening {
	return Opening{Module: module, Proto: ProtoAll, Port: 0, From: FromPrivate, Path: PathRouted}
}

// ProtoAll is a routed opening's protocol: every one.
const ProtoAll = "all"

// Opening says a port is reachable from a source on a path. It is a state, not a command: the
// driver makes the set of meshd-marked rules equal to the set of openings it is given.
type Opening struct {
	Module string // the module that declares it; informational, carried in the mark
	Proto  string // "tcp" or "udp"
	Port   uint16 // the port as the client addresses it (the published port when forwarded)
	From   string // FromPrivate, FromAnywhere or a CIDR
	Path   string // PathIncoming or PathForwarded
}

// Private is the mesh's private network: the WireGuard interface and its address range.
type Private struct {
	Interface string
	Range     netip.Prefix
}

// MarkPrefix starts every comment meshd puts on a rule it adds.
const MarkPrefix = "meshd:"

// Validate reports what is wrong with o, naming it.
func (o Opening) Validate() error {
	if o.Path == PathRouted {
		if o.Proto != ProtoAll || o.Port != 0 || o.From != FromPrivate {
			return fmt.Errorf("opening %s: a routed opening is every protocol between the private network's addresses (proto %s, port 0, from %s)", o, ProtoAll, FromPrivate)
		}
	} else if o.Proto != "tcp" && o.Proto != "udp" {
		return fmt.Errorf("opening %s: proto %q is not tcp or udp", o, o.Proto)
	}
	if o.Port == 0 && o.Path != PathRouted {
		return fmt.Errorf("opening %s: port 0", o)
	}
	if o.Path != PathIncoming && o.Path != PathForwarded && o.Path != PathRouted {
		return fmt.Errorf("opening %s: path %q is not %s, %s or %s", o, o.Path, PathIncoming, PathForwarded, PathRouted)
	}
	if strings.ContainsAny(o.Module, ": \"'\n") {
		return fmt.Errorf("opening %s: module name %q holds a character a mark cannot carry", o, o.Module)
	}
	if o.From != FromPrivate && o.From != FromAnywhere {
		if _, err := netip.ParsePrefix(o.From); err != nil {
			return fmt.Errorf("opening %s: from %q is not private, anywhere or a CIDR: %w", o, o.From, err)
		}
	}
	return nil
}

// Mark is the comment meshd puts on the rules that implement o. It names every field, so
// an opening can be read back from the rule alone: meshd:<module>:<path>:<proto>/<port>:<from>.
func (o Opening) Mark() string {
	return fmt.Sprintf("%s%s:%s:%s/%d:%s", MarkPrefix, o.Module, o.Path, o.Proto, o.Port, o.From)
}

// String names the opening for logs and errors.
func (o Opening) String() string {
	m := o.Module
	if m == "" {
		m = "-"
	}
	return fmt.Sprintf("%s %s/%d from %s (%s)", m, o.Proto, o.Port, o.From, o.Path)
}

// ParseMark is Mark's inverse; ok is false for a comment that is not meshd's.
func ParseMark(s string) (Opening, bool) {
	if !strings.HasPrefix(s, MarkPrefix) {
		return Opening{}, false
	}
	parts := strings.SplitN(strings.TrimPrefix(s, MarkPrefix), ":", 4)
	if len(parts) != 4 {
		return Opening{}, false
	}
	pp := strings.SplitN(parts[2], "/", 2)
	if len(pp) != 2 {
		return Opening{}, false
	}
	port, err := strconv.ParseUint(pp[1], 10, 16)
	if err != nil {
		return Opening{}, false
	}
	o := Opening{Module: parts[0], Path: parts[1], Proto: pp[0], Port: uint16(port), From: parts[3]}
	if o.Validate() != nil {
		return Opening{}, false
	}
	return o, true
}

// Found is what Detect saw: the found firewall's kind and where it lives.
type Found struct {
	Kind    Kind
	Active  bool
	Backend string // for ufw and iptables: "nft" or "legacy"
	// Incoming and Forwarded count the found firewall's own rules on each path (meshd's
	// marked rules excluded).
	Incoming  int
	Forwarded int
	// Config is where the found firewall's configuration lives (a directory or a file);
	// empty when nothing on disk loads it.
	Config string
	// Tables are the found nftables tables ("inet filter"), for KindNftables.
	Tables []string
	// DockerUser is true when a DOCKER-USER chain exists: forwarded openings then also go
	// there, matched on the original (pre-DNAT) port.
	DockerUser bool
	// IPv6, for KindIptables: the found firewall filters IPv6 too (rules of its own in
	// ip6tables, or a closed INPUT policy there), so every opening gets its IPv6 twin;
	// Incoming6 and Forwarded6 count those rules as Incoming and Forwarded count IPv4's.
	// Active is either family's: the flip retires a found iptables in both.
	IPv6                  bool
	Incoming6, Forwarded6 int
}

// String is one line for the host report.
func (f Found) String() string {
	s := string(f.Kind)
	if f.Backend != "" {
		s += " over iptables-" + f.Backend
	}
	if f.Kind != KindNone {
		state := "inactive"
		if f.Active {
			state = "active"
		}
		s += fmt.Sprintf(", %s, %d incoming and %d forwarded rules", state, f.Incoming, f.Forwarded)
	}
	if f.Kind == KindIptables {
		if f.IPv6 {
			s += fmt.Sprintf(", IPv6 filtered too (%d incoming and %d forwarded rules in ip6tables)", f.Incoming6, f.Forwarded6)
		} else {
			s += ", IPv6 not filtered (no rules in ip6tables)"
		}
	}
	if f.Config != "" {
		s += ", config " + f.Config
	}
	return s
}

// State of one opening after a converge.
type State string

// Opening states as the host report shows them.
const (
	InForce  State = "in force"
	Restored State = "restored"
	Failed   State = "failed"
)

// OpeningState is one line of the report: an opening and what became of it.
type OpeningState struct {
	Opening Opening
	State   State
	// At is when the opening was put in force (first added, or restored after a reload of
	// the found firewall dropped it).
	At     time.Time
	Reason string // why it failed, or what it rests on (for example "path not filtered")
}

// Report is what one Converge call saw and did.
type Report struct {
	Kind     Kind
	Openings []OpeningState
	// Added and Removed count the marked rules written; both zero means nothing was written.
	Added   int
	Removed int
}

// Driver converges openings through one found firewall. It is declarative: Converge makes
// the set of meshd-marked rules equal to desired, re-reading the firewall on every call so a
// reload that dropped an opening is noticed and repaired. A call with nothing to change
// writes nothing.
type Driver interface {
	Kind() Kind
	Converge(ctx context.Context, desired []Opening) (Report, error)
}

// ErrUnsupported is wrapped by Detect's refusals: a found firewall meshd does not speak, or
// cannot read. Adoption refuses on it rather than adopt a machine with nothing protecting
// the mesh's ports.
var ErrUnsupported = errors.New("found firewall is not one meshd speaks")
