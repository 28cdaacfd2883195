package agent

// The alert rules in docs/alerts.yml: promtool takes them, and every metric they name is one this
// agent serves.

import (
	"os"
	"os/exec"
	"regexp"
	"testing"

	"meshd/internal/testenv"
)

func TestAlertRulesPassPromtool(t *testing.T) {
	const rules = "../docs/alerts.yml"
	if m := testenv.Missing(false, "promtool"); len(m) > 0 {
		testenv.Prereq(t, "checking %s needs promtool (Debian package prometheus; scripts/deps.sh installs it)", rules)
	}
	out, err := exec.Command("promtool", "check", "rules", rules).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules %s: %v\n%s", rules, err, out)
	}
	b, err := os.ReadFile(rules)
	if err != nil {
		t.Fatal(err)
	}
	served := map[string]bool{}
	for _, d := range append(boardDescs, descChanged) {
		served[regexp.MustCompile(`fqName: "([a-z_]+)"`).FindStringSubmatch(d.String())[1]] = true
	}
	for _, m := range regexp.MustCompile(`\b(meshd_[a-z_]+)\b`).FindAllStringSubmatch(string(b), -1) {
		if !served[m[1]] {
			t.Errorf("%s names %s, which the agent does not serve", rules, m[1])
		}
	}
}
