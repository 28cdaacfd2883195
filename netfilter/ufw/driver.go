package ufw

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"strings"

	"meshd/netfilter"
	"meshd/netfilter/xt"
)

// driver converges openings through a found ufw in ufw's own terms: `ufw allow` for the
// incoming path, with a meshd comment (ufw keeps it hex-encoded in /etc/ufw/user.rules, not in
// the kernel). ufw has no batch: one ufw invocation per rule added or removed, none when nothing
// changes.
//
// A forwarded opening is no `ufw route allow`: ufw's route rules match the destination port as
// the packet has it in FORWARD, after Docker's DNAT rewrote it to the container's own port, so
// `ufw route allow … port 8080` opens every container listening on 8080 inside, whatever port it
// is published on (reached from DOCKER-USER, as ufw-docker's after.rules sends it there). It
// goes into ufw's iptables backend instead, matched on conntrack's original destination port,
// the published port the client addressed: at the head of DOCKER-USER where Docker made that
// chain (Docker's own FORWARD rules run before ufw's), else at the head of FORWARD, ahead of
// ufw's "deny routed" policy. Where Docker made DOCKER-USER in ip6tables too, the rule has its
// IPv6 twin there.
//
// A forwarded opening is also an IPv6 `ufw allow` (in user6.rules alone: `ufw allow proto tcp
// from ::/0 to any port P`, listed by `ufw status` as `P/tcp (v6)` with its meshd comment) where
// ufw keeps IPv6 rules: Docker publishes every port on [::] too, and IPv6 to a container on an
// IPv4-only bridge (Docker's default) is no DNAT but Docker's proxy, a process of the machine
// listening on the published port, so the input path, where the port is the one addressed. It
// is the plain-iptables driver's INPUT twin in ip6tables, and the derived filter's proxy rule, in
// ufw's words; it carries the opening's mark and goes with it.
//
// The routed opening (a node reaching a spoke on its found tunnel through the hub) is no ufw
// tuple either: it goes at the head of FORWARD in ufw's iptables backend, in on the private
// network's interface and out on it again, between the range's addresses, ahead of ufw's "deny
// routed" policy. Like every opening it is read back on every pass and by the watch, which puts
// it back if a reload drops it.
type driver struct {
	netfilter.Base
	found netfilter.Found
}

// New returns the driver for a found ufw (found says its iptables backend).
func New(env netfilter.Env, priv netfilter.Private, found netfilter.Found) netfilter.Driver {
	return &driver{Base: netfilter.NewBase(env, priv), found: found}
}

func (d *driver) Kind() netfilter.Kind { return netfilter.KindUFW }

// tupleText is the tuple ufw writes in user.rules for the `ufw allow` of o at the input path
// (for a forwarded opening, its proxy tuple's IPv4 twin: see proxyTupleText).
func tupleText(o netfilter.Opening, priv netfilter.Private) (string, error) {
	src := ""
	iface := ""
	switch o.From {
	case netfilter.FromAnywhere:
	case netfilter.FromPrivate:
		if priv.Interface == "" && !priv.Range.IsValid() {
			return "", fmt.Errorf("opening %s: from private, but no private network is known", o)
		}
		iface = priv.Interface
		if priv.Range.IsValid() {
			src = priv.Range.Masked().String()
		}
	default:
		p, err := netip.ParsePrefix(o.From)
		if err != nil {
			return "", err
		}
		src = p.Masked().String()
	}
	anyNet := "0.0.0.0/0"
	if strings.Contains(src, ":") {
		anyNet = "::/0"
	}
	if src == "" {
		src = anyNet
	}
	action := "allow"
	dir := "in"
	if iface != "" {
		dir += "_" + iface
	}
	return fmt.Sprintf("%s %s %d %s any %s %s", action, o.Proto, o.Port, anyNet, src, dir), nil
}

