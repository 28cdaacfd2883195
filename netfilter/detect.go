package netfilter

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/google/nftables"
)

// ErrUnsupported is wrapped by Detect's refusals: a found firewall meshd does not speak, or
// cannot read. Adoption refuses on it rather than adopt a machine with nothing protecting
// the mesh's ports.
var ErrUnsupported = errors.New("found firewall is not one meshd speaks")

// Paths where found firewalls keep their configuration.
const (
	ufwDir       = "/etc/ufw"
	ufwConf      = "/etc/ufw/ufw.conf"
	ufwUserRules = "/etc/ufw/user.rules"
	ufwUser6     = "/etc/ufw/user6.rules"
	nftConf      = "/etc/nftables.conf"
	iptRulesV4   = "/etc/iptables/rules.v4"
	iptRulesV6   = "/etc/iptables/rules.v6"
)

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

// nftView is a read of the nftables ruleset: the found tables' filter chains at the input and
// forward hooks, in priority order.
type nftView struct {
	tables  []*nftables.Table
	input   []*nftables.Chain
	forward []*nftables.Chain
	all     []*nftables.Table
}

func readNftView(c *nftables.Conn, env Env) (*nftView, error) {
	tables, err := c.ListTables()
	if err != nil {
		return nil, fmt.Errorf("nftables ruleset in %s is unreadable: %w: %w", env.NSName(), err, ErrUnsupported)
	}
	chains, err := c.ListChains()
	if err != nil {
		return nil, fmt.Errorf("nftables chains in %s are unreadable: %w: %w", env.NSName(), err, ErrUnsupported)
	}
	v := &nftView{all: tables}
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

// Detect reports the firewall found in env. firewalld, two firewalls at once, or a ruleset it
// cannot read are errors wrapping ErrUnsupported and naming what was found.
func Detect(ctx context.Context, env Env) (Found, error) {
	c, closeConn, err := env.NftConn()
	if err != nil {
		return Found{}, err
	}
	defer closeConn()
	v, err := readNftView(c, env)
	if err != nil {
		return Found{}, err
	}
	if err := refuseFirewalld(ctx, env, v); err != nil {
		return Found{}, err
	}
	var dumps, dumps6 []*xtDump
	for _, b := range []string{"nft", "legacy"} {
		for _, v6 := range []bool{false, true} {
			d, ok, err := readXT(ctx, env, b, v6)
			if err != nil {
				return Found{}, fmt.Errorf("%w: %w", err, ErrUnsupported)
			}
			switch {
			case ok && v6:
				dumps6 = append(dumps6, d)
			case ok:
				dumps = append(dumps, d)
			}
		}
	}
	if f, ok, err := detectUFW(ctx, env, dumps); err != nil || ok {
		return f, err
	}
	nf, err := detectNftables(ctx, env, v, dumps)
	if err != nil {
		return Found{}, err
	}
	xf := detectIptables(ctx, env, dumps, dumps6)
	switch {
	case nf != nil && xf != nil:
		return Found{}, fmt.Errorf("two firewalls found in %s: an nftables ruleset (%s) and iptables-%s rules (%d incoming, %d forwarded): %w",
			env.NSName(), strings.Join(nf.Tables, ", "), xf.Backend, xf.Incoming, xf.Forwarded, ErrUnsupported)
	case nf != nil:
		return *nf, nil
	case xf != nil:
		return *xf, nil
	}
	return Found{Kind: KindNone}, nil
}

// refuseFirewalld is an error when firewalld is active or running in env.
func refuseFirewalld(ctx context.Context, env Env, v *nftView) error {
	for _, t := range v.all {
		if t.Name == "firewalld" {
			return fmt.Errorf("firewalld is active (nftables table %s) in %s: %w", TableName(t), env.NSName(), ErrUnsupported)
		}
	}
	if _, ok, _ := env.ReadFile(ctx, "/run/firewalld/firewalld.pid"); ok {
		return fmt.Errorf("firewalld is running (/run/firewalld/firewalld.pid) in %s: %w", env.NSName(), ErrUnsupported)
	}
	return nil
}

// detectUFW finds ufw: its chains loaded in a backend, or enabled in its config. ok is false
// when there is none.
func detectUFW(ctx context.Context, env Env, dumps []*xtDump) (f Found, ok bool, err error) {
	conf, _, err := env.ReadFile(ctx, ufwConf)
	if err != nil {
		return Found{}, false, err
	}
	ufwEnabled := bytes.Contains(conf, []byte("\nENABLED=yes")) || bytes.HasPrefix(conf, []byte("ENABLED=yes"))
	for _, d := range dumps {
		if d.has("ufw-user-input") || (ufwEnabled && d.Backend == "nft" && len(dumps) == 1) {
			f := Found{Kind: KindUFW, Backend: d.Backend, Active: ufwEnabled && d.has("ufw-user-input"), Config: ufwDir, DockerUser: d.has("DOCKER-USER")}
			if err := countUFW(ctx, env, &f); err != nil {
				return Found{}, false, err
			}
			return f, true, nil
		}
	}
	if ufwEnabled {
		return Found{Kind: KindUFW, Backend: "nft", Config: ufwDir}, true, nil
	}
	return Found{}, false, nil
}

// detectNftables finds a plain nftables ruleset: found tables with filter chains at input or
// forward. nil when there is none.
func detectNftables(ctx context.Context, env Env, v *nftView, dumps []*xtDump) (*Found, error) {
	if len(v.input)+len(v.forward) == 0 {
		return nil, nil
	}
	f := Found{Kind: KindNftables, Active: true}
	for _, t := range v.tables {
		f.Tables = append(f.Tables, TableName(t))
	}
	sort.Strings(f.Tables)
	var err error
	if f.Incoming, err = countNft(env, v.input); err != nil {
		return nil, err
	}
	if f.Forwarded, err = countNft(env, v.forward); err != nil {
		return nil, err
	}
	if _, ok, _ := env.ReadFile(ctx, nftConf); ok {
		f.Config = nftConf
	}
	for _, d := range dumps {
		if d.has("DOCKER-USER") {
			f.DockerUser, f.Backend = true, d.Backend
		}
	}
	return &f, nil
}

// detectIptables finds plain iptables: rules of its own besides Docker's, or a closed INPUT
// policy, in iptables or ip6tables, in the first backend that has them. nil when there is none.
// IPv6 says whether that backend's ip6tables filters too (xtFilters): the driver then writes
// every opening's IPv6 twin there. A firewall in ip6tables alone is found too: Active says
// whether its rules are in force in either family, which is what the flip retires.
func detectIptables(ctx context.Context, env Env, dumps, dumps6 []*xtDump) *Found {
	for _, b := range []string{"nft", "legacy"} {
		var d4, d6 *xtDump
		for _, d := range dumps {
			if d.Backend == b {
				d4 = d
			}
		}
		for _, d := range dumps6 {
			if d.Backend == b {
				d6 = d
			}
		}
		f := Found{Kind: KindIptables, Backend: b}
		var filters4 bool
		if d4 != nil {
			f.DockerUser = d4.has("DOCKER-USER")
			f.Incoming, f.Forwarded, filters4 = xtFilters(d4)
		}
		if d6 != nil {
			f.Incoming6, f.Forwarded6, f.IPv6 = xtFilters(d6)
		}
		if filters4 || f.IPv6 {
			// Retire retires both families, saving both before it touches either and going on
			// from what it saved when it was interrupted between them: a firewall whose IPv4
			// rules are retired and whose ip6tables rules are not yet is still active.
			f.Active = true
			if _, ok, _ := env.ReadFile(ctx, iptRulesV4); ok {
				f.Config = iptRulesV4
			}
			return &f
		}
	}
	return nil
}

func countNft(env Env, chains []*nftables.Chain) (int, error) {
	n := 0
	for _, ch := range chains {
		rules, err := env.ListRules(ch)
		if err != nil {
			return 0, fmt.Errorf("nftables chain %s %s is unreadable: %w: %w", TableName(ch.Table), ch.Name, err, ErrUnsupported)
		}
		for _, r := range rules {
			if _, ok := ParseMark(r.Comment); !ok {
				n++
			}
		}
	}
	return n, nil
}

// ufwTuple is one rule of ufw's user.rules, from its "### tuple ###" line.
type ufwTuple struct {
	Text    string // the tuple without its comment
	Comment string // decoded
	Route   bool
}

// readUFWTuples reads the rules ufw keeps in user.rules and user6.rules. ufw rewrites those
// files in place (truncate, then write, under its own lock in /run), so a read can land on
// half a file: a file that does not end in COMMIT is read again, and still half after a few
// tries is an error, never a shorter rule list (meshd would take the found firewall's own
// rules for missing, and a `ufw allow … comment meshd:…` over one would re-label it as
// meshd's). A missing user.rules is an error for the same reason; user6.rules may be absent.
func readUFWTuples(ctx context.Context, env Env) ([]ufwTuple, error) {
	var out []ufwTuple
	for _, p := range []string{ufwUserRules, ufwUser6} {
		b, err := readWholeUFWFile(ctx, env, p)
		if err != nil {
			return nil, err
		}
		ts, err := parseUFWTuples(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		out = append(out, ts...)
	}
	return out, nil
}

// parseUFWTuples reads the "### tuple ###" lines of one of ufw's rules files.
func parseUFWTuples(b []byte) ([]ufwTuple, error) {
	var out []ufwTuple
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if l := sc.Text(); strings.HasPrefix(l, "### tuple ### ") {
			t, err := parseTupleLine(l)
			if err != nil {
				return nil, err
			}
			out = append(out, t)
		}
	}
	return out, sc.Err()
}

// parseTupleLine reads one "### tuple ###" line, its hex comment decoded.
func parseTupleLine(l string) (ufwTuple, error) {
	t := ufwTuple{Text: strings.TrimPrefix(l, "### tuple ### ")}
	if i := strings.Index(t.Text, " comment="); i >= 0 {
		c, err := hex.DecodeString(t.Text[i+len(" comment="):])
		if err != nil {
			return t, fmt.Errorf("comment of %q is not hex: %w: %w", l, err, ErrUnsupported)
		}
		t.Comment, t.Text = string(c), t.Text[:i]
	}
	t.Route = strings.HasPrefix(t.Text, "route:")
	return t, nil
}

// ufwFileTries is how many times a rules file caught mid-write is read before giving up.
const ufwFileTries = 10

// readWholeUFWFile reads one of ufw's rules files, again while it is caught mid-write.
func readWholeUFWFile(ctx context.Context, env Env, p string) ([]byte, error) {
	for try := 1; ; try++ {
		b, ok, err := env.ReadFile(ctx, p)
		switch {
		case err != nil:
			return nil, err
		case !ok && p == ufwUser6:
			return nil, nil
		case !ok:
			return nil, fmt.Errorf("ufw is in use but %s is missing", p)
		case ufwFileComplete(b):
			return b, nil
		case try == ufwFileTries:
			return nil, fmt.Errorf("%s: still incomplete (no closing COMMIT) after %d reads; is something rewriting it?", p, try)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Duration(try) * 20 * time.Millisecond):
		}
	}
}

