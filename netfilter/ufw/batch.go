package ufw

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"meshd/netfilter"
	"meshd/netfilter/xt"
)

// ufw in one batch. ufw has no batch command, and one `ufw allow` per rule costs about half a
// second (a Python start and an iptables call each): 100 openings took as long as 100 calls by
// hand. So where meshd can reach ufw's files it speaks ufw's format itself, under ufw's own
// lock: every rule added or removed is one edit of user.rules and user6.rules, written exactly
// as `ufw allow … comment …` would write them (ufw itself, `ufw status` and a `ufw reload` keep
// reading them as their own), and one iptables-restore --noflush of each file puts the same
// rules in the kernel, as ufw's own reload of its user rules does. The per-rule ufw commands
// stay for a firewall seen only through a runner in another mount namespace.

// lockPath is the lock every ufw command holds (fcntl, whole file) while it reads and
// rewrites its files.
const lockPath = "/run/ufw.lock"

// defaultsFile is where ufw says whether it keeps IPv6 rules (IPV6=yes).
const defaultsFile = "/etc/default/ufw"

// lock takes ufw's lock the way ufw takes it, waiting for a running ufw command to finish
// (or ctx to end). The returned function releases it.
func lock(ctx context.Context, env netfilter.Env) (func(), error) {
	p := env.Path(lockPath)
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("ufw's lock: %w", err)
	}
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0}
	for {
		err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &lk)
		if err == nil {
			return func() {
				lk.Type = syscall.F_UNLCK
				_ = syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &lk)
				f.Close()
			}, nil
		}
		if err != syscall.EAGAIN && err != syscall.EACCES {
			f.Close()
			return nil, fmt.Errorf("ufw's lock %s: %w", p, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("ufw's lock %s is held by another ufw command: %w", p, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// rulesFiles is ufw's two rules files as read under its lock; v6 is nil when user6.rules is absent.
type rulesFiles struct {
	v4, v6       []byte
	ipv6         bool // ufw keeps IPv6 rules (IPV6=yes in /etc/default/ufw)
	mode4, mode6 os.FileInfo
	path4, path6 string
	tuples       []tuple
}

func readFiles(env netfilter.Env) (*rulesFiles, error) {
	f := &rulesFiles{path4: env.Path(UserRules), path6: env.Path(User6)}
	var err error
	if f.v4, err = os.ReadFile(f.path4); err != nil {
		return nil, fmt.Errorf("ufw is in use but its rules cannot be read: %w", err)
	}
	if f.mode4, err = os.Stat(f.path4); err != nil {
		return nil, err
	}
	if b, err := os.ReadFile(f.path6); err == nil {
		f.v6 = b
		f.mode6, _ = os.Stat(f.path6)
	} else if !os.IsNotExist(err) {
		return nil, err
	}
	def, _ := os.ReadFile(env.Path(defaultsFile))
	f.ipv6 = keepsIPv6(def)
	for _, b := range [][]byte{f.v4, f.v6} {
		if b == nil {
			continue
		}
		if !fileComplete(b) {
			return nil, fmt.Errorf("a ufw rules file does not end in COMMIT, though ufw's lock is held: %w", netfilter.ErrUnsupported)
		}
		ts, err := parseTuples(b)
		if err != nil {
			return nil, err
		}
		f.tuples = append(f.tuples, ts...)
	}
	return f, nil
}

// ruleLine is the iptables rule ufw writes under a tuple for meshd's openings' shapes:
// allow or route:allow, one protocol, one port, from anywhere or one prefix, optionally in on
// one interface. v6 picks ufw's IPv6 chains.
func ruleLine(text string, v6 bool) (string, error) {
	f := strings.Fields(text)
	if len(f) != 7 || (f[0] != "allow" && f[0] != "route:allow") || f[4] != "any" {
		return "", fmt.Errorf("ufw tuple %q: not a shape meshd writes: %w", text, netfilter.ErrUnsupported)
	}
	chain := "ufw-user-input"
	if f[0] == "route:allow" {
		chain = "ufw-user-forward"
	}
	if v6 {
		chain = strings.Replace(chain, "ufw-", "ufw6-", 1)
	}
	var b strings.Builder
	b.WriteString("-A " + chain)
	if _, iface, ok := strings.Cut(f[6], "_"); ok {
		b.WriteString(" -i " + iface)
	}
	b.WriteString(" -p " + f[1] + " --dport " + f[2])
	if f[5] != "0.0.0.0/0" && f[5] != "::/0" {
		b.WriteString(" -s " + f[5])
	}
	b.WriteString(" -j ACCEPT")
	return b.String(), nil
}

// sourceIsV6 says whether a tuple's source is an IPv6 one (the rule lives in user6.rules only).
func sourceIsV6(text string) bool {
	f := strings.Fields(text)
	return len(f) == 7 && strings.Contains(f[5], ":")
}

// v6Twin is the IPv6 tuple ufw writes beside an IPv4 one from anywhere; "" when the rule
// has an IPv4 source and so no twin.
func v6Twin(text string) string {
	f := strings.Fields(text)
	if len(f) != 7 || f[5] != "0.0.0.0/0" {
		return ""
	}
	return strings.ReplaceAll(text, "0.0.0.0/0", "::/0")
}

// editRules rewrites one rules file: the blocks of the removed rules out, the added ones in
// before "### END RULES ###", everything else byte for byte. v6 says which file it is.
func editRules(file []byte, add, remove []marked, v6 bool) ([]byte, error) {
	lines := strings.SplitAfter(string(file), "\n")
	end := -1
	for i, l := range lines {
		if strings.TrimRight(l, "\n") == "### END RULES ###" {
			end = i
			break
		}
	}
	gone := map[string]bool{}
	for _, r := range remove {
		gone[r.Slot()] = true
	}
	if end < 0 {
		// The file as the package shipped it (ufw writes its full layout, markers and all, the
		// first time it writes a rule there): left alone when nothing of it changes; else ufw
		// itself writes it (the caller falls back to ufw's commands).
		if !touches(file, add, gone, v6) {
			return file, nil
		}
		return nil, fmt.Errorf("no \"### END RULES ###\" line (ufw has not written this file yet): %w", netfilter.ErrUnsupported)
	}
	var out []string
	for i := 0; i < end; i++ {
		l := lines[i]
		if !strings.HasPrefix(l, "### tuple ### ") {
			out = append(out, l)
			continue
		}
		t, err := parseTupleLine(strings.TrimRight(l, "\n"))
		if err != nil {
			return nil, err
		}
		folded := marked{t.Comment, strings.ReplaceAll(t.Text, "::/0", "0.0.0.0/0")}
		if !gone[(marked{t.Comment, t.Text}).Slot()] && !gone[folded.Slot()] {
			out = append(out, l)
			continue
		}
		// skip the tuple, its rule lines and the blank line that ends its block
		for i+1 < end && strings.TrimSpace(lines[i+1]) != "" {
			i++
		}
		if i+1 < end {
			i++
		}
	}
	for _, a := range add {
		text := a.text
		isV6 := sourceIsV6(text)
		if v6 && !isV6 {
			if text = v6Twin(text); text == "" {
				continue
			}
		} else if !v6 && isV6 {
			continue
		}
		rule, err := ruleLine(text, v6)
		if err != nil {
			return nil, err
		}
		out = append(out, "### tuple ### "+text+" comment="+hex.EncodeToString([]byte(a.mark))+"\n", rule+"\n", "\n")
	}
	out = append(out, lines[end:]...)
	return []byte(strings.Join(out, "")), nil
}

// touches says whether an edit would change file: a tuple it holds is removed, or an added
// rule belongs in it (an IPv6 twin or source in user6.rules, an IPv4 one in user.rules).
func touches(file []byte, add []marked, gone map[string]bool, v6 bool) bool {
	ts, _ := parseTuples(file)
	for _, t := range ts {
		if gone[(marked{t.Comment, t.Text}).Slot()] || gone[(marked{t.Comment, strings.ReplaceAll(t.Text, "::/0", "0.0.0.0/0")}).Slot()] {
			return true
		}
	}
	for _, a := range add {
		isV6 := sourceIsV6(a.text)
		if isV6 == v6 || (v6 && v6Twin(a.text) != "") {
			return true
		}
	}
	return false
}

// writeFile replaces a rules file in one rename, with its mode and owner kept.
func writeFile(path string, b []byte, was os.FileInfo) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".meshd-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err = tmp.Write(b); err == nil {
		err = tmp.Sync()
	}
	if err == nil && was != nil {
		if err = tmp.Chmod(was.Mode().Perm()); err == nil {
			if st, ok := was.Sys().(*syscall.Stat_t); ok {
				err = tmp.Chown(int(st.Uid), int(st.Gid))
			}
		}
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// convergeFiles is the batch: under ufw's lock, read its files, decide, and when something
// changes load the edited files into the kernel (one iptables-restore --noflush per family,
// which refills ufw's user chains exactly as `ufw reload` would) and then write them. A kernel
// load that fails leaves the files as they were, so the next pass decides again.
func (d *driver) convergeFiles(ctx context.Context, want map[string]netfilter.Opening, keys []string) (rules []marked, heldBy map[string]string, have []marked, out netfilter.Outcome, err error) {
	unlock, err := lock(ctx, d.Env)
	if err != nil {
		return nil, nil, nil, out, err
	}
	defer func() { unlock() }()
	files, err := readFiles(d.Env)
	if err != nil {
		return nil, nil, nil, out, err
	}
	rules, heldBy, failed := wantedRules(files.tuples, want, keys, d.Priv, files.ipv6)
	have = markedTuples(files.tuples)
	add, remove := netfilter.Plan(have, rules)
	out = netfilter.NewOutcome()
	out.Failed = failed
	if len(add)+len(remove) == 0 {
		return rules, heldBy, have, out, nil
	}
	for _, t := range add {
		out.MissingBefore[t.mark] = true
	}
	if err := d.writeBatch(ctx, files, add, remove); errors.Is(err, netfilter.ErrUnsupported) {
		// ufw's files are not in the layout meshd edits (a file ufw has not written yet): ufw's
		// own commands write it, one rule each, this once.
		unlock()
		unlock = func() {}
		return d.convergeCommands(ctx, want, keys)
	} else if err != nil {
		d.Env.Logger().Warn("ufw batch failed", "added", len(add), "removed", len(remove), "err", err)
		for _, t := range add {
			out.Failed[t.mark] = err.Error()
		}
		return rules, heldBy, have, out, nil
	}
	out.Added, out.Removed = len(add), len(remove)
	// what ufw now holds: have less the removed, plus the added
	gone := netfilter.HeldSlots(remove)
	var now []marked
	for _, h := range have {
		if gone[h.Slot()] == 0 {
			now = append(now, h)
		}
	}
	return rules, heldBy, append(now, add...), out, nil
}

// writeBatch edits both files, loads them where ufw's chains are loaded, then writes them.
func (d *driver) writeBatch(ctx context.Context, files *rulesFiles, add, remove []marked) error {
	v4, err := editRules(files.v4, add, remove, false)
	if err != nil {
		return fmt.Errorf("%s: %w", UserRules, err)
	}
	var v6 []byte
	if files.v6 != nil {
		add6 := add
		if !files.ipv6 { // ufw writes no IPv6 twin then
			add6 = nil
		}
		if v6, err = editRules(files.v6, add6, remove, true); err != nil {
			return fmt.Errorf("%s: %w", User6, err)
		}
	}
	backend := d.found.Backend
	if backend == "" {
		backend = "nft"
	}
	x, _, err := xt.Read(ctx, d.Env, backend, false)
	if err != nil {
		return err
	}
	if x != nil && x.Has("ufw-user-input") { // ufw is loaded: the kernel first
		if _, err := d.Env.RunIn(ctx, v4, xt.Bin(backend, false, "-restore"), "--noflush"); err != nil {
			return fmt.Errorf("load ufw's edited user.rules: %w", err)
		}
		if v6 != nil && files.ipv6 {
			if _, err := d.Env.RunIn(ctx, v6, xt.Bin(backend, true, "-restore"), "--noflush"); err != nil {
				_, _ = d.Env.RunIn(ctx, files.v4, xt.Bin(backend, false, "-restore"), "--noflush")
				return fmt.Errorf("load ufw's edited user6.rules: %w", err)
			}
		}
	}
	if err := writeFile(files.path4, v4, files.mode4); err != nil {
		return err
	}
	if v6 != nil {
		if err := writeFile(files.path6, v6, files.mode6); err != nil {
			return err
		}
	}
	return nil
}
