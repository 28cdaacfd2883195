package reach

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"meshd/netfilter"
)

// xtTables are the tables iptables-nft keeps in nftables: read through iptables-save instead.
var xtTables = map[string]bool{"filter": true, "nat": true, "mangle": true, "raw": true, "security": true}

// foundTable says whether an nftables table is the found firewall's: not meshd's, Docker's or
// iptables-nft's, and of a family a routed packet meets (ip, ip6, inet).
func foundTable(family, name string) bool {
	switch {
	case strings.HasPrefix(name, "meshd"), strings.HasPrefix(name, "docker"):
		return false
	case family == "inet":
		return true
	case family == "ip" || family == "ip6":
		return !xtTables[name]
	}
	return false
}

type nftObj struct {
	Family  string            `json:"family"`
	Table   string            `json:"table"`
	Name    string            `json:"name"`
	Chain   string            `json:"chain"`
	Handle  int               `json:"handle"`
	Type    string            `json:"type"`
	Hook    string            `json:"hook"`
	Prio    json.RawMessage   `json:"prio"`
	Policy  string            `json:"policy"`
	Comment string            `json:"comment"`
	Expr    []json.RawMessage `json:"expr"`
}

// fromNftJSON reads `nft -j list ruleset` into the found tables; texts are the rules as
// `nft -a list ruleset` prints them, by "family table chain handle", to name a rule.
func fromNftJSON(b []byte, texts map[string]string) ([]*table, error) {
	var doc struct {
		Nftables []map[string]nftObj `json:"nftables"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("nft -j list ruleset: %w", err)
	}
	tables := map[string]*table{}
	var order []string
	get := func(family, name string) *table {
		k := family + " " + name
		if t := tables[k]; t != nil {
			return t
		}
		t := &table{name: "nft " + k, v4: family != "ip6", v6: family != "ip", chains: map[string]*chain{}}
		tables[k] = t
		order = append(order, k)
		return t
	}
	for _, item := range doc.Nftables {
		if c, ok := item["chain"]; ok && foundTable(c.Family, c.Table) {
			t := get(c.Family, c.Table)
			ch := &chain{name: c.Name}
			if c.Hook != "" && c.Type == "filter" {
				ch.policy = vAccept
				if c.Policy == "drop" {
					ch.policy = vDrop
				}
				switch c.Hook {
				case "input":
					t.input = append(t.input, ch)
				case "forward":
					t.fwd = append(t.fwd, ch)
				}
			}
			t.chains[c.Name] = ch
		}
		if r, ok := item["rule"]; ok && foundTable(r.Family, r.Table) {
			if _, mine := netfilter.ParseMark(r.Comment); mine {
				continue
			}
			t := get(r.Family, r.Table)
			ch := t.chains[r.Chain]
			if ch == nil {
				return nil, fmt.Errorf("nft -j list ruleset: rule %d of %s before its chain %s", r.Handle, t.name, r.Chain)
			}
			text := texts[fmt.Sprintf("%s %s %s %d", r.Family, r.Table, r.Chain, r.Handle)]
			if text == "" {
				text = fmt.Sprintf("handle %d", r.Handle)
			}
			ch.rules = append(ch.rules, nftRule(fmt.Sprintf("%s chain %s: %s", t.name, r.Chain, text), r.Expr))
		}
	}
	var out []*table
	for _, k := range order {
		out = append(out, tables[k])
	}
	return out, nil
}

// nftTexts reads `nft -a list ruleset`: each rule's text by "family table chain handle".
func nftTexts(b []byte) map[string]string {
	out := map[string]string{}
	var fam, tab, ch string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		f := strings.Fields(l)
		switch {
		case len(f) >= 3 && f[0] == "table":
			fam, tab = f[1], f[2]
		case len(f) >= 2 && f[0] == "chain":
			ch = f[1]
		default:
			body, h, ok := strings.Cut(l, " # handle ")
			if ok && ch != "" {
				out[fmt.Sprintf("%s %s %s %s", fam, tab, ch, strings.TrimSpace(h))] = body
			}
		}
	}
	return out
}

// nftRule reads one rule's statements.
func nftRule(where string, exprs []json.RawMessage) rule {
	r := rule{where: where}
	for _, raw := range exprs {
		var st map[string]json.RawMessage
		if err := json.Unmarshal(raw, &st); err != nil || len(st) != 1 {
			r.unknown = "a statement that is not understood: " + string(raw)
			return r
		}
		for k, v := range st {
			switch k {
			case "match":
				r.matches = append(r.matches, nftMatch(v))
			case "accept":
				r.verdict = vAccept
			case "drop", "reject":
				r.verdict = vDrop
			case "return":
				r.verdict = vReturn
			case "jump", "goto":
				var t struct {
					Target string `json:"target"`
				}
				_ = json.Unmarshal(v, &t)
				r.verdict, r.target = vJump, t.Target
				if k == "goto" {
					r.verdict = vGoto
				}
			case "vmap":
				ctStateVmap(&r, v)
			case "counter", "log", "mangle", "notrack":
			case "limit", "quota":
				r.matches = append(r.matches, match{test: func(*packet) res { return maybe }})
			default:
				r.unknown = "statement " + k + " is not understood"
			}
		}
	}
	return r
}

// ctStateVmap reads "ct state vmap { established : accept, new : jump x, ... }": a new
// connection takes the verdict "new" maps to, and meets no other; a map on anything else is not
// understood.
func ctStateVmap(r *rule, raw json.RawMessage) {
	var vm struct {
		Key  struct{ Ct *struct{ Key string } } `json:"key"`
		Data struct {
			Set [][2]json.RawMessage `json:"set"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &vm); err != nil || vm.Key.Ct == nil || vm.Key.Ct.Key != "state" {
		r.unknown = "verdict map " + string(raw) + " is not understood"
		return
	}
	for _, e := range vm.Data.Set {
		var k string
		if json.Unmarshal(e[0], &k) != nil || k != "new" {
			continue
		}
		v := nftRule(r.where, []json.RawMessage{e[1]})
		r.verdict, r.target, r.unknown = v.verdict, v.target, v.unknown
		return
	}
	r.matches = append(r.matches, match{test: func(*packet) res { return no }})
}

