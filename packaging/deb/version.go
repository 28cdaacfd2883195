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
// has changes) and the commit's date into a Debian version:
//
//	v1.2.0                  -> 1.2.0
//	v1.2.0-3-gabc1234       -> 1.2.0+git20261202.abc1234   (after 1.2.0, before 1.2.1)
//	abc1234 (no tag yet)    -> 0.0~git20261202.abc1234
//
// and a dirty tree adds +modified. The version has no Debian revision: meshd is its own upstream
// (a native package).
func Version(describe string, date time.Time) (string, error) {
	d, dirty := strings.CutSuffix(strings.TrimSpace(describe), "-dirty")
	stamp := "git" + date.UTC().Format("20060102")
	var v string
	if m := describeRe.FindStringSubmatch(d); m != nil && tagRe.MatchString(m[1]) {
		v = tagRe.FindStringSubmatch(m[1])[1] + "+" + stamp + "." + m[3]
	} else if m := tagRe.FindStringSubmatch(d); m != nil && !hashRe.MatchString(d) {
		v = m[1]
	} else if hashRe.MatchString(d) {
		v = "0.0~" + stamp + "." + d
	} else {
		return "", fmt.Errorf("git describe %q: neither a tag vX.Y.Z, TAG-N-gHASH nor a commit", describe)
	}
	if dirty {
		v += "+modified"
	}
	return v, nil
}

// GitVersion is Version of the repository at dir's HEAD, and the commit's time (for the
// package's file times and SOURCE_DATE_EPOCH).
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
	describe, err := git("describe", "--tags", "--always", "--abbrev=7", "--dirty")
	if err != nil {
		return "", time.Time{}, err
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
	v, err := Version(describe, at)
	return v, at, err
}