// commandArgs turns a tuple text back into the ufw command that adds (or, with del, deletes) it.
func commandArgs(text string, del bool) ([]string, error) {
	f := strings.Fields(text)
	if len(f) != 7 {
		return nil, fmt.Errorf("ufw tuple %q: unexpected shape", text)
	}
	action, proto, dport, dst, sport, src, dir := f[0], f[1], f[2], f[3], f[4], f[5], f[6]
	var args []string
	if strings.HasPrefix(action, "route:") {
		args = append(args, "route")
		action = strings.TrimPrefix(action, "route:")
	}
	if del {
		args = append(args, "delete")
	}
	args = append(args, action)
	if d, iface, ok := strings.Cut(dir, "_"); ok {
		args = append(args, d, "on", iface)
	}
	anyNet := func(s string) string {
		if s == "0.0.0.0/0" || s == "::/0" {
			return "any"
		}
		return s
	}
	from := anyNet(src)
	if src == "::/0" {
		// IPv6 alone (the tuple lives in user6.rules only): ufw reads "from any" as both families.
		from = src
	}
	args = append(args, "proto", proto, "from", from)
	if sport != "any" {
		args = append(args, "port", sport)
	}
	args = append(args, "to", anyNet(dst))
	if dport != "any" {
		args = append(args, "port", dport)
	}
	return args, nil
}

func (d *driver) command(ctx context.Context, args ...string) error {
	_, err := d.Env.Run(ctx, "ufw", args...)
	return err
}

// marked is a ufw rule meshd marked, found or wanted: its mark and the tuple ufw keeps it
// as. Its slot is both: a tuple carrying another opening's mark is not the rule wanted.
type marked struct{ mark, text string }

func (t marked) Slot() string { return t.mark + "\t" + t.text }

// markedTuples is the rules meshd marked in ufw, one per ufw rule: a rule from anywhere is in
// both user.rules and user6.rules, and the IPv4 tuple names it, its IPv6 twin folded into it.
func markedTuples(tuples []tuple) []marked {
	all := map[marked]bool{}
	for _, t := range tuples {
		if strings.HasPrefix(t.Comment, netfilter.MarkPrefix) {
			all[marked{t.Comment, t.Text}] = true
		}
	}
	var have []marked
	seen := map[marked]bool{}
	for _, t := range tuples {
		m := marked{t.Comment, t.Text}
		if !all[m] || seen[m] {
			continue
		}
		if twin := (marked{t.Comment, strings.ReplaceAll(t.Text, "::/0", "0.0.0.0/0")}); twin != m && all[twin] {
			continue
		}
		seen[m] = true
		have = append(have, m)
	}
	return have
}

// proxyTupleText is the IPv6 `ufw allow` a forwarded opening also needs for Docker's proxy (see
// driver): the incoming rule from the same sources, in user6.rules alone; "" when its source
// is of IPv4 alone (a CIDR, the private network's range), which no IPv6 packet matches.
func proxyTupleText(o netfilter.Opening, priv netfilter.Private) (string, error) {
	in := o
	in.Path = netfilter.PathIncoming
	text, err := tupleText(in, priv)
	if err != nil || sourceIsV6(text) {
		return text, err
	}
	return v6Twin(text), nil // "" for an IPv4 source
}

// v4Twin is the IPv4 tuple an IPv6 one from anywhere is the twin of (a rule from anywhere in
// both families); "" when it has none.
func v4Twin(text string) string {
	f := strings.Fields(text)
	if len(f) != 7 || f[5] != "::/0" {
		return ""
	}
	return strings.ReplaceAll(text, "::/0", "0.0.0.0/0")
}