// nftMatch reads one match: what it compares, the operator and the value.
func nftMatch(raw json.RawMessage) match {
	var m struct {
		Op    string          `json:"op"`
		Left  json.RawMessage `json:"left"`
		Right json.RawMessage `json:"right"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return match{unknown: "match " + string(raw)}
	}
	var left struct {
		Payload *struct{ Protocol, Field string } `json:"payload"`
		Meta    *struct{ Key string }             `json:"meta"`
		Ct      *struct{ Key, Dir string }        `json:"ct"`
	}
	_ = json.Unmarshal(m.Left, &left)
	neg := m.Op == "!="
	bad := match{unknown: "match " + string(raw) + " is not understood"}
	if m.Op != "==" && m.Op != "!=" && m.Op != "in" {
		return bad
	}
	vals, ok := values(m.Right)
	if !ok {
		return bad
	}
	switch {
	case left.Payload != nil:
		pl := *left.Payload
		switch {
		case (pl.Protocol == "ip" || pl.Protocol == "ip6") && (pl.Field == "saddr" || pl.Field == "daddr"):
			ps, err := addrs(vals)
			if err != nil {
				return bad
			}
			v6 := pl.Protocol == "ip6"
			fam := match{test: func(p *packet) res { return of(p.v6 == v6) }}
			if pl.Field == "saddr" {
				return both(fam, match{isSrc: true, src: ps, neg: neg})
			}
			return both(fam, dstIn(ps, neg))
		case pl.Field == "dport" || pl.Field == "sport":
			rs, err := ports(vals)
			if err != nil {
				return bad
			}
			proto := pl.Protocol
			sport := pl.Field == "sport"
			return match{test: func(p *packet) res {
				if proto != "th" && proto != p.proto {
					return no
				}
				if sport {
					return maybe
				}
				return of(portIn(rs, p.dport) != neg)
			}}
		}
	case left.Meta != nil:
		switch left.Meta.Key {
		case "l4proto":
			return protoIs(strs(vals), neg)
		case "nfproto":
			names := strs(vals)
			return match{test: func(p *packet) res {
				in := false
				for _, n := range names {
					in = in || (n == "ipv6") == p.v6
				}
				return of(in != neg)
			}}
		case "iifname", "iif":
			return anyOf(strs(vals), neg, func(n string, ng bool) match { return iifOutside(n, ng) })
		case "oifname", "oif":
			return anyOf(strs(vals), neg, func(n string, ng bool) match { return oifIs(n, ng) })
		case "pkttype":
			names := strs(vals)
			return match{test: func(*packet) res {
				return of(slicesHas(names, "host") != neg)
			}}
		}
	case left.Ct != nil:
		switch {
		case left.Ct.Key == "state":
			return ctState(strs(vals), neg)
		case left.Ct.Key == "status":
			names := strs(vals)
			return match{test: func(p *packet) res { return of((slicesHas(names, "dnat") && !p.input) != neg) }}
		case left.Ct.Key == "proto-dst" && left.Ct.Dir == "original":
			rs, err := ports(vals)
			if err != nil {
				return bad
			}
			return match{test: func(p *packet) res { return of(portIn(rs, p.origDport) != neg) }}
		}
	}
	return bad
}

// both is a match met when a and b are (a a test, b perhaps on the source): a family check
// before an address.
func both(a, b match) match {
	if b.isSrc {
		// The source part stays a source match; the family check guards it.
		return match{isSrc: true, src: b.src, neg: b.neg, test: a.test}
	}
	return match{unknown: b.unknown, test: func(p *packet) res {
		if a.test(p) == no {
			return no
		}
		return b.test(p)
	}}
}

// anyOf is a match on one of several names (an interface set): each name's match, or'd.
func anyOf(names []string, neg bool, one func(string, bool) match) match {
	ms := make([]match, len(names))
	for i, n := range names {
		ms[i] = one(n, false)
	}
	return match{unknown: "matches interfaces " + strings.Join(names, ", "), test: func(p *packet) res {
		out := no
		for _, m := range ms {
			r := unk
			if m.test != nil {
				r = m.test(p)
			}
			if r == yes || (r == unk && out != yes) {
				out = r
			}
		}
		switch {
		case out == unk:
			return unk
		case neg:
			return of(out == no)
		}
		return out
	}}
}

func slicesHas(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// values flattens a match's right side: one value, a list, or an anonymous set. A named set
// ("@name") is not read.
func values(raw json.RawMessage) ([]any, bool) {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, false
	}
	switch x := v.(type) {
	case []any:
		return x, true
	case map[string]any:
		if s, ok := x["set"].([]any); ok {
			return s, true
		}
		return []any{x}, true
	case string:
		return []any{x}, !strings.HasPrefix(x, "@")
	}
	return []any{v}, true
}

func strs(vals []any) []string {
	var out []string
	for _, v := range vals {
		switch x := v.(type) {
		case string:
			out = append(out, x)
		case float64:
			out = append(out, strconv.Itoa(int(x)))
		}
	}
	return out
}

func addrs(vals []any) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, v := range vals {
		switch x := v.(type) {
		case string:
			ps, err := prefixes(x)
			if err != nil {
				return nil, err
			}
			out = append(out, ps...)
		case map[string]any:
			p, ok := x["prefix"].(map[string]any)
			if !ok {
				return nil, fmt.Errorf("not a prefix: %v", x)
			}
			a, err := netip.ParseAddr(fmt.Sprint(p["addr"]))
			n, isNum := p["len"].(float64)
			if err != nil || !isNum {
				return nil, fmt.Errorf("not a prefix: %v", x)
			}
			out = append(out, netip.PrefixFrom(a, int(n)).Masked())
		default:
			return nil, fmt.Errorf("not an address: %v", v)
		}
	}
	return out, nil
}

func ports(vals []any) ([][2]uint16, error) {
	var out [][2]uint16
	num := func(v any) (uint16, bool) {
		f, ok := v.(float64)
		return uint16(f), ok && f >= 0 && f <= 65535
	}
	for _, v := range vals {
		if n, ok := num(v); ok {
			out = append(out, [2]uint16{n, n})
			continue
		}
		m, _ := v.(map[string]any)
		r, _ := m["range"].([]any)
		if len(r) != 2 {
			return nil, fmt.Errorf("not a port: %v", v)
		}
		lo, ok1 := num(r[0])
		hi, ok2 := num(r[1])
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("not a port range: %v", v)
		}
		out = append(out, [2]uint16{lo, hi})
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out, nil
}
