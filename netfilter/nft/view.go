package nft

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/google/nftables"
	"meshd/netfilter"
)

// Conf is where a found nftables ruleset is loaded from at boot (nftables.service).
const Conf = "/etc/nftables.conf"

// xtTableNames are the table names iptables-nft manages inside nftables.
var xtTableNames = map[string]bool{"filter": true, "nat": true, "mangle": true, "raw": true, "security": true, "broute": true}

// ownTable says whether an nftables table is meshd's own, Docker's or iptables-nft's, i.e. not
// part of a found nftables ruleset.
func ownTable(t *nftables.Table) bool {
	if strings.HasPrefix(t.Name, "meshd") || strings.HasPrefix(t.Name, "docker") {
		return true
	}
	return t.Family != nftables.TableFamilyINet && xtTableNames[t.Name]
}

// View is a read of the nftables ruleset: the found tables' filter chains at the input and
// forward hooks, in priority order.
type View struct {
	tables  []*nftables.Table
	input   []*nftables.Chain
	forward []*nftables.Chain
	All     []*nftables.Table // every table, meshd's, Docker's and iptables-nft's too
}

// ReadView reads the ruleset in env through c. A ruleset it cannot read is an error wrapping
// netfilter.ErrUnsupported.
func ReadView(c *nftables.Conn, env netfilter.Env) (*View, error) {
	tables, err := c.ListTables()
	if err != nil {
		return nil, fmt.Errorf("nftables ruleset in %s is unreadable: %w: %w", env.NSName(), err, netfilter.ErrUnsupported)
	}
	chains, err := c.ListChains()
	if err != nil {
		return nil, fmt.Errorf("nftables chains in %s are unreadable: %w: %w", env.NSName(), err, netfilter.ErrUnsupported)
	}
	v := &View{All: tables}
	for _, t := range tables {
		if !ownTable(t) {
			v.tables = append(v.tables, t)
		}
	}
	for _, ch := range chains {
		if ownTable(ch.Table) || ch.Hooknum == nil || ch.Type != nftables.ChainTypeFilter {
			continue
		}
		switch *ch.Hooknum {
		case *nftables.ChainHookInput:
			v.input = append(v.input, ch)
		case *nftables.ChainHookForward:
			v.forward = append(v.forward, ch)
		}
	}
	return v, nil
}

// Detect finds a plain nftables ruleset: found tables with filter chains at input or
// forward. nil when there is none. Whether Docker's DOCKER-USER chain is there too is the
// caller's to say, from iptables.
func Detect(ctx context.Context, env netfilter.Env, v *View) (*netfilter.Found, error) {
	if len(v.input)+len(v.forward) == 0 {
		return nil, nil
	}
	f := netfilter.Found{Kind: netfilter.KindNftables, Active: true}
	for _, t := range v.tables {
		f.Tables = append(f.Tables, netfilter.TableName(t))
	}
	sort.Strings(f.Tables)
	var err error
	if f.Incoming, err = count(env, v.input); err != nil {
		return nil, err
	}
	if f.Forwarded, err = count(env, v.forward); err != nil {
		return nil, err
	}
	if _, ok, _ := env.ReadFile(ctx, Conf); ok {
		f.Config = Conf
	}
	return &f, nil
}

func count(env netfilter.Env, chains []*nftables.Chain) (int, error) {
	n := 0
	for _, ch := range chains {
		rules, err := env.ListRules(ch)
		if err != nil {
			return 0, fmt.Errorf("nftables chain %s %s is unreadable: %w: %w", netfilter.TableName(ch.Table), ch.Name, err, netfilter.ErrUnsupported)
		}
		for _, r := range rules {
			if _, ok := netfilter.ParseMark(r.Comment); !ok {
				n++
			}
		}
	}
	return n, nil
}