// wantedRules decides the ufw rules the openings need. An incoming opening the found firewall's
// own rule already allows, or whose tuple another opening already needs, needs no rule of its
// own: heldBy says why. An opening whose tuple cannot be written is failed. A forwarded or routed
// opening has no ufw tuple of its own (see driver); where ufw keeps IPv6 rules (ipv6), a
// forwarded opening needs its IPv6 proxy tuple (proxyTupleText), unless a rule from anywhere in
// both families already allows that port at the input path. A route rule meshd marked, left by a
// meshd that opened forwarded ports that way, is wanted by nothing and so removed.
func wantedRules(tuples []tuple, want map[string]netfilter.Opening, keys []string, priv netfilter.Private, ipv6 bool) (rules []marked, heldBy, failed map[string]string) {
	userOwned := map[string]bool{} // tuple texts of the found firewall's own rules
	for _, t := range tuples {
		if !strings.HasPrefix(t.Comment, netfilter.MarkPrefix) {
			userOwned[t.Text] = true
		}
	}
	heldBy, failed = map[string]string{}, map[string]string{}
	canon := map[string]string{} // tuple text -> the mark that carries it
	for _, k := range keys {
		if want[k].Path != netfilter.PathIncoming {
			continue // in ufw's iptables backend, through xt.Converge: see Converge
		}
		text, err := tupleText(want[k], priv)
		if err != nil {
			failed[k] = err.Error()
			continue
		}
		switch {
		case userOwned[text]:
			heldBy[k] = "allowed by the found firewall's own rule (" + text + ")"
		case canon[text] != "":
			heldBy[k] = "shares the ufw rule of " + canon[text]
		default:
			canon[text] = k
			rules = append(rules, marked{mark: k, text: text})
		}
	}
	if !ipv6 {
		return rules, heldBy, failed
	}
	for _, k := range keys {
		if want[k].Path != netfilter.PathForwarded {
			continue
		}
		text, err := proxyTupleText(want[k], priv)
		if err != nil {
			failed[k] = err.Error()
			continue
		}
		if text == "" {
			continue
		}
		v4 := v4Twin(text)
		switch {
		case userOwned[text] || userOwned[v4]:
			// the found firewall's own rule lets IPv6 in at the input path already
		case canon[text] != "" || canon[v4] != "":
			// another opening's rule does
		default:
			canon[text] = k
			rules = append(rules, marked{mark: k, text: text})
		}
	}
	return rules, heldBy, failed
}

// keepsIPv6 says whether ufw keeps IPv6 rules (IPV6=yes in /etc/default/ufw, ufw's default).
func keepsIPv6(def []byte) bool {
	return bytes.Contains(def, []byte("\nIPV6=yes")) || bytes.HasPrefix(def, []byte("IPV6=yes"))
}

// apply runs a plan, one ufw command per rule (ufw has no batch), deletes first: re-adding a
// tuple ufw already holds would only rewrite its comment. A delete that fails is logged and
// left for the next pass; an add that fails fails its opening.
func (d *driver) apply(ctx context.Context, add, remove []marked, out *netfilter.Outcome) {
	for _, t := range remove {
		args, err := commandArgs(t.text, true)
		if err == nil {
			err = d.command(ctx, args...)
		}
		if err != nil {
			d.Env.Logger().Warn("ufw delete failed", "tuple", t.text, "err", err)
			continue
		}
		out.Removed++
	}
	for _, t := range add {
		args, err := commandArgs(t.text, false)
		if err == nil {
			err = d.command(ctx, append(args, "comment", t.mark)...)
		}
		if err != nil {
			out.Failed[t.mark] = err.Error()
			continue
		}
		out.Added++
	}
}

// Converge makes meshd's ufw rules equal to what desired needs (in one batch where this
// process sees ufw's files, else one ufw command per rule), then its rules in ufw's iptables
// backend (DOCKER-USER, FORWARD: xtChains) through xt.Converge.
func (d *driver) Converge(ctx context.Context, desired []netfilter.Opening) (netfilter.Report, error) {
	d.Mu.Lock()
	defer d.Mu.Unlock()
	want, keys, err := netfilter.Dedupe(desired)
	if err != nil {
		return netfilter.Report{}, err
	}
	convergeUFW := d.convergeCommands
	if d.Env.SeesFiles() {
		convergeUFW = d.convergeFiles
	}
	rules, heldBy, have, out, err := convergeUFW(ctx, want, keys)
	if err != nil {
		return netfilter.Report{}, err
	}

	// DOCKER-USER and FORWARD, in ufw's iptables backend.
	backend := d.found.Backend
	if backend == "" {
		backend = "nft"
	}
	xtOut, err := xt.Converge(ctx, d.Env, backend, false, d.Priv, want, keys, xtChains)
	if err != nil {
		return netfilter.Report{}, err
	}
	xtOut6, err := xt.Converge(ctx, d.Env, backend, true, d.Priv, want, keys, xtChains)
	if err != nil {
		return netfilter.Report{}, err
	}
	xtOut.Merge(xtOut6)
	mergeXT(keys, &out, xtOut, netfilter.HeldSlots(have), rules, d.notLoaded(ctx, backend))
	r := d.Settle(netfilter.KindUFW, keys, want, out)
	for i := range r.Openings {
		if why := heldBy[r.Openings[i].Opening.Mark()]; why != "" && r.Openings[i].State != netfilter.Failed {
			r.Openings[i].Reason = why
		}
	}
	return r, nil
}

