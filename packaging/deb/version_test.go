package deb

import (
	"os/exec"
	"testing"
	"time"
)

func TestVersion(t *testing.T) {
	at := time.Date(2026, 12, 2, 23, 30, 0, 0, time.UTC)
	for _, c := range []struct{ describe, want string }{
		{"v1.2.0", "1.2.0"},
		{"1.2.0", "1.2.0"},
		{"v1.2.0-3-gabc1234", "1.2.0+git20261202.abc1234"},
		{"v1.2.0-3-gabc1234-dirty", "1.2.0+git20261202.abc1234+modified"},
		{"abc1234", "0.0~git20261202.abc1234"},
		{"abc1234-dirty", "0.0~git20261202.abc1234+modified"},
	} {
		got, err := Version(c.describe, at)
		if err != nil || got != c.want {
			t.Errorf("Version(%q) = %q, %v; want %q", c.describe, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "release one", "v1.0 beta"} {
		if v, err := Version(bad, at); err == nil {
			t.Errorf("Version(%q) = %q; want an error", bad, v)
		}
	}
}

// Debian orders the forms as a release line should: untagged builds before the first tag, a
// tag's later commits after it and before the next tag.
func TestVersionOrder(t *testing.T) {
	if _, err := exec.LookPath("dpkg"); err != nil {
		t.Skip("no dpkg to compare versions with")
	}
	order := []string{"0.0~git20261202.abc1234", "0.1.0", "0.1.0+git20261203.def5678", "0.1.1"}
	for i := 0; i+1 < len(order); i++ {
		if err := exec.Command("dpkg", "--compare-versions", order[i], "lt", order[i+1]).Run(); err != nil {
			t.Errorf("dpkg says %s is not before %s", order[i], order[i+1])
		}
	}
}
