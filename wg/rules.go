package wg

// The policy rules that lead into a found link's own routing table: wg-quick's full tunnel (a
// peer allowed everything) routes through table 51820, reached only by two rules it adds beside
// the link ("not fwmark 51820 lookup 51820" and "lookup main suppress_prefixlength 0"). The rules
// outlive the link at a takeover but not a reboot, so they are kept with the routes and put back
// whenever the mesh's interface is raised or attached.

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"syscall"

	"github.com/vishvananda/netlink"
)

// Rule is one policy routing rule, as far as wg-quick writes them.
type Rule struct {
	Family   int  `json:"family"` // netlink.FAMILY_V4 or FAMILY_V6
	Priority int  `json:"priority"`
	Table    int  `json:"table"`
	Mark     int  `json:"fwmark,omitempty"`
	Invert   bool `json:"not,omitempty"`
	// SuppressPrefixlen is -1 when the rule has none.
	SuppressPrefixlen int `json:"suppress_prefixlength"`
}

func (r Rule) String() string {
	s := ""
	if r.Family == netlink.FAMILY_V6 {
		s = "-6 "
	}
	if r.Invert {
		s += "not "
	}
	if r.Mark != 0 {
		s += fmt.Sprintf("fwmark %#x ", r.Mark)
	}
	if r.Table == MainTable {
		s += "lookup main"
	} else {
		s += fmt.Sprintf("lookup %d", r.Table)
	}
	if r.SuppressPrefixlen >= 0 {
		s += fmt.Sprintf(" suppress_prefixlength %d", r.SuppressPrefixlen)
	}
	return s
}

// tableRules are the rules that look a route up in one of tables (the found link's own, never
// main), and the main-table rules that suppress its default route beside them: the pair
// wg-quick writes for a full tunnel. None when tables is empty.
func tableRules(tables []int) ([]Rule, error) {
	tables = slices.DeleteFunc(slices.Clone(tables), func(t int) bool { return t == MainTable || t == 0 })
	if len(tables) == 0 {
		return nil, nil
	}
	rs, err := netlink.RuleList(netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("listing policy rules: %w", err)
	}
	var out []Rule
	for _, r := range rs {
		own := slices.Contains(tables, r.Table)
		suppress := r.Table == MainTable && r.SuppressPrefixlen >= 0
		if !own && !suppress {
			continue
		}
		out = append(out, Rule{Family: r.Family, Priority: r.Priority, Table: r.Table, Mark: int(r.Mark),
			Invert: r.Invert, SuppressPrefixlen: r.SuppressPrefixlen})
	}
	return out, nil
}

// installRules adds those of rules the machine lacks (compared without their priority when the
// kept one had none); src_valid_mark is set as wg-quick sets it, so a marked packet's reply
// passes the reverse-path filter.
func installRules(rules []Rule) error {
	if len(rules) == 0 {
		return nil
	}
	have, err := netlink.RuleList(netlink.FAMILY_ALL)
	if err != nil {
		return fmt.Errorf("listing policy rules: %w", err)
	}
	for _, r := range rules {
		if slices.ContainsFunc(have, func(h netlink.Rule) bool { return sameRule(h, r) }) {
			continue
		}
		nr := netlink.NewRule()
		nr.Family, nr.Priority, nr.Table, nr.Invert, nr.SuppressPrefixlen = r.Family, r.Priority, r.Table, r.Invert, r.SuppressPrefixlen
		if r.Mark != 0 {
			nr.Mark = uint32(r.Mark)
		}
		if err := netlink.RuleAdd(nr); err != nil && !errors.Is(err, syscall.EEXIST) {
			return fmt.Errorf("adding policy rule %s as it was found: %w", r, err)
		}
		if r.Family == netlink.FAMILY_V4 && r.Mark != 0 {
			if err := os.WriteFile("/proc/sys/net/ipv4/conf/all/src_valid_mark", []byte("1\n"), 0o644); err != nil {
				return fmt.Errorf("setting src_valid_mark for policy rule %s: %w", r, err)
			}
		}
	}
	return nil
}

func sameRule(h netlink.Rule, r Rule) bool {
	return h.Family == r.Family && h.Table == r.Table && int(h.Mark) == r.Mark && h.Invert == r.Invert &&
		h.SuppressPrefixlen == r.SuppressPrefixlen && (r.Priority == 0 || h.Priority == r.Priority)
}
