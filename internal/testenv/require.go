package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// CI reports whether the tests run under CI (CI set to anything but "", "0" or "false"), where a
// missing prerequisite is a failure rather than a reason to skip.
func CI() bool {
	v := strings.ToLower(os.Getenv("CI"))
	return v != "" && v != "0" && v != "false"
}

// Missing lists what this host lacks: "root" when root is asked for and the process is not, and
// each tool not found on PATH.
func Missing(root bool, tools ...string) []string {
	var missing []string
	if root && os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	return missing
}

// Require skips the test (fails it under CI) when anything is missing; what names the test
// bed that needs it ("lab", "openings lab").
func Require(t testing.TB, what string, missing ...string) {
	t.Helper()
	if len(missing) > 0 {
		Prereq(t, "%s needs %s", what, strings.Join(missing, ", "))
	}
}

// RequireRoot is Require for root and the given tools.
func RequireRoot(t testing.TB, what string, tools ...string) {
	t.Helper()
	Require(t, what, Missing(true, tools...)...)
}

// Prereq says a prerequisite is missing: it fails the test under CI and skips it otherwise,
// printing why either way.
func Prereq(t testing.TB, format string, args ...any) {
	t.Helper()
	why := fmt.Sprintf(format, args...)
	if CI() {
		t.Fatalf("prerequisite missing under CI: %s", why)
	}
	t.Skipf("prerequisite missing (set CI=true to make this a failure): %s", why)
}
