package deb

import (
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

var (
	tagRe      = regexp.MustCompile(`^v?([0-9][0-9A-Za-z.+~]*)$`)
	describeRe = regexp.MustCompile(`^(.+)-([0-9]+)-g([0-9a-f]{4,40})$`)
	hashRe     = regexp.MustCompile(`^[0-9a-f]{4,40}$`)
)

// Version turns describe (`git describe --tags --always --abbrev=7`, with -dirty when the tree
// has changes), count (`git rev-list --count HEAD`: the commits HEAD holds) and the commit's date
// into a Debian version:
//
//	v1.2.0                  -> 1.2.0
//	v1.2.0-3-gabc1234       -> 1.2.0+r3.git20261202.abc1234     (after 1.2.0, before 1.2.1)
//	abc1234 (no tag yet)    -> 0.0~r683.git20261202.abc1234
//
// and a dirty tree adds +modified. The version has no Debian revision: meshd is its own upstream
// (a native package).
//
// Between tags the number after r is what orders builds: commits since the tag, or every commit
// HEAD holds when there is no tag. A commit holds all of its ancestors and itself, so every
// commit sorts after each one it descends from, on any day (the date and hash only say which
// build it is: two builds of one day would otherwise sort by hash). A rebase of unpublished work
// onto a later main holds more commits, so it still sorts after main's. "r" sorts after "git",
// so these versions also sort after the first builds' 0.0~gitDATE.HASH.
func Version(describe string, count int, date time.Time) (string, error) {
	d, dirty := strings.CutSuffix(strings.TrimSpace(describe), "-dirty")
	stamp := "git" + date.UTC().Format("20060102")
	var v string
	if m := describeRe.FindStringSubmatch(d); m != nil && tagRe.MatchString(m[1]) {
		v = tagRe.FindStringSubmatch(m[1])[1] + "+r" + m[2] + "." + stamp + "." + m[3]
	} else if m := tagRe.FindStringSubmatch(d); m != nil && !hashRe.MatchString(d) {
		v = m[1]
	} else if hashRe.MatchString(d) {
		if count < 1 {
			return "", fmt.Errorf("git describe %q: a commit with no tag needs its count of commits (got %d)", describe, count)
		}
		v = "0.0~r" + strconv.Itoa(count) + "." + stamp + "." + d
	} else {
		return "", fmt.Errorf("git describe %q: neither a tag vX.Y.Z, TAG-N-gHASH nor a commit", describe)
	}
	if dirty {
		v += "+modified"
	}
	return v, nil
}

// GitVersion is Version of the repository at dir's HEAD, and the commit's time (for the
// package's file times and SOURCE_DATE_EPOCH). A shallow clone is refused: it holds too few
// commits to count, and its build would sort before older ones (`git fetch --unshallow` first).
func GitVersion(dir string) (string, time.Time, error) {
	git := func(args ...string) (string, error) {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	shallow, err := git("rev-parse", "--is-shallow-repository")
	if err != nil {
		return "", time.Time{}, err
	}
	if shallow == "true" {
		return "", time.Time{}, fmt.Errorf("%s is a shallow clone: its commits cannot be counted for the version (git fetch --unshallow)", dir)
	}
	describe, err := git("describe", "--tags", "--always", "--abbrev=7", "--dirty")
	if err != nil {
		return "", time.Time{}, err
	}
	n, err := git("rev-list", "--count", "HEAD")
	if err != nil {
		return "", time.Time{}, err
	}
	count, err := strconv.Atoi(n)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("commit count %q: %w", n, err)
	}
	ct, err := git("log", "-1", "--format=%ct")
	if err != nil {
		return "", time.Time{}, err
	}
	sec, err := strconv.ParseInt(ct, 10, 64)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("commit time %q: %w", ct, err)
	}
	at := time.Unix(sec, 0).UTC()
	v, err := Version(describe, count, at)
	return v, at, err
}