// ufwFileComplete says whether a rules file is whole: its last line is COMMIT.
func ufwFileComplete(b []byte) bool {
	return bytes.HasSuffix(bytes.TrimRight(b, " \t\n"), []byte("\nCOMMIT"))
}

func countUFW(ctx context.Context, env Env, f *Found) error {
	ts, err := readUFWTuples(ctx, env)
	if err != nil {
		return err
	}
	for _, t := range ts {
		if strings.HasPrefix(t.Comment, MarkPrefix) {
			continue
		}
		if t.Route {
			f.Forwarded++
		} else {
			f.Incoming++
		}
	}
	return nil
}

// stampFiles are the files Detect's answer reads besides the kernel: each one's presence, size
// and modification time go into a Stamp.
var stampFiles = []string{"/run/firewalld/firewalld.pid", ufwConf, ufwUserRules, ufwUser6, nftConf, iptRulesV4}

// Stamp is a cheap read of everything Detect's answer depends on: the nftables ruleset's
// generation (the kernel counts every committed change, whoever made it: nft, iptables-nft, ufw
// and Docker over it, meshd itself) and the presence, size and modification time of the found
// firewalls' configuration files. Two equal stamps mean Detect would answer the same, so a
// caller detects again only when the stamp moved. It is "" when no stamp can stand for the
// firewall: iptables-legacy or ip6tables-legacy has a filter table (legacy rules have no
// generation; they are read again each time), the files are not seen from this process, or a
// read failed.
func Stamp(ctx context.Context, env Env) string {
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
