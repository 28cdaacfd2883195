package deb

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"meshd/internal/testenv"
)

func TestVersion(t *testing.T) {
	at := time.Date(2026, 12, 2, 23, 30, 0, 0, time.UTC)
	for _, c := range []struct {
		describe string
		count    int
		want     string
	}{
		{"v1.2.0", 40, "1.2.0"},
		{"1.2.0", 40, "1.2.0"},
		{"v1.2.0-3-gabc1234", 43, "1.2.0+r3.git20261202.abc1234"},
		{"v1.2.0-3-gabc1234-dirty", 43, "1.2.0+r3.git20261202.abc1234+modified"},
		{"abc1234", 683, "0.0~r683.git20261202.abc1234"},
		{"abc1234-dirty", 683, "0.0~r683.git20261202.abc1234+modified"},
	} {
		got, err := Version(c.describe, c.count, at)
		if err != nil || got != c.want {
			t.Errorf("Version(%q, %d) = %q, %v; want %q", c.describe, c.count, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "release one", "v1.0 beta"} {
		if v, err := Version(bad, 1, at); err == nil {
			t.Errorf("Version(%q) = %q; want an error", bad, v)
		}
	}
	if v, err := Version("abc1234", 0, at); err == nil {
		t.Errorf("Version of a commit with no count = %q; want an error", v)
	}
}

// before says whether dpkg sorts a before b.
func before(t *testing.T, a, b string) bool {
	t.Helper()
	testenv.Require(t, "dpkg's version order", testenv.Missing(false, "dpkg")...)
	return exec.Command("dpkg", "--compare-versions", a, "lt", b).Run() == nil
}

// Debian orders the forms as a release line should: the first builds' form, untagged builds,
// the first tag, a tag's later commits after it and before the next tag.
func TestVersionOrder(t *testing.T) {
	order := []string{"0.0~git20261202.ae14058", "0.0~r683.git20261202.abc1234", "0.0~r1200.git20261201.0aa0000",
		"0.1.0", "0.1.0+r2.git20261203.def5678", "0.1.0+r10.git20261203.0123456", "0.1.1"}
	for i := 0; i+1 < len(order); i++ {
		if !before(t, order[i], order[i+1]) {
			t.Errorf("dpkg says %s is not before %s", order[i], order[i+1])
		}
	}
}

// Two commits of one day, the later one's hash sorting first (05f087a after ae14058, as the
// issue saw), and the later one rebased on a day before: the later commit is the upgrade.
func TestVersionOneDay(t *testing.T) {
	day := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	first, err := Version("ae14058", 600, day)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		hash  string
		count int
		at    time.Time
	}{
		{"05f087a", 601, day.Add(8 * time.Hour)},
		{"05f087a", 601, day.Add(-48 * time.Hour)}, // its author's date, after a rebase
	} {
		next, err := Version(c.hash, c.count, c.at)
		if err != nil {
			t.Fatal(err)
		}
		if !before(t, first, next) {
			t.Errorf("dpkg sorts %s (the later commit) before %s", next, first)
		}
	}
}

// A real repository: each commit's GitVersion sorts after its parent's, two commits of one
// second included; a shallow clone is refused rather than versioned too low.
func TestGitVersionSorts(t *testing.T) {
	testenv.Require(t, "a repository to version", testenv.Missing(false, "git")...)
	dir := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_DATE=2026-12-02T10:00:00Z", "GIT_COMMITTER_DATE=2026-12-02T10:00:00Z",
			"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q", "-b", "main")
	var versions []string
	for i := range 12 {
		if err := os.WriteFile(filepath.Join(dir, "f"), []byte{byte(i)}, 0o644); err != nil {
			t.Fatal(err)
		}
		git("add", "f")
		git("commit", "-q", "-m", "c")
		v, _, err := GitVersion(dir)
		if err != nil {
			t.Fatal(err)
		}
		versions = append(versions, v)
	}
	for i := 0; i+1 < len(versions); i++ {
		if !before(t, versions[i], versions[i+1]) {
			t.Errorf("commit %d's %s does not sort before commit %d's %s", i, versions[i], i+1, versions[i+1])
		}
	}
	shallow := filepath.Join(t.TempDir(), "shallow")
	git("clone", "-q", "--depth", "1", "file://"+dir, shallow)
	if v, _, err := GitVersion(shallow); err == nil {
		t.Errorf("a shallow clone is versioned %s; want a refusal", v)
	}
}
