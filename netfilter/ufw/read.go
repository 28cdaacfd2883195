package ufw

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"meshd/netfilter"
)

// tuple is one rule of ufw's user.rules, from its "### tuple ###" line.
type tuple struct {
	Text    string // the tuple without its comment
	Comment string // decoded
	Route   bool
}

// readTuples reads the rules ufw keeps in user.rules and user6.rules. ufw rewrites those
// files in place (truncate, then write, under its own lock in /run), so a read can land on
// half a file: a file that does not end in COMMIT is read again, and still half after a few
// tries is an error, never a shorter rule list (meshd would take the found firewall's own
// rules for missing, and a `ufw allow … comment meshd:…` over one would re-label it as
// meshd's). A missing user.rules is an error for the same reason; user6.rules may be absent.
func readTuples(ctx context.Context, env netfilter.Env) ([]tuple, error) {
	var out []tuple
	for _, p := range []string{UserRules, User6} {
		b, err := readWholeFile(ctx, env, p)
		if err != nil {
			return nil, err
		}
		ts, err := parseTuples(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		out = append(out, ts...)
	}
	return out, nil
}

// parseTuples reads the "### tuple ###" lines of one of ufw's rules files.
func parseTuples(b []byte) ([]tuple, error) {
	var out []tuple
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
func parseTupleLine(l string) (tuple, error) {
	t := tuple{Text: strings.TrimPrefix(l, "### tuple ### ")}
	if i := strings.Index(t.Text, " comment="); i >= 0 {
		c, err := hex.DecodeString(t.Text[i+len(" comment="):])
		if err != nil {
			return t, fmt.Errorf("comment of %q is not hex: %w: %w", l, err, netfilter.ErrUnsupported)
		}
		t.Comment, t.Text = string(c), t.Text[:i]
	}
	t.Route = strings.HasPrefix(t.Text, "route:")
	return t, nil
}

// fileTries is how many times a rules file caught mid-write is read before giving up.
const fileTries = 10

// readWholeFile reads one of ufw's rules files, again while it is caught mid-write.
func readWholeFile(ctx context.Context, env netfilter.Env, p string) ([]byte, error) {
	for try := 1; ; try++ {
		b, ok, err := env.ReadFile(ctx, p)
		switch {
		case err != nil:
			return nil, err
		case !ok && p == User6:
			return nil, nil
		case !ok:
			return nil, fmt.Errorf("ufw is in use but %s is missing", p)
		case fileComplete(b):
			return b, nil
		case try == fileTries:
			return nil, fmt.Errorf("%s: still incomplete (no closing COMMIT) after %d reads; is something rewriting it?", p, try)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Duration(try) * 20 * time.Millisecond):
		}
	}
}

// fileComplete says whether a rules file is whole: its last line is COMMIT.
func fileComplete(b []byte) bool {
	return bytes.HasSuffix(bytes.TrimRight(b, " \t\n"), []byte("\nCOMMIT"))
}