// xtChains is where an opening's rule goes in ufw's iptables backend, beside ufw's own: a
// forwarded one at the head of DOCKER-USER where Docker made that chain (in ip6tables only when
// Docker filters IPv6 there, its ip6tables option), else at the head of FORWARD (IPv4 alone:
// without Docker's ip6tables no published port is DNATed over IPv6, its proxy takes it on the
// input path); the routed one at the head of FORWARD (IPv4 alone: the private network's range
// is). A DOCKER-USER twin in ip6tables accepts only what the IPv4 one accepts, for the same
// opening, and goes with it.
func xtChains(o netfilter.Opening, x *xt.Dump) []string {
	switch {
	case o.Path == netfilter.PathForwarded && x.Has("DOCKER-USER"):
		return []string{"DOCKER-USER"}
	case o.Path == netfilter.PathForwarded && !x.V6:
		return []string{"FORWARD"}
	case o.Path == netfilter.PathRouted:
		return []string{"FORWARD"}
	}
	return nil
}

// convergeCommands is the per-rule way, for a ufw whose files this process does not see: read,
// plan, one ufw command per rule, re-read.
func (d *driver) convergeCommands(ctx context.Context, want map[string]netfilter.Opening, keys []string) (rules []marked, heldBy map[string]string, have []marked, out netfilter.Outcome, err error) {
	tuples, err := readTuples(ctx, d.Env)
	if err != nil {
		return nil, nil, nil, out, err
	}
	def, _, err := d.Env.ReadFile(ctx, defaultsFile)
	if err != nil {
		return nil, nil, nil, out, err
	}
	rules, heldBy, failed := wantedRules(tuples, want, keys, d.Priv, keepsIPv6(def))
	have = markedTuples(tuples)
	add, remove := netfilter.Plan(have, rules)
	out = netfilter.NewOutcome()
	out.Failed = failed
	for _, t := range add {
		out.MissingBefore[t.mark] = true
	}
	if len(add)+len(remove) > 0 {
		d.apply(ctx, add, remove, &out)
		if tuples, err = readTuples(ctx, d.Env); err != nil {
			return nil, nil, nil, out, err
		}
		have = markedTuples(tuples)
	}
	return rules, heldBy, have, out, nil
}

// notLoaded says why ufw's rules do nothing, if it is enabled but its chains are absent from
// its iptables backend; "" otherwise.
func (d *driver) notLoaded(ctx context.Context, backend string) string {
	if x, _, err := xt.Read(ctx, d.Env, backend, false); err == nil && (x == nil || !x.Has("ufw-user-input")) {
		conf, _, _ := d.Env.ReadFile(ctx, Conf)
		if strings.Contains(string(conf), "ENABLED=yes") {
			return "ufw is enabled but its chains are not loaded in iptables-" + backend
		}
	}
	return ""
}

// mergeXT folds the DOCKER-USER pass (xtOut) into the ufw pass (out): an opening is in force
// when neither failed, its ufw rule (if it needs one) is held, and ufw is loaded.
func mergeXT(keys []string, out *netfilter.Outcome, xtOut netfilter.Outcome, held map[string]int, rules []marked, notLoaded string) {
	out.Added += xtOut.Added
	out.Removed += xtOut.Removed
	for _, k := range keys {
		out.MissingBefore[k] = out.MissingBefore[k] || xtOut.MissingBefore[k]
		out.Present[k] = out.Failed[k] == "" && xtOut.Failed[k] == "" && xtOut.Present[k]
	}
	for _, t := range rules {
		if held[t.Slot()] == 0 {
			out.Present[t.mark] = false
		}
	}
	for _, k := range keys {
		if notLoaded != "" {
			out.Present[k] = false
			out.Failed[k] = notLoaded
		}
		if xtOut.Failed[k] != "" {
			out.Failed[k] = xtOut.Failed[k]
		}
	}
}
