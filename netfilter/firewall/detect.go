package firewall

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"meshd/netfilter"
	"meshd/netfilter/nft"
	"meshd/netfilter/ufw"
	"meshd/netfilter/xt"
)

// Detect reports the firewall found in env. firewalld, two firewalls at once, or a ruleset it
// cannot read are errors wrapping netfilter.ErrUnsupported and naming what was found.
func Detect(ctx context.Context, env netfilter.Env) (netfilter.Found, error) {
	c, closeConn, err := env.NftConn()
	if err != nil {
		return netfilter.Found{}, err
	}
	defer closeConn()
	v, err := nft.ReadView(c, env)
	if err != nil {
		return netfilter.Found{}, err
	}
	if err := refuseFirewalld(ctx, env, v); err != nil {
		return netfilter.Found{}, err
	}
	var dumps, dumps6 []*xt.Dump
	for _, b := range []string{"nft", "legacy"} {
		for _, v6 := range []bool{false, true} {
			d, ok, err := xt.Read(ctx, env, b, v6)
			if err != nil {
				return netfilter.Found{}, fmt.Errorf("%w: %w", err, netfilter.ErrUnsupported)
			}
			switch {
			case ok && v6:
				dumps6 = append(dumps6, d)
			case ok:
				dumps = append(dumps, d)
			}
		}
	}
	if f, ok, err := ufw.Detect(ctx, env, dumps); err != nil || ok {
		return f, err
	}
	nf, err := nft.Detect(ctx, env, v)
	if err != nil {
		return netfilter.Found{}, err
	}
	if nf != nil {
		// Docker's DOCKER-USER chain is in iptables, which package nft does not read.
		for _, d := range dumps {
			if d.Has("DOCKER-USER") {
				nf.DockerUser, nf.Backend = true, d.Backend
			}
		}
	}
	xf := xt.Detect(ctx, env, dumps, dumps6)
	switch {
	case nf != nil && xf != nil:
		return netfilter.Found{}, fmt.Errorf("two firewalls found in %s: an nftables ruleset (%s) and iptables-%s rules (%d incoming, %d forwarded): %w",
			env.NSName(), strings.Join(nf.Tables, ", "), xf.Backend, xf.Incoming, xf.Forwarded, netfilter.ErrUnsupported)
	case nf != nil:
		return *nf, nil
	case xf != nil:
		return *xf, nil
	}
	return netfilter.Found{Kind: netfilter.KindNone}, nil
}

// refuseFirewalld is an error when firewalld is active or running in env.
func refuseFirewalld(ctx context.Context, env netfilter.Env, v *nft.View) error {
	for _, t := range v.All {
		if t.Name == "firewalld" {
			return fmt.Errorf("firewalld is active (nftables table %s) in %s: %w", netfilter.TableName(t), env.NSName(), netfilter.ErrUnsupported)
		}
	}
	if _, ok, _ := env.ReadFile(ctx, "/run/firewalld/firewalld.pid"); ok {
		return fmt.Errorf("firewalld is running (/run/firewalld/firewalld.pid) in %s: %w", env.NSName(), netfilter.ErrUnsupported)
	}
	return nil
}

// stampFiles are the files Detect's answer reads besides the kernel: each one's presence, size
// and modification time go into a Stamp.
var stampFiles = []string{"/run/firewalld/firewalld.pid", ufw.Conf, ufw.UserRules, ufw.User6, nft.Conf, xt.RulesV4}

// Stamp is a cheap read of everything Detect's answer depends on: the nftables ruleset's
// generation (the kernel counts every committed change, whoever made it: nft, iptables-nft, ufw
// and Docker over it, meshd itself) and the presence, size and modification time of the found
// firewalls' configuration files. Two equal stamps mean Detect would answer the same, so a
// caller detects again only when the stamp moved. It is "" when no stamp can stand for the
// firewall: iptables-legacy or ip6tables-legacy has a filter table (legacy rules have no
// generation; they are read again each time), the files are not seen from this process, or a
// read failed.
func Stamp(ctx context.Context, env netfilter.Env) string {
	gen, err := env.RulesetGeneration()
	if err != nil || !env.SeesFiles() {
		return ""
	}
	// A legacy filter table in either family (ip6tables-legacy as much as iptables-legacy).
	for _, f := range []string{"/proc/net/ip_tables_names", "/proc/net/ip6_tables_names"} {
		var names []byte
		if env.NetNS == "" && env.Runner == nil {
			names, err = os.ReadFile(f)
		} else {
			names, err = env.Run(ctx, "cat", f)
		}
		if err == nil && bytes.Contains(append([]byte("\n"), names...), []byte("\nfilter\n")) {
			return ""
		}
	}
	s := fmt.Sprintf("gen %d", gen)
	for _, p := range stampFiles {
		st, err := os.Stat(env.Path(p))
		switch {
		case errors.Is(err, os.ErrNotExist):
			s += "|-"
		case err != nil:
			return ""
		default:
			s += fmt.Sprintf("|%d %d", st.Size(), st.ModTime().UnixNano())
		}
	}
	return s
}
