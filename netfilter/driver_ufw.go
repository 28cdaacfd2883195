package netfilter

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
)

// ufwDriver converges openings through a found ufw in ufw's own terms: `ufw allow` for the
// incoming path and `ufw route allow` for the forwarded path, each with a meshd comment (ufw
// keeps it hex-encoded in /etc/ufw/user.rules, not in the kernel). ufw has no batch: one ufw
// invocation per rule added or removed, none when nothing changes.
//
// A forwarded opening to a published container port is also put at the head of DOCKER-USER,
// matched on conntrack's original destination port: ufw's route rules see the port after
// Docker's DNAT, and Docker's own FORWARD rules run before ufw's.
type ufwDriver struct {
	base
	found Found
}

func (d *ufwDriver) Kind() Kind { return KindUFW }

// ufwTupleText is the tuple ufw writes in user.rules for the rule that implements o.
func ufwTupleText(o Opening, priv Private) (string, error) {
	src := ""
	iface := ""
	switch o.From {
	case FromAnywhere:
	case FromPrivate:
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
	if o.Path == PathForwarded {
		action = "route:allow"
	}
	dir := "in"
	if iface != "" {
		dir += "_" + iface
	}
	return fmt.Sprintf("%s %s %d %s any %s %s", action, o.Proto, o.Port, anyNet, src, dir), nil
}

// ufwArgs turns a tuple text back into the ufw command that adds (or, with del, deletes) it.
func ufwArgs(text string, del bool) ([]string, error) {
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
	args = append(args, "proto", proto, "from", anyNet(src))
	if sport != "any" {
		args = append(args, "port", sport)
	}
	args = append(args, "to", anyNet(dst))
	if dport != "any" {
		args = append(args, "port", dport)
	}
	return args, nil
}

func (d *ufwDriver) ufw(ctx context.Context, args ...string) error {
	_, err := d.env.run(ctx, "ufw", args...)
	return err
}

func (d *ufwDriver) Converge(ctx context.Context, desired []Opening) (Report, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	want, keys, err := dedupe(desired)
	if err != nil {
		return Report{}, err
	}
	tuples, err := readUFWTuples(ctx, d.env)
	if err != nil {
		return Report{}, err
	}
	userOwned := map[string]bool{} // tuple texts of the found firewall's own rules
	have := markedTuples(tuples)   // mark -> tuple text
	for _, t := range tuples {
		if !strings.HasPrefix(t.Comment, markPrefix) {
			userOwned[t.Text] = true
		}
	}

	failed := map[string]string{}
	heldBy := map[string]string{} // mark -> why it needs no rule of its own
	canon := map[string]string{}  // tuple text -> the mark that carries it
	wantText := map[string]string{}
	for _, k := range keys {
		text, err := ufwTupleText(want[k], d.priv)
		if err != nil {
			failed[k] = err.Error()
			continue
		}
		wantText[k] = text
		switch {
		case userOwned[text]:
			heldBy[k] = "allowed by the found firewall's own rule (" + text + ")"
		case canon[text] != "":
			heldBy[k] = "shares the ufw rule of " + canon[text]
		default:
			canon[text] = k
		}
	}

	// Deletes first: re-adding a tuple ufw already holds would only rewrite its comment.
	var dels, adds []string
	missingBefore := map[string]bool{}
	for mark, text := range have {
		if canon[text] != mark {
			dels = append(dels, text)
		}
	}
	for text, mark := range canon {
		if have[mark] != text {
			adds = append(adds, mark)
			missingBefore[mark] = true
		}
	}
	added, removed := 0, 0
	for _, text := range dels {
		args, err := ufwArgs(text, true)
		if err == nil {
			err = d.ufw(ctx, args...)
		}
		if err != nil {
			d.env.log().Warn("ufw delete failed", "tuple", text, "err", err)
			continue
		}
		removed++
	}
	for _, mark := range adds {
		args, err := ufwArgs(wantText[mark], false)
		if err == nil {
			err = d.ufw(ctx, append(args, "comment", mark)...)
		}
		if err != nil {
			failed[mark] = err.Error()
			continue
		}
		added++
	}
	if len(dels)+len(adds) > 0 {
		// Re-read what ufw holds now.
		tuples, err = readUFWTuples(ctx, d.env)
		if err != nil {
			return Report{}, err
		}
		have = markedTuples(tuples)
	}

	// DOCKER-USER, in ufw's iptables backend.
	backend := d.found.Backend
	if backend == "" {
		backend = "nft"
	}
	res, err := xtConverge(ctx, d.env, backend, d.priv, want, keys, func(o Opening, x *xtDump) string {
		if o.Path == PathForwarded && x.has("DOCKER-USER") {
			return "DOCKER-USER"
		}
		return ""
	})
	if err != nil {
		return Report{}, err
	}
	added += res.added
	removed += res.removed

	// Is ufw loaded at all? Its rules in user.rules do nothing while its chains are absent.
	notLoaded := ""
	if x, _, err := readXT(ctx, d.env, backend); err == nil && (x == nil || !x.has("ufw-user-input")) {
		conf, _, _ := d.env.readFile(ctx, ufwConf)
		if strings.Contains(string(conf), "ENABLED=yes") {
			notLoaded = "ufw is enabled but its chains are not loaded in iptables-" + backend
		}
	}

	present := map[string]bool{}
	for _, k := range keys {
		mb := missingBefore[k] || res.missingBefore[k]
		missingBefore[k] = mb
		ok := failed[k] == "" && res.failed[k] == "" && res.present[k]
		if heldBy[k] == "" && failed[k] == "" {
			ok = ok && have[k] == wantText[k]
		}
		if notLoaded != "" {
			ok = false
			failed[k] = notLoaded
		}
		if res.failed[k] != "" {
			failed[k] = res.failed[k]
		}
		present[k] = ok
	}
	r := d.settle(KindUFW, keys, want, present, missingBefore, failed, added, removed)
	for i := range r.Openings {
		if why := heldBy[r.Openings[i].Opening.Mark()]; why != "" && r.Openings[i].State != Failed {
			r.Openings[i].Reason = why
		}
	}
	return r, nil
}

// markedTuples maps each meshd mark to its tuple; a rule from anywhere is in both user.rules
// and user6.rules, and the IPv4 one names it.
func markedTuples(tuples []ufwTuple) map[string]string {
	have := map[string]string{}
	for _, t := range tuples {
		if !strings.HasPrefix(t.Comment, markPrefix) {
			continue
		}
		if _, dup := have[t.Comment]; !dup || !strings.Contains(t.Text, "::/0") {
			have[t.Comment] = t.Text
		}
	}
	return have
}
